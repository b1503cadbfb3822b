"""llmlat: measure how concurrency changes LLM API latency, fit queueing models, plan capacity.

The public API is what ``__all__`` lists; everything else is an implementation detail that may
change. Measure with :func:`sweep` (or :func:`asweep` under a running event loop, or a
:class:`Sweeper` set up once and run later); every option of a sweep is a field of
:class:`SweepConfig` (its views: the :class:`Target` and the :class:`RetryPolicy`). Get a
:class:`SweepResult` back (:func:`read` opens a saved one; :func:`compare_runs` and
:func:`compare_fits` put several side by side; :func:`policy_lab` measures client designs);
fit queueing models with :func:`fit` and :func:`compare` (a :class:`FitResult`;
:func:`verify_plan` measures its ``plan()``; a fit the data cannot support raises
:class:`NeedsData`, which tabulates what to measure); test against the built-in :class:`Simulator`
(a :class:`SimConfig`); price requests from the tokens the server reported with
:class:`Prices` (:func:`request_costs`, ``summary(prices=...)``, the ``prices=`` option).
:mod:`llmlat.datasets`, :mod:`llmlat.plot`, :mod:`llmlat.queueing` and :mod:`llmlat.schema`
(the columns of :class:`Record` and :class:`Attempt`) are public modules.

Heavy pieces (statsmodels, seaborn, the simulator) load on first use, so ``import llmlat`` stays
cheap and never imports IPython or patches asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmlat._version import __version__

# public name -> module that defines it (imported on first use)
_LAZY = {
    "sweep": "llmlat._engine",
    "asweep": "llmlat._engine",
    "Sweeper": "llmlat._engine",
    "SweepConfig": "llmlat.config",
    "Target": "llmlat.config",
    "RetryPolicy": "llmlat.config",
    "SweepResult": "llmlat.results",
    "read": "llmlat.results",
    "fit": "llmlat.fitting",
    "compare": "llmlat.fitting",
    "FitResult": "llmlat.fitting",
    "NeedsData": "llmlat.fitting",
    "Simulator": "llmlat.sim",
    "SimConfig": "llmlat.sim",
    "Record": "llmlat.schema",
    "Attempt": "llmlat.schema",
    "verify_plan": "llmlat._verify",
    "Prices": "llmlat.cost",
    "request_costs": "llmlat.cost",
    "compare_runs": "llmlat.comparison",
    "compare_fits": "llmlat.comparison",
    "policy_lab": "llmlat.policy",
}
# public modules, reachable as attributes without importing them first (``sim`` too, for the
# names it has always offered, though its two public classes are exported here)
_SUBMODULES = ("datasets", "plot", "queueing", "schema", "sim")

__all__ = [
    "Attempt",
    "FitResult",
    "NeedsData",
    "Prices",
    "Record",
    "RetryPolicy",
    "SimConfig",
    "Simulator",
    "SweepConfig",
    "SweepResult",
    "Sweeper",
    "Target",
    "__version__",
    "asweep",
    "compare",
    "compare_fits",
    "compare_runs",
    "datasets",
    "fit",
    "plot",
    "policy_lab",
    "queueing",
    "read",
    "request_costs",
    "schema",
    "sweep",
    "verify_plan",
]

if TYPE_CHECKING:  # pragma: no cover
    from llmlat import datasets, plot, queueing, schema
    from llmlat._engine import Sweeper, asweep, sweep
    from llmlat._verify import verify_plan
    from llmlat.comparison import compare_fits, compare_runs
    from llmlat.config import RetryPolicy, SweepConfig, Target
    from llmlat.cost import Prices, request_costs
    from llmlat.fitting import FitResult, NeedsData, compare, fit
    from llmlat.policy import policy_lab
    from llmlat.results import SweepResult, read
    from llmlat.schema import Attempt, Record
    from llmlat.sim import SimConfig, Simulator


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"llmlat.{name}")
    else:
        raise AttributeError(f"module 'llmlat' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # what tab completion offers: the public API, not this module's own imports
    dunders = {name for name in globals() if name.startswith("__")}
    return sorted({*__all__, *dunders, "load_ipython_extension", "unload_ipython_extension"})


def load_ipython_extension(ipython: Any) -> None:
    """Register the llmlat magics (``%load_ext llmlat``).

    Parameters
    ----------
    ipython : IPython.core.interactiveshell.InteractiveShell
        The running shell.
    """
    from llmlat._ipython import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the llmlat magics again (``%unload_ext llmlat``).

    Parameters
    ----------
    ipython : IPython.core.interactiveshell.InteractiveShell
        The running shell.
    """
    from llmlat._ipython import unload_ipython_extension as unload

    unload(ipython)
