"""llmlat.plot: every figure renders to PNG with labelled axes, the right series, honest data."""

from __future__ import annotations

import heapq

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # only to check that plot.py leaves pyplot alone
import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

import llmlat
from llmlat import plot
from llmlat.results import SweepResult
from llmlat.schema import Attempt, Record, attempts_frame, requests_frame

C, MU = 4, 2.0  # servers and per-server service rate (req/s) of the synthetic provider
CLOSED_LEVELS = (1, 2, 4, 8, 16, 32)


def _simulate(kind, levels, *, n=240, warmup=20, queue_cap=24, seed=0):
    """A FIFO M/M/c provider fed by a closed loop (N clients) or Poisson arrivals (rate).

    Requests that find ``queue_cap`` others waiting get a 429 (retried once after a backoff,
    then failed); a few fail with 500. Warmup requests are given absurd latencies, so a plot
    that kept them would show it.
    """
    rng = np.random.default_rng(seed)
    records, attempts, rid, t0 = [], [], 0, 0.0
    for level in levels:
        if kind == "concurrency":
            arrivals = [(t0, w) for w in range(int(level))]
        else:
            arrivals = [(t0 + rng.exponential(1 / level), 0)]
        free = [t0] * C
        ends: list[float] = []
        for i in range(n + warmup):
            a, w = heapq.heappop(arrivals)
            f = heapq.heappop(free)
            start = max(a, f)
            waiting = sum(1 for e in ends if e > a) - C
            limited = waiting >= queue_cap
            # a throttled request fails after the client's retry backoff (0.5 s)
            end = a + 0.5 if limited else start + rng.exponential(1 / MU)
            heapq.heappush(free, f if limited else end)
            ends = [e for e in ends if e > a] + ([] if limited else [end])
            nxt = end if kind == "concurrency" else a + rng.exponential(1 / level)
            heapq.heappush(arrivals, (nxt, w))
            server_error = not limited and rng.random() < 0.01
            ok = not (limited or server_error)
            status = 429 if limited else 500 if server_error else 200
            warm = i < warmup
            records.append(
                Record(
                    run_id="test",
                    level=float(level),
                    level_kind=kind,
                    request_id=rid,
                    phase="warmup" if warm else "measure",
                    worker=w,
                    t_scheduled=a,
                    t_sent=a,
                    t_first_token=start + 0.05,
                    t_end=end,
                    latency_s=1e3 if warm else end - a,
                    service_s=end - start,
                    ttft_s=start + 0.05 - a,
                    chunks=20,
                    ok=ok,
                    status=status,
                    error_kind={429: "rate_limited", 500: "server_error"}.get(status),
                    attempts=2 if limited else 1,
                )
            )
            for k in range(2 if limited else 1):
                attempts.append(
                    Attempt("test", float(level), rid, k, t_sent=a, t_end=end, status=status)
                )
            rid += 1
        t0 = max(max(free), a) + 1.0
    meta = {"run_id": "test", "level_kind": kind, "load": {"think_time_s": 0.0}}
    return SweepResult(requests_frame(records), attempts_frame(attempts), None, meta)


@pytest.fixture(scope="module")
def closed():
    return _simulate("concurrency", CLOSED_LEVELS)


@pytest.fixture(scope="module")
def open_loop():
    return _simulate("rate", (1.0, 2.0, 4.0, 6.0, 12.0))


@pytest.fixture(scope="module")
def unthrottled():
    # no queue cap: an exact closed M/M/c, for the fits
    return _simulate("concurrency", CLOSED_LEVELS, queue_cap=10**6)


@pytest.fixture(scope="module")
def mmc_fit(unthrottled):
    return llmlat.fit(unthrottled, model="mmc")


def _measured_ok(sweep):
    """Ok rows past each level's start-up transient (the phase llmlat.stats gives them)."""
    r = sweep.requests
    return r[(llmlat.stats.phases(r) == "measure") & r["ok"]]


def _save(fig, tmp_path, name):
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return path


def _labelled(ax):
    assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


# ---------------------------------------------------------------- rendering


@pytest.mark.parametrize("name", ["latency", "throughput", "ecdf", "errors"])
@pytest.mark.parametrize("source", ["sweep", "frame"])
def test_renders_png_with_labelled_axes(closed, tmp_path, name, source):
    data = closed if source == "sweep" else closed.requests
    fig = getattr(plot, name)(data)
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    _labelled(ax)
    assert ax.get_legend() is not None
    _save(fig, tmp_path, f"{name}-{source}")


def test_overview_is_a_labelled_grid(closed, tmp_path):
    fig = plot.overview(closed)
    assert len(fig.axes) == 4
    for ax in fig.axes:
        _labelled(ax)
    _save(fig, tmp_path, "overview")


def test_no_pyplot_state_leaks(closed):
    before = plt.get_fignums()
    plot.latency(closed)
    plot.overview(closed)
    assert plt.get_fignums() == before


def test_draws_on_a_given_axes(closed):
    fig = Figure()
    ax = fig.add_subplot()
    assert plot.errors(closed, ax=ax) is fig
    assert len(ax.get_lines()) == 2


# ---------------------------------------------------------------- latency


def test_latency_one_errorbar_series_per_stat(closed):
    for stats in [("p50",), ("p50", "p95"), ("p50", "p95", "p99")]:
        ax = plot.latency(closed, stats=stats).axes[0]
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == len(stats)
        assert [b.get_label() for b in bars] == [f"observed {s} (95% CI)" for s in stats]


def test_latency_points_are_ok_measured_percentiles(closed):
    # warmup rows carry 1000 s latencies and 429s fail after a 0.5 s backoff: neither may leak in
    ax = plot.latency(closed).axes[0]
    ok = _measured_ok(closed)
    for bar, q in zip(ax.containers, (0.5, 0.95), strict=True):
        x, y = np.asarray(bar.lines[0].get_data(), dtype=float)
        expected = ok.groupby("level")["latency_s"].quantile(q)
        np.testing.assert_allclose(x, expected.index)
        np.testing.assert_allclose(y, expected.to_numpy())


def test_latency_ci_brackets_the_estimate(closed):
    ax = plot.latency(closed).axes[0]
    for bar in ax.containers:
        y = np.asarray(bar.lines[0].get_ydata(), dtype=float)
        segments = bar.lines[2][0].get_segments()
        low = np.array([s[0][1] for s in segments])
        high = np.array([s[1][1] for s in segments])
        assert np.all(low <= y) and np.all(y <= high) and np.all(low < high)


def test_latency_notes_the_failures_it_left_out(closed):
    ax = plot.latency(closed).axes[0]
    r = closed.requests[closed.requests["phase"] == "measure"]
    failed = int((~r["ok"]).sum())
    assert failed > 0
    assert any(f"{failed} of {len(r)} failed" in t.get_text() for t in ax.texts)


def test_log_axis_only_when_levels_span_a_decade(closed):
    assert plot.latency(closed).axes[0].get_xscale() == "log"
    narrow = closed.requests[closed.requests["level"].between(2, 16)]
    assert plot.latency(narrow).axes[0].get_xscale() == "linear"
    assert plot.throughput(narrow).axes[0].get_xscale() == "linear"


# ---------------------------------------------------------------- ecdf, errors, throughput


def test_ecdf_one_line_per_level_of_ok_requests(closed):
    ax = plot.ecdf(closed).axes[0]
    lines = ax.get_lines()
    assert len(lines) == len(CLOSED_LEVELS)
    assert ax.get_legend().get_title().get_text() == "concurrency (requests in flight)"
    ok = _measured_ok(closed)
    largest = max(np.nanmax(line.get_xdata()) for line in lines)
    assert largest == pytest.approx(ok["latency_s"].max())


def test_errors_rates(closed):
    ax = plot.errors(closed).axes[0]
    failed, throttled = ax.get_lines()
    r = closed.requests[closed.requests["phase"] == "measure"]
    np.testing.assert_allclose(failed.get_ydata(), (~r["ok"]).groupby(r["level"]).mean())
    a = closed.attempts[closed.attempts["request_id"].isin(r["request_id"])]
    share = (a["status"] == 429).groupby(a["level"]).mean()
    np.testing.assert_allclose(throttled.get_ydata(), share)
    assert throttled.get_ydata()[-1] > 0.1  # the queue cap bites at 32 clients
    # from a bare table, the 429 share falls back to the requests that ended in a 429
    frame_ax = plot.errors(closed.requests).axes[0]
    expected = r["error_kind"].eq("rate_limited").fillna(False).groupby(r["level"]).mean()
    np.testing.assert_allclose(frame_ax.get_lines()[1].get_ydata(), expected)
    assert "attempts" in throttled.get_label()
    assert "attempts" not in frame_ax.get_lines()[1].get_label()


def test_throughput_knee_closed_loop(closed):
    ax = plot.throughput(closed).axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[0] == "measured" and "asymptotic bounds" in labels
    measured = ax.get_lines()[0].get_ydata()
    # saturates near c * mu, and the knee (X_max * R0) sits near c
    assert np.nanmax(measured) == pytest.approx(C * MU, rel=0.15)
    (knee,) = [line for line in ax.get_lines() if line.get_label().startswith("knee")]
    assert knee.get_xdata()[0] == pytest.approx(C, rel=0.3)


def test_throughput_knee_open_loop_is_the_capacity(open_loop):
    ax = plot.throughput(open_loop).axes[0]
    assert ax.get_xlabel() == "offered rate (req/s)"
    measured = ax.get_lines()[0].get_ydata()
    (knee,) = [line for line in ax.get_lines() if line.get_label().startswith("knee")]
    assert knee.get_xdata()[0] == pytest.approx(np.nanmax(measured))
    # overloaded at 12 req/s: flat near c * mu (a little under: the span includes the drain)
    assert np.nanmax(measured) == pytest.approx(C * MU, rel=0.25)
    assert measured[-1] < 0.8 * 12.0


def test_throughput_without_saturation_draws_no_knee(closed):
    r = closed.requests
    ax = plot.throughput(r[r["level"] <= 2]).axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == ["measured", "no-queueing bound"]
    assert any("no saturation reached" in t.get_text() for t in ax.texts)


# ---------------------------------------------------------------- bad input


def test_bad_input_is_a_one_line_value_error(closed):
    r = closed.requests
    cases = [
        (lambda: plot.latency(r.iloc[0:0]), "no measured"),
        (lambda: plot.latency(r[r["phase"] == "warmup"]), "no measured"),
        (lambda: plot.ecdf(r.drop(columns="ok")), "'ok'"),
        (lambda: plot.latency(r.drop(columns="latency_s")), "'latency_s'"),
        (lambda: plot.latency(r, metric="nope_s"), "'nope_s'"),
        (lambda: plot.latency(r, stats=("p42",)), "stats"),
        (lambda: plot.throughput(r.drop(columns="t_end")), "'t_end'"),
        (lambda: plot.errors([1, 2, 3]), "data: expected a SweepResult"),
        (lambda: plot.utilization(closed, None), "fit"),
        (lambda: plot.latency(r[~r["ok"]]), "no successful"),
        (lambda: plot.ecdf(pd.concat([r, r.assign(level_kind="rate")])), "level_kind"),
        (lambda: plot.errors(pd.concat([r, r.assign(run_id="other")])), "run_id: level 1 "),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match) as info:
            call()
        assert "\n" not in str(info.value)


def test_runs_over_different_levels_plot_as_one_sweep(closed):
    r = closed.requests
    # reset_index: llmlat.schema.coerce misaligns a frame whose index is not 0..n-1
    low = SweepResult(r[r["level"] <= 4].reset_index(drop=True), meta={"run_id": "a"})
    high = r[r["level"] > 4].assign(run_id="b").reset_index(drop=True)
    high = SweepResult(high, meta={"run_id": "b"})
    ax = plot.errors(SweepResult.concat([low, high])).axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_xdata(), CLOSED_LEVELS)


def test_plotted_statistics_match_the_summary(closed):
    stats = ("mean", "p50", "p95", "p99")
    ax = plot.latency(closed, stats=stats).axes[0]
    summary = closed.summary()
    for bar, stat in zip(ax.containers, stats, strict=True):
        y = np.asarray(bar.lines[0].get_ydata(), dtype=float)
        np.testing.assert_allclose(y, summary[f"latency_{stat}_s"])


# ---------------------------------------------------------------- fitted curves (real FitResult)


def _labels(ax):
    return [line.get_label() for line in ax.get_lines()]


def test_latency_overlays_the_fitted_quantiles(unthrottled, mmc_fit, tmp_path):
    fig = plot.latency(unthrottled, mmc_fit)
    _save(fig, tmp_path, "latency-fit")
    ax = fig.axes[0]
    fitted = [line for line in ax.get_lines() if "fit" in line.get_label()]
    assert [line.get_label() for line in fitted] == ["mmc fit p50", "mmc fit p95"]
    for line, stat in zip(fitted, ("p50", "p95"), strict=True):
        x, y = line.get_xdata(), line.get_ydata()
        assert x.min() == 1 and x.max() == max(CLOSED_LEVELS) and np.all(x % 1 == 0)
        np.testing.assert_allclose(y, mmc_fit.predict(x)[f"latency_{stat}_s"])
    # points are not joined when a curve is drawn through them
    assert all(bar.lines[0].get_linestyle() == "None" for bar in ax.containers)


def test_mgc_draws_its_quantile_curves():
    # M/G/c quantiles (gamma service with the measured CV, interpolated wait) are drawn
    # like M/M/c's, over the observed p50 and p95
    data = _simulate("rate", (1.0, 2.0, 4.0, 6.0, 7.0), n=1000, queue_cap=10**6)
    fit = llmlat.fit(data, model="mgc")
    ax = plot.latency(data, fit).axes[0]
    assert [c.get_label() for c in ax.containers][-1] == "observed p95 (95% CI)"
    assert [label for label in _labels(ax) if "fit" in label] == ["mgc fit p50", "mgc fit p95"]
    assert ax.get_xlabel() == "offered rate (req/s)"
    ax = plot.utilization(data, fit).axes[0]
    assert [label for label in _labels(ax) if "fit" in label][:2] == ["mgc fit p50", "mgc fit p95"]


def test_utilization_axis_and_marks(unthrottled, mmc_fit, tmp_path):
    fig = plot.utilization(unthrottled, mmc_fit)
    _save(fig, tmp_path, "utilization")
    ax = fig.axes[0]
    _labelled(ax)
    marks = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert marks == [0.7, 0.9]
    fitted = [label for label in _labels(ax) if "fit" in label]
    # a closed sweep gets its own (closed) curve and, dashed, the open form for planning
    assert fitted == [
        "mmc fit p50",
        "mmc fit p50, Poisson arrivals",
        "mmc fit p95",
        "mmc fit p95, Poisson arrivals",
    ]
    summary = unthrottled.summary()
    x = np.asarray(ax.containers[0].lines[0].get_xdata(), dtype=float)
    np.testing.assert_allclose(x, summary["throughput_rps"] / mmc_fit.capacity_rps)
    # one client keeps one of c servers busy
    assert x[0] == pytest.approx(1 / mmc_fit.params["c"], rel=0.2) and x.max() < 1.05


def test_throughput_with_fit_draws_capacity_and_curve(unthrottled, mmc_fit, tmp_path):
    fig = plot.throughput(unthrottled, mmc_fit)
    _save(fig, tmp_path, "throughput-fit")
    ax = fig.axes[0]
    labels = _labels(ax)
    assert "mmc fit" in labels
    (cap,) = [line for line in ax.get_lines() if line.get_label().startswith("fitted capacity")]
    assert cap.get_ydata()[0] == pytest.approx(mmc_fit.capacity_rps)
    (knee,) = [line for line in ax.get_lines() if line.get_label().startswith("knee")]
    assert knee.get_xdata()[0] == pytest.approx(C, rel=0.3)


def test_overview_with_fit_is_a_2x3_grid(unthrottled, mmc_fit, tmp_path):
    fig = plot.overview(unthrottled, mmc_fit)
    assert len(fig.axes) == 6
    for ax in fig.axes:
        _labelled(ax)
    assert fig.axes[1].get_title() == "Latency vs utilization"
    assert fig.axes[5].get_xlabel() == "time to first token (s)"
    _save(fig, tmp_path, "overview-fit")


def test_overview_with_fit_on_a_table_without_ttft(unthrottled, mmc_fit, tmp_path):
    # a public dataset may have no ttft_s column at all: no TTFT panel, no crash
    fig = plot.overview(unthrottled.requests.drop(columns=["ttft_s"]), mmc_fit)
    assert sum(ax.axison for ax in fig.axes) == 5
    for ax in fig.axes[:5]:
        _labelled(ax)
    _save(fig, tmp_path, "overview-fit-no-ttft")


def test_fit_that_does_not_match_the_plot_is_refused(unthrottled, mmc_fit):
    r = unthrottled.requests
    with pytest.raises(ValueError, match="fit: it models latency_s"):
        plot.latency(unthrottled, mmc_fit, metric="ttft_s")
    with pytest.raises(ValueError, match="level_kind"):
        plot.latency(r.assign(level_kind="trace"), mmc_fit)


# ---------------------------------------------------------------- display in Jupyter


def test_figure_has_a_png_repr_for_ipython(closed):
    from IPython.core.formatters import DisplayFormatter

    data, _ = DisplayFormatter().format(plot.errors(closed))
    assert data["image/png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_notebook_shows_each_returned_figure_once(closed, run_notebook, tmp_path):
    # a real kernel, with and without %matplotlib inline; pyplot never holds our figures
    nbformat = pytest.importorskip("nbformat")
    path = closed.save(tmp_path / "sweep.parquet")
    cells = [
        f"import llmlat\nfrom llmlat import plot\ns = llmlat.read({str(path)!r})",
        "plot.errors(s)",
        "%matplotlib inline\nimport matplotlib.pyplot as plt\nplot.overview(s)",
        "fig = plot.latency(s)\nprint(plt.get_fignums())",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    run_notebook(nb, cwd=tmp_path, timeout=120)
    for cell in nb.cells[1:3]:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, cell.outputs
    assert [o.get("text") for o in nb.cells[3].outputs] == ["[]\n"]


# ---------------------------------------------------------------- other inputs


def _knee(ax):
    (knee,) = [line for line in ax.get_lines() if line.get_label().startswith("knee")]
    return knee.get_xdata()[0]


def test_think_time_from_the_metadata_moves_the_knee(closed):
    think = SweepResult(closed.requests, closed.attempts, None, {"load": {"think_time_s": 0.5}})
    x_max = np.nanmax(closed.summary()["throughput_rps"])
    shift = _knee(plot.throughput(think).axes[0]) - _knee(plot.throughput(closed).axes[0])
    assert shift == pytest.approx(0.5 * x_max)  # N* = X_max * (R0 + Z)


def test_table_without_phase_counts_every_row(closed):
    r = closed.requests
    measured = r[r["phase"] == "measure"].drop(columns="phase")
    ax = plot.errors(measured).axes[0]
    np.testing.assert_allclose(
        ax.get_lines()[0].get_ydata(), (~measured["ok"]).groupby(measured["level"]).mean()
    )


def test_all_failed_still_shows_errors_and_throughput(closed):
    failed = closed.requests.assign(ok=False, status=503, error_kind="server_error")
    assert list(plot.errors(failed).axes[0].get_lines()[0].get_ydata()) == [1.0] * len(
        CLOSED_LEVELS
    )
    ax = plot.throughput(failed).axes[0]
    assert np.all(ax.get_lines()[0].get_ydata() == 0) and _labels(ax) == ["measured"]


@pytest.mark.parametrize("kind", [k for k in plot.__all__ if k not in plot.TABLE_FIGURES])
def test_sweep_result_plot_delegates(unthrottled, mmc_fit, kind):
    kwargs = {"fit": mmc_fit} if kind == "utilization" else {}
    assert isinstance(unthrottled.plot(kind, **kwargs), Figure)


def test_levels_the_summary_cannot_vouch_for_are_named(closed):
    from llmlat.schema import LevelStats, levels_frame

    # the engine saw its own CPU saturated at 16 clients: the client, not the server, may be slow
    stats = [
        LevelStats("test", float(lv), "concurrency", cpu_util=0.95 if lv == 16 else 0.1)
        for lv in CLOSED_LEVELS
    ]
    sweep = SweepResult(closed.requests, closed.attempts, levels_frame(stats), closed.meta)
    summary = sweep.summary()
    assert not summary["steady"].iloc[-1]  # 240 requests at 32 clients run too short
    for fig in (plot.latency(sweep), plot.throughput(sweep)):
        (note,) = [t.get_text() for t in fig.axes[0].texts]
        assert "no steady state at level 32" in note and "client-bound at level 16" in note


# ---------------------------------------------------------------- per-level tables

LEVEL_DATASET = "inferencex-closedloop/gpt-oss-120b"  # levels, throughput, mean/p50/p90/p99


@pytest.fixture(scope="module")
def level_table():
    return llmlat.datasets.load(LEVEL_DATASET)


@pytest.fixture(scope="module")
def level_fit(level_table):
    return llmlat.fit(level_table, model="mmc")


def _points(ax):
    """(label, x, y) of every observed series; asserts it carries no error bars."""
    out = []
    for bar in ax.containers:
        assert isinstance(bar, ErrorbarContainer)
        assert not bar.has_yerr and bar.lines[2] == ()  # no CI is known for a per-level table
        x, y = np.asarray(bar.lines[0].get_data(), dtype=float)
        out.append((bar.get_label(), x, y))
    return out


@pytest.mark.parametrize("with_fit", [False, True])
@pytest.mark.parametrize("kind", ["latency", "throughput", "utilization", "overview"])
def test_level_table_draws_every_figure(level_table, level_fit, tmp_path, kind, with_fit):
    if kind == "utilization" and not with_fit:
        with pytest.raises(ValueError, match="fit: utilization needs a FitResult"):
            plot.utilization(level_table, None)
        return
    fig = level_fit.plot(kind) if with_fit else getattr(plot, kind)(level_table)
    assert isinstance(fig, Figure)
    drawn = [ax for ax in fig.axes if ax.axison]
    assert len(drawn) == {"overview": 3 + with_fit}.get(kind, 1)
    for ax in drawn:
        _labelled(ax)
        assert ax.get_legend() is not None
    _save(fig, tmp_path, f"levels-{kind}-{with_fit}")


@pytest.mark.parametrize("with_fit", [False, True])
def test_level_table_latency_points_are_the_tables_values(level_table, level_fit, with_fit):
    # rows out of order: the points are still drawn by level, each from its own row
    shuffled = level_table.sample(frac=1, random_state=0)
    stats = ("mean", "p50", "p90", "p99")
    ax = plot.latency(shuffled, level_fit if with_fit else None, stats=stats).axes[0]
    points = _points(ax)
    assert [label for label, _, _ in points] == [f"observed {s}" for s in stats]
    for (_, x, y), stat in zip(points, stats, strict=True):
        np.testing.assert_allclose(x, level_table["level"])
        np.testing.assert_allclose(y, level_table[f"latency_{stat}_s"])
    fitted = [label for label in _labels(ax) if "fit" in label]
    # a fit predicts no p90: that statistic keeps its points and gets no curve
    assert fitted == (["mmc fit mean", "mmc fit p50", "mmc fit p99"] if with_fit else [])


def test_level_table_other_metric(level_table):
    ax = plot.latency(level_table, metric="ttft_s", stats=("p90",)).axes[0]
    ((_, x, y),) = _points(ax)
    np.testing.assert_allclose(x, level_table["level"])
    np.testing.assert_allclose(y, level_table["ttft_p90_s"])
    assert ax.get_ylabel() == "time to first token (s)"


def test_level_table_default_stats_are_ones_it_has(level_table):
    # the table has p50, p90 and p99 but no p95: p99 stands in for it rather than failing
    ax = plot.latency(level_table).axes[0]
    assert [label for label, _, _ in _points(ax)] == ["observed p50", "observed p99"]
    only_mean = level_table.drop(columns=["latency_p50_s", "latency_p90_s", "latency_p99_s"])
    ax = plot.latency(only_mean).axes[0]
    ((label, _, y),) = _points(ax)
    assert label == "observed mean"
    np.testing.assert_allclose(y, level_table["latency_mean_s"])


def test_level_table_throughput_is_its_column(level_table, level_fit):
    ax = plot.throughput(level_table, level_fit).axes[0]
    measured = ax.get_lines()[0]
    assert measured.get_label() == "measured"
    np.testing.assert_allclose(measured.get_xdata(), level_table["level"])
    np.testing.assert_allclose(measured.get_ydata(), level_table["throughput_rps"])
    # c is not identified here (no knee up to 512): the line says so
    (cap,) = [line for line in ax.get_lines() if "not identified" in line.get_label()]
    assert cap.get_ydata()[0] == pytest.approx(level_fit.capacity_rps)
    # without a fit the knee is X_max * R0: the best throughput times the lowest mean latency
    knee = _knee(plot.throughput(level_table).axes[0])
    expected = level_table["throughput_rps"].max() * level_table["latency_mean_s"].min()
    assert knee == pytest.approx(expected)


def test_level_table_utilization_points(level_table, level_fit):
    ax = plot.utilization(level_table, level_fit, stats=("p50",)).axes[0]
    ((label, x, y),) = _points(ax)
    assert label == "observed p50"
    np.testing.assert_allclose(x, level_table["throughput_rps"] / level_fit.capacity_rps)
    np.testing.assert_allclose(y, level_table["latency_p50_s"])
    assert "mmc fit p50" in _labels(ax)


def test_level_table_overview_notes_what_needs_requests(level_table, level_fit):
    fig = plot.overview(level_table)
    latency_ax, throughput_ax, errors_ax, ecdf_ax = fig.axes
    for (_, _, y), stat in zip(_points(latency_ax), ("p50", "p99"), strict=True):
        np.testing.assert_allclose(y, level_table[f"latency_{stat}_s"])
    np.testing.assert_allclose(
        throughput_ax.get_lines()[0].get_ydata(), level_table["throughput_rps"]
    )
    (failed,) = errors_ax.get_lines()  # the 429 share needs per-request rows: a note instead
    np.testing.assert_allclose(failed.get_ydata(), level_table["n_failed"] / level_table["n"])
    assert any("429 share not shown" in t.get_text() for t in errors_ax.texts)
    assert not ecdf_ax.axison
    assert any("per-level table" in t.get_text() for t in ecdf_ax.texts)
    fig = level_fit.plot("overview")
    assert fig.axes[1].get_title() == "Latency vs utilization"
    assert not fig.axes[4].axison and not fig.axes[5].axison  # no ECDF, no TTFT ECDF


def test_level_table_error_rate_from_its_counts(level_table):
    failing = level_table.assign(n_failed=level_table["n"] // 4)
    (failed,) = plot.errors(failing).axes[0].get_lines()
    np.testing.assert_allclose(failed.get_ydata(), failing["n_failed"] / failing["n"])
    ax = plot.latency(failing).axes[0]
    n, bad = int(failing["n"].sum()), int(failing["n_failed"].sum())
    assert any(f"{bad} of {n} failed" in t.get_text() for t in ax.texts)


def test_level_table_is_detected_as_fit_detects_it(level_table, closed):
    from llmlat._aggregate import is_level_table

    assert is_level_table(level_table) and not is_level_table(closed.requests)
    assert plot._tables(level_table).per_level and not plot._tables(closed.requests).per_level


def test_level_table_missing_statistic_is_a_clear_value_error(level_table, level_fit):
    available = "available: mean, p50, p90, p99"
    cases = [
        (lambda: plot.latency(level_table, stats=("p95",)), f"'p95'.*'latency_p95_s'.*{available}"),
        (lambda: plot.latency(level_table, stats=("p50", "p95")), f"'p95'.*{available}"),
        (lambda: level_fit.plot("latency", stats=("p95",)), f"'p95'.*{available}"),
        (lambda: plot.utilization(level_table, level_fit, stats=("p95",)), "'p95'"),
        (lambda: plot.latency(level_table, metric="service_s"), "no statistic of 'service_s'"),
        (lambda: plot.latency(level_table, stats=("p42",)), "stats: expected some of"),
        (lambda: plot.throughput(level_table.drop(columns="throughput_rps")), "throughput_rps"),
        (lambda: plot.ecdf(level_table), "per-level table has no per-request times"),
        (lambda: plot.latency(level_table.iloc[0:0]), "no rows"),
        (lambda: plot.latency(pd.concat([level_table] * 2)), "level: level 4 has several rows"),
        (lambda: plot.latency(level_table, level_fit, metric="ttft_s"), "fit: it models"),
    ]
    for call, match in cases:
        with pytest.raises(ValueError, match=match) as info:
            call()
        assert "\n" not in str(info.value)


# ---------------------------------------------------------------- levels left out of a fit


def _hollow(ax):
    """Points drawn hollow (white face): the levels a fit left out."""
    return [
        line
        for line in ax.get_lines()
        if line.get_marker() == "o" and line.get_markerfacecolor() in ("white", (1, 1, 1, 1))
    ]


@pytest.mark.parametrize("kind", ["latency", "throughput", "utilization"])
def test_levels_left_out_of_a_fit_are_hollow_and_named(closed, mmc_fit, kind):
    fit = llmlat.fit(closed, model="mmc")  # the queue cap refuses at N = 32: left out
    assert fit.left_out == {32.0: "refused (429) or retried"}
    ax = fit.plot(kind).axes[0]
    hollow = _hollow(ax)
    assert hollow and all(len(line.get_xdata()) == 1 for line in hollow)
    if kind != "utilization":  # x is the level itself
        assert {float(line.get_xdata()[0]) for line in hollow} == {32.0}
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend.count("left out of the fit") == 1
    if kind == "throughput":  # the cap of the fit is named as what it is
        labels = [line.get_label() for line in ax.get_lines()]
        assert any(label.startswith("fitted capacity") for label in labels)
    assert any("left out of the fit: 32 (429s)" in t.get_text() for t in ax.texts)
    # a fit that kept every level draws nothing hollow and names nothing
    ax = mmc_fit.plot(kind).axes[0]
    assert not mmc_fit.left_out and not _hollow(ax)
    assert not any("left out" in t.get_text() for t in ax.texts)


def test_a_capacity_the_fit_does_not_identify_is_labelled_so(level_table):
    fit = llmlat.fit(level_table, model="batch")  # throughput still grows at the top level
    assert not fit.capacity_identified
    ax = fit.plot("throughput").axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert any(label.endswith("req/s, not identified") for label in labels)
    assert "not identified" in fit.plot("utilization").axes[0].get_xlabel()
