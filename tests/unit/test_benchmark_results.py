"""The README's Overhead table and benchmarks/results.md show the rows `make bench` wrote, unedited."""

from __future__ import annotations

import pytest

from benchmarks._common import RESULTS_JSON, Row, markdown_table, read_results, with_readme_table
from testsupport.paths import ROOT


def test_the_readme_overhead_table_is_the_last_runs_rows() -> None:
    context, rows = read_results()
    assert rows and context[0].startswith("run ")
    readme = (ROOT / "README.md").read_text()
    assert with_readme_table(readme, rows) == readme, "README.md's Overhead table differs from benchmarks/results.json"
    results_md = (ROOT / "benchmarks" / "results.md").read_text()
    assert "\n".join(markdown_table(rows)) in results_md
    # The side-by-side figures are in it, with their competitors measured in the same run.
    screens = [r for r in rows if r.figure.startswith("TUI, ") and "CPU" in r.figure]
    assert {r.figure.split(":")[0] for r in screens} == {"TUI, everyday", "TUI, heavy"}
    assert all("nvitop" in r.anchor and "glances" in r.anchor for r in screens)


def test_a_new_run_replaces_the_table_and_nothing_else() -> None:
    readme = (ROOT / "README.md").read_text()
    rows = [Row("a figure", "≤ 1 %", "0.50 %", "nvitop 0.75 % (0.67×)", met=True), Row("with | bar", "", "1", "")]
    out = with_readme_table(readme, rows)
    assert out != readme
    assert "| a figure | ≤ 1 % | 0.50 % | nvitop 0.75 % (0.67×) | met |" in out
    assert "| with \\| bar |  | 1 |  |  |" in out
    head = readme.split("<!-- overhead-table")[0]
    tail = readme.split("<!-- /overhead-table -->")[1]
    assert out.startswith(head) and out.endswith(tail)
    with pytest.raises(ValueError):
        with_readme_table("no markers here", rows)
    assert RESULTS_JSON.name == "results.json"
