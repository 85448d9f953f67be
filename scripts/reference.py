"""Write the reference pages that come from the code: docs/verdicts.md (the verdict registry and ``Thresholds``),
docs/cli.md (the argument parser) and docs/overhead.md (benchmarks/results.json, as ``make bench`` last wrote it).

    python scripts/reference.py          # write the pages
    python scripts/reference.py --check  # exit 1 if a page is stale (tests/unit/test_reference_docs.py does this)
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import os
import re
import sys
from collections.abc import Callable
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainmon.diagnose.thresholds import Thresholds  # noqa: E402
from trainmon.diagnose.verdicts import VERDICTS, Verdict  # noqa: E402

GENERATED = "<!-- written by scripts/reference.py from the code: edit the code, not this page -->"
_PLACEHOLDER = re.compile(r"\{(\w+)(:%)?\}")


def threshold_notes() -> dict[str, str]:
    """Each ``Thresholds`` field's comment in its source ("" where it has none)."""
    notes: dict[str, str] = {}
    for line in inspect.getsource(Thresholds).splitlines():
        m = re.match(r"\s+(\w+): \w+ = [^#]+?(?:#\s*(.*))?$", line)
        if m:
            notes[m.group(1)] = (m.group(2) or "").strip()
    return notes


def figure(value: float, percent: bool) -> str:
    return f"{value * 100:g} %" if percent else f"{value:g}"


def rendered(text: str, th: Thresholds) -> str:
    """``text`` with each ``{name}`` / ``{name:%}`` of a threshold replaced by its default."""
    fields = {f.name for f in dataclasses.fields(Thresholds)}

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        return figure(getattr(th, name), bool(m.group(2))) if name in fields else m.group(0)

    return _PLACEHOLDER.sub(sub, text)


def placeholders(text: str) -> set[str]:
    return {m.group(1) for m in _PLACEHOLDER.finditer(text)}


def verdict_entry(v: Verdict, th: Thresholds, notes: dict[str, str]) -> list[str]:
    flags = [
        name for name, on in (("shown at once", v.immediate), ("thread states sampled fast", v.reads_states)) if on
    ]
    out = [f"### `{v.code}`", "", f"**{_sentence(v.meaning)}** {_sentence(v.explains)}"]
    out += ["", f"- **Given when**: {rendered(v.when, th)}."]
    out += [f"- **Evidence**: {v.evidence}.", f"- **Advice**: {v.advice}."]
    if v.thresholds:
        listed = "; ".join(
            f"`{name}` = {getattr(th, name)!r}" + (f" ({notes[name]})" if notes.get(name) else "")
            for name in v.thresholds
        )
        out.append(f"- **Thresholds** (`[thresholds]` in the config file): {listed}.")
    if flags:
        out.append(f"- **Also**: {', '.join(flags)}.")
    return [*out, ""]


def _sentence(text: str) -> str:
    return f"{text[:1].upper()}{text[1:]}."


def verdicts_page() -> str:
    th = Thresholds()
    notes = threshold_notes()
    out = [
        "# Verdicts",
        "",
        GENERATED,
        "",
        "Every code trainmon gives, in its priority order (among findings of one severity, the first listed heads).",
        "Codes are a public contract: they are added, never renamed. The figures are the defaults of "
        "`trainmon.diagnose.Thresholds`; a config file's `[thresholds]` table sets any of them. How the engine reads "
        "a run's window, follows a change live and cuts a report into phases: [diagnosis.md](diagnosis.md).",
        "",
        "| code | what holds |",
        "|---|---|",
        *(f"| [`{v.code}`](#{v.code.replace('.', '')}) | {v.meaning} |" for v in VERDICTS),
        "",
    ]
    for v in VERDICTS:
        out += verdict_entry(v, th, notes)
    unused = sorted({f.name for f in dataclasses.fields(Thresholds)} - {n for v in VERDICTS for n in v.thresholds})
    out += [
        "## The engine's own thresholds",
        "",
        "Not tied to one verdict (the window, the live change detection, the banner's hold, a report's phases):",
        "",
        *(f"- `{n}` = {getattr(th, n)!r}" + (f": {notes[n]}" if notes.get(n) else "") for n in unused),
        "",
    ]
    return "\n".join(out)


def cli_page() -> str:
    from trainmon.cli.program import build_parser

    parser = build_parser()
    out = ["# Command line", "", GENERATED, "", "```text", _help(parser.print_help).rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        out += [f"## `trainmon {name}`", "", "```text", _help(command.print_help).rstrip(), "```", ""]
    return "\n".join(out)


def _help(print_help: Callable[[], None]) -> str:
    """What ``print_help`` prints, wrapped at 100 columns whatever the terminal (argparse reads $COLUMNS)."""
    buf = io.StringIO()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with redirect_stdout(buf):
            print_help()
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return buf.getvalue().replace(str(ROOT), ".")


def overhead_page() -> str:
    from benchmarks._common import markdown_table, read_results

    context, rows = read_results()
    out = [
        "# Overhead",
        "",
        GENERATED,
        "",
        "What trainmon costs, as `make bench` last measured it on one host (benchmarks/results.json); nvitop, glances",
        "and TraceML were measured in the same runs. `make bench` says REGRESSED where a figure got more than 20 %",
        'worse than its committed value (docs/architecture.md, "What a tick costs"). How each figure was measured:',
        "[benchmarks/results.md](../benchmarks/results.md).",
        "",
        *(f"- {c}" for c in context),
        "",
        *markdown_table(rows),
        "",
    ]
    return "\n".join(out)


PAGES: dict[str, Callable[[], str]] = {
    "docs/verdicts.md": verdicts_page,
    "docs/cli.md": cli_page,
    "docs/overhead.md": overhead_page,
}


def stale() -> list[str]:
    """The pages whose text differs from what the code makes of them."""
    return [path for path, make in PAGES.items() if (ROOT / path).read_text() != make()] if _all_exist() else [*PAGES]


def _all_exist() -> bool:
    return all((ROOT / path).exists() for path in PAGES)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if a page is stale, write nothing")
    args = ap.parse_args()
    if args.check:
        old = stale()
        for path in old:
            print(f"{path} is stale: run python scripts/reference.py", file=sys.stderr)
        return 1 if old else 0
    for path, make in PAGES.items():
        (ROOT / path).write_text(make())
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
