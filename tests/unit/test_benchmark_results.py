"""docs/overhead.md and benchmarks/results.md show the rows `make bench` wrote, unedited; make bench holds each figure
against its committed value."""

from __future__ import annotations

from benchmarks._common import Row, markdown_table, read_results
from testsupport.paths import ROOT


def test_the_overhead_page_is_the_last_runs_rows() -> None:
    from scripts.reference import overhead_page

    context, rows = read_results()
    assert rows and context[0].startswith("run ")
    page = (ROOT / "docs" / "overhead.md").read_text()
    assert page == overhead_page(), "docs/overhead.md differs from benchmarks/results.json: run scripts/reference.py"
    assert "\n".join(markdown_table(rows)) in page
    results_md = (ROOT / "benchmarks" / "results.md").read_text()
    assert "\n".join(markdown_table(rows)) in results_md
    # The side-by-side figures are in it, with their competitors measured in the same run.
    screens = [r for r in rows if r.figure.startswith("TUI, ") and "CPU" in r.figure]
    assert {r.figure.split(":")[0] for r in screens} == {"TUI, everyday", "TUI, heavy"}
    assert all("nvitop" in r.anchor and "glances" in r.anchor for r in screens)


def test_a_figure_more_than_a_fifth_worse_than_committed_is_regressed() -> None:
    from benchmarks._regress import figure, peer, regressions

    assert figure("1,174,100/s") == (1174100.0, "/s") and figure("22.1 MB/h") == (22.1, "MB/h")
    assert figure("not run") is None and peer("nvitop 1.05 % (2.48×) · glances 3.45 %") == ("nvitop", 1.05, "%")
    old = [
        Row("agent", "", "1.00 µs", source="a"),
        Row("ingest", "", "1,000,000/s", source="a"),
        Row("TUI", "", "2.00 %", "nvitop 1.00 % (2.0×)", source="b"),
        Row("cuda", "", "not run", source="a"),
    ]
    new = [
        Row("agent", "", "1.30 µs", source="a"),  # 30 % more: regressed
        Row("ingest", "", "850,000/s", source="a"),  # a rate 15 % lower: within the budget
        Row("TUI", "", "3.00 %", "nvitop 2.00 % (1.5×)", source="b"),  # a busier host: better against its peer
        Row("cuda", "", "0.50 µs", source="a"),  # nothing to hold it against
        Row("agent", "", "9.00 µs", source="other"),  # another benchmark's row of the same name
    ]
    got = regressions(old, new)
    assert [(r.figure, r.basis) for r in got] == [("agent", "raw")]
    assert got[0].line() == "REGRESSED agent: 1.00 µs → 1.30 µs (+30%)"
    worse_peer = [Row("TUI", "", "2.00 %", "nvitop 0.50 % (4.0×)", source="b")]
    assert [r.basis for r in regressions(old, worse_peer)] == ["nvitop"]  # same figure, twice the peer's ratio
    assert not regressions(old, [Row("ingest", "", "700,000/s", source="a")], tolerance=0.5)
    assert peer("bare wrapper 0.10 µs") is None  # a floor, not another tool
    floor = "floor: bare wrapper around DataLoader.__next__"
    assert not regressions([Row(floor, "", "0.04 µs", source="a")], [Row(floor, "", "0.13 µs", source="a")])


def test_the_readmes_cost_per_step_holds_the_agents_committed_figures() -> None:
    """The README says what attach() costs a step ("costs 0.6–3.2 µs a step"): every per-step figure of the agent
    that `make bench` committed (the three monitor states, the loops with and without a DataLoader, the model in
    bursts) lies in that range, to the tenth of a microsecond the README's figures carry."""
    import re

    from benchmarks._regress import figure

    claim = re.search(r"costs (\d+(?:\.\d+)?)–(\d+(?:\.\d+)?) µs a step", (ROOT / "README.md").read_text())
    assert claim, "the README no longer says what the agent costs a step"
    low, high = float(claim.group(1)), float(claim.group(2))
    _, rows = read_results()
    agent = [r for r in rows if r.figure.startswith("per step, ") and "CUDA" not in r.figure]
    measured = {r.figure: figure(r.measured) for r in agent}
    assert len(measured) >= 5 and all(v is not None and v[1] == "µs" for v in measured.values()), measured
    values = [v[0] for v in measured.values() if v is not None]
    assert low - 0.05 <= min(values) and max(values) <= high + 0.05, (f"README: {low}–{high} µs a step", measured)
