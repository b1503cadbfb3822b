"""`llmlat demo` and `llmlat report`, run as a user would: real processes, real simulator."""

import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

import llmlat


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.images: list[str] = []
        self.headings: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data.strip())
            self._in_h2 = False


def _check_page(page: Path, *, with_fit: bool) -> _Images:
    parser = _Images()
    parser.feed(page.read_text(encoding="utf-8"))
    assert "Summary per level" in parser.headings
    html = page.read_text(encoding="utf-8")  # the compact table in the page, the full one beside
    assert "ok %" in html and "latency_p95_s" not in html and "href='summary.csv'" in html
    assert "latency_p95_s" in (page.parent / "summary.csv").read_text()
    assert ("Fitted model" in parser.headings) is with_fit
    assert len(parser.images) >= 4
    for src in parser.images:
        image = page.parent / src
        assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", src
    return parser


def test_demo_prints_summary_fit_plan_and_report_path(demo_run):
    out, stdout = demo_run
    assert re.search(r"^report: (.+index\.html)$", stdout, re.M).group(1) == str(
        (out / "index.html").resolve()
    )
    for text in ("p95 s", "throughput /s", "queueing fit", "[0.025", "Plan for latency p95"):
        assert text in stdout
    # no NaN or search bound printed as an answer: what the data leave open says so
    page = (out / "index.html").read_text(encoding="utf-8")
    for shown in (stdout, page):
        assert not re.search(r"\b(nan|NaN|inf)\b", shown)


def test_demo_report_holds_figures_and_the_dataset(demo_run):
    out, _ = demo_run
    parser = _check_page(out / "index.html", with_fit=True)
    assert "Capacity plan" in parser.headings
    assert any("utilization" in src for src in parser.images)
    result = llmlat.read(out / "sweep.parquet")
    assert len(result.requests) == result.levels["issued"].sum()
    assert result.meta["simulator"] is not None


def test_report_command_rebuilds_the_report_from_a_saved_dataset(demo_run, run_llmlat, tmp_path):
    out, _ = demo_run
    proc = run_llmlat(
        "report", str(out / "sweep.parquet"), "--out", "again", "--p95-s", "5", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("index.html")
    parser = _check_page(tmp_path / "again" / "index.html", with_fit=True)
    assert "Capacity plan" in parser.headings


def test_report_on_a_missing_dataset_is_a_one_line_error(run_llmlat, tmp_path):
    proc = run_llmlat("report", "nope.parquet", cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "nope.parquet" in proc.stderr


def test_report_without_a_fit_says_why_and_exits_4(demo_run, run_llmlat, tmp_path):
    import llmlat

    full = llmlat.read(demo_run[0] / "sweep.parquet")
    level = full.levels["level"].iloc[0]  # one level cannot identify any model
    llmlat.SweepResult(
        requests=full.requests[full.requests["level"] == level],
        attempts=full.attempts[full.attempts["level"] == level],
        levels=full.levels[full.levels["level"] == level],
        meta=full.meta,
    ).save(tmp_path / "one.parquet")
    prices = ["--prices", "input: 3", "--prices", "output: 15"]  # a run swept without them
    proc = run_llmlat("report", "one.parquet", "--p95-s", "2", *prices, cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    notes = [line for line in proc.stdout.splitlines() if line.startswith("note: ")]
    assert any(n.startswith("note: No model fitted:") for n in notes), proc.stdout
    assert any("No capacity plan" in n for n in notes), proc.stdout
    page = (tmp_path / "report" / "index.html").read_text()
    assert "No model fitted" in page and "Capacity plan" not in page
    assert "$ / 1k req" in page  # priced from the tokens the server reported
    costs = pd.read_csv(tmp_path / "report" / "summary.csv")["cost_per_1k_requests_usd"]
    expected = llmlat.read(tmp_path / "one.parquet").summary(prices={"input": 3, "output": 15})
    assert costs.tolist() == pytest.approx(expected["cost_per_1k_requests_usd"].tolist())


def test_report_on_a_refused_fit_tabulates_what_to_measure(run_llmlat, tmp_path):
    from llmlat._synth import mmc_closed_requests

    # four levels far below 64 servers: no saturation, so no c
    req = mmc_closed_requests([1, 2, 4, 8], mu=1.0, c=64, n=100, seed=2).assign(run_id="low")
    llmlat.SweepResult(req, meta={"run_id": "low"}).save(tmp_path / "low.parquet")
    with pytest.raises(llmlat.NeedsData) as err:
        llmlat.fit(llmlat.read(tmp_path / "low.parquet"), model="mmc")
    advice = err.value.next_levels()
    assert not advice.empty and (advice["level"] > 8).all()
    proc = run_llmlat("report", "low.parquet", "--model", "mmc", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    # the refusal's table, printed and on the page
    rows = proc.stdout.split("measure next:\n")[1].splitlines()[: len(advice)]
    for line, row in zip(rows, advice.itertuples(), strict=True):
        assert line.startswith(f"  c: level {row.level:g}: {row.requests:,.0f} requests (new")
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "<h2>What to measure next</h2>" in page and "Fitted model" not in page


def test_every_full_demo_level_it_fits_keeps_a_steady_part_past_its_start_and_drain():
    # the fit cuts a closed level's first N requests (its start-up) and about its last N (the
    # drain); what is left must still pass the summary's steady check, n >= max(20, 3N). With
    # max(20, 2N) + N requests, level 10 kept 5 and the full demo's fit said it did not fit
    from llmlat._demo import DEMO_LEVELS, _requests_per_level

    fitted = [n for n in DEMO_LEVELS if n <= 64]  # the article replica refuses past 64 in flight
    assert fitted == [1, 2, 5, 10, 20, 50]
    for n in fitted:
        drain = n if n > 1 else 0
        assert _requests_per_level(n, quick=False) - n - drain >= max(20, 3 * n), n
