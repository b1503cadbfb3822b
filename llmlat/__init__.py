"""llmlat: measure how concurrency changes LLM API latency, fit queueing models, plan capacity.

The public API is listed in ``__all__``. Heavy pieces (statsmodels, seaborn, the simulator)
load on first use, so ``import llmlat`` stays cheap and never imports IPython or patches asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from llmlat._version import __version__

# public name -> module that defines it
_LAZY = {
    "sweep": "llmlat.engine",
    "asweep": "llmlat.engine",
    "SweepResult": "llmlat.results",
    "read": "llmlat.results",
    "fit": "llmlat.fitting",
    "compare": "llmlat.fitting",
    "FitResult": "llmlat.fitting",
    "Simulator": "llmlat.sim",
    "SimConfig": "llmlat.sim",
    "Record": "llmlat.schema",
    "Attempt": "llmlat.schema",
}
_SUBMODULES = ("queueing", "plot", "sim", "schema", "datasets")

__all__ = [
    "Attempt",
    "FitResult",
    "Record",
    "SimConfig",
    "Simulator",
    "SweepResult",
    "__version__",
    "asweep",
    "compare",
    "datasets",
    "fit",
    "load_ipython_extension",
    "plot",
    "queueing",
    "read",
    "schema",
    "sim",
    "sweep",
    "unload_ipython_extension",
]

if TYPE_CHECKING:  # pragma: no cover
    from llmlat import datasets, plot, queueing, schema, sim
    from llmlat.engine import asweep, sweep
    from llmlat.fitting import FitResult, compare, fit
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
    return sorted(set(globals()) | set(__all__))


def load_ipython_extension(ipython: Any) -> None:
    """Register the llmlat magics (``%load_ext llmlat``).

    Parameters
    ----------
    ipython : IPython.core.interactiveshell.InteractiveShell
        The running shell.
    """
    from llmlat.ipython import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove the llmlat magics again (``%unload_ext llmlat``).

    Parameters
    ----------
    ipython : IPython.core.interactiveshell.InteractiveShell
        The running shell.
    """
    from llmlat.ipython import unload_ipython_extension as unload

    unload(ipython)
