"""Estimate queueing models (servers c and rate mu, or batching parameters) from measured latency.

``fit(data, model=...)`` returns a :class:`FitResult` in the statsmodels results style. A
closed-loop sweep (``level_kind == "concurrency"``) is fitted with the finite-population form of
the station model (N clients, think time Z), an open-loop sweep (``"rate"``) with the open form.

Estimation:

- ``method="ml"``: maximum likelihood on every request's time, for the models that give a
  response-time distribution (``mm1``, ``mmc``, ``closed``), fitted with statsmodels'
  ``GenericLikelihoodModel``.
- ``method="wls"``: weighted least squares on one per-level statistic (mean, p50 or p95),
  weights from its standard error, as a Gaussian likelihood with an estimated scale (so AIC is
  defined); the only option for ``mgc``, ``batch`` and per-level tables.

Maximum likelihood on a level with many requests works on equal-count bins of its times
(:data:`_BINS`), so a million rows fit in about a second; the reported log-likelihood is that
of every request.

Response-time quantiles (``predict``, ``curve``, ``plan(p95=...)``) are exact for the M/M/c
family; for ``mgc`` (and an open ``mmc`` fit with a measured service CV) they take gamma
service with that CV plus the exact M/D/c and M/M/c waits interpolated in CV^2
(:func:`llmlat.queueing.mgc_response_quantile`), and for ``batch`` a
request's own output length (its measured distribution) times the step time, plus the mean
wait.

The integer parameter (servers ``c``, slot cap ``slots``) is profiled: the likelihood is
maximised over the continuous parameters at each integer and the best integer is kept; its
interval is the set of integers within the chi-square(1) cut of the maximum.

The package holds one job per module: ``_estimate`` (likelihoods, profiles, statsmodels glue),
``_fit`` (``fit`` and ``compare``), ``_results`` (:class:`FitResult`) and ``_plan`` (:class:`Plan`);
the station models are in :mod:`llmlat._models` and the observations in :mod:`llmlat._aggregate`.
"""

from llmlat.fitting._estimate import NeedsData
from llmlat.fitting._fit import MAX_REFUSED, compare, fit
from llmlat.fitting._plan import Plan, PlanCheck
from llmlat.fitting._results import FitResult

__all__ = ["MAX_REFUSED", "FitResult", "NeedsData", "Plan", "PlanCheck", "compare", "fit"]
