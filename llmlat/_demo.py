"""``llmlat demo``: the whole job end to end on the built-in simulator, no key, no network.

Sweep the ``article`` replica at concurrency 1..100, print the per-level summary, fit c and
mu with confidence intervals, plan the load that keeps p95 under a target, and write an HTML
report with the figures and the dataset.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["DEMO_LEVELS", "run_demo"]

#: The concurrency levels of the demo sweep.
DEMO_LEVELS = (1, 2, 5, 10, 20, 50, 100)
# quick: two levels above the article replica's 32 slots (and none past its 64-request limit),
# so the fit can find the cap, and requests a quarter as long (see run_demo)
_QUICK_LEVELS = (1, 4, 16, 40, 64)
_QUICK_OUTPUT_TOKENS = 8
# the full demo's longest level: level 100, past the replica's 64-request limit, is left out of
# the fit for its 429s and only has to show them; the cap keeps the demo near 3 minutes
_MAX_REQUESTS = 300


def _requests_per_level(level: int, quick: bool) -> int:
    # the start-up transient (the first N), then the max(20, 3N) steady requests that the
    # summary's steady check wants (llmlat._summary); the full demo adds N more for the drain,
    # the last requests sent, which the batch fit leaves out as the batch shrinks. Without them
    # level 10 kept 5 requests, and the fit warned that the batch model did not fit (chi-square
    # 92 on 8 df, join_steps' interval missing the simulator's one step)
    steady = level + max(20, 3 * level)
    if quick:  # short enough for tests; its fit still holds the truth, slots 32..33 a set
        return steady
    return min(steady + (level if level > 1 else 0), _MAX_REQUESTS)


def run_demo(
    out: str | Path = "report",
    *,
    levels: tuple[int, ...] = DEMO_LEVELS,
    preset: str = "article",
    p95_s: float | None = None,
    seed: int = 0,
    quick: bool = False,
    progress: bool = True,
    stream: Any = None,
) -> Path | None:
    """Run the demo study and write its report.

    Ctrl-C (or SIGTERM under the ``llmlat`` command) stops the sweep gracefully, prints what
    was measured and returns without a fit or a report.

    Parameters
    ----------
    out : str or path, default "report"
        The report folder.
    levels : tuple of int, default DEMO_LEVELS
        Concurrency levels to sweep (ignored when ``quick``).
    preset : str, default "article"
        The simulator preset.
    p95_s : float, optional
        The p95 latency target of the plan; default: twice the p95 measured at the lightest
        level, the kind of budget an interactive feature has.
    seed : int, default 0
        Seed of the simulator and the sweep.
    quick : bool, default False
        A shorter sweep, for tests and a first look: 5 levels, each just long enough for a
        steady state, on the preset with 8 output tokens per request (a quarter of the
        ``article`` preset's 32, so every request is about 4 times shorter).
    progress : bool, default True
        Show progress bars.
    stream : file-like, optional
        Where to print (default: standard output).

    Returns
    -------
    pathlib.Path or None
        The report's ``index.html``; None when the sweep was interrupted.
    """
    from llmlat._display import compact, to_text
    from llmlat._engine import sweep
    from llmlat._report import build_report
    from llmlat.sim import SimConfig

    out_stream = stream or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out_stream, flush=True)

    levels = _QUICK_LEVELS if quick else tuple(levels)
    requests = [_requests_per_level(n, quick) for n in levels]
    shorter = {"output_tokens": _QUICK_OUTPUT_TOKENS} if quick else {}
    say(
        f"llmlat demo: simulator preset {preset!r}"
        + (f" with {_QUICK_OUTPUT_TOKENS} output tokens (quick)" if quick else "")
        + f", concurrency {list(levels)}, seed {seed}"
    )
    started = time.perf_counter()
    result = sweep(
        url=None,
        simulator=SimConfig.from_preset(preset, seed=seed, **shorter),
        concurrency=list(levels),
        requests=requests,
        seed=seed,
        progress=progress,
    )
    say(f"\nMeasured {len(result.requests)} requests in {time.perf_counter() - started:.0f} s.\n")
    summary = result.summary()
    say(to_text(compact(summary)))
    if result.meta.get("interrupted"):  # Ctrl-C or SIGTERM: stop, as `llmlat sweep` does
        say("\ninterrupted: the table above is partial; no fit, plan or report")
        return None
    if p95_s is None:
        lightest = summary.loc[summary["level"].idxmin()]
        p95_s = round(2 * float(lightest["latency_p95_s"]), 2)
    # fit() leaves out the levels the replica mostly refused (429), with a note
    report = build_report(result, out, p95_s=p95_s, title="llmlat demo: the article replica")
    for note in report.notes:
        say(f"note: {note}")
    if report.fit is not None:
        # the summary holds the parameters' 95% confidence intervals
        say("\n" + str(report.fit.summary()))
    if report.next_levels_text():
        say("\n" + report.next_levels_text())
    if report.plan is not None:
        say("\n" + report.plan.describe())
    say(f"\nreport: {report.path.resolve()}")
    return report.path
