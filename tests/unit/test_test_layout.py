"""The test layout of docs/architecture.md: no test module imports another (nor ``tests.conftest``), and
``benchmarks/`` never imports ``tests``; what they share lives in testsupport."""

from __future__ import annotations

import ast
from pathlib import Path

from testsupport.paths import ROOT

CHECKED = ("tests", "benchmarks", "testsupport", "scripts")


def _python_files() -> list[Path]:
    files = []
    for folder in CHECKED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if not any(part.startswith(".") for part in path.relative_to(ROOT).parts):  # benchmarks/.venv-*
                files.append(path)
    return files


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """Every module an import statement names, at any depth (lazy imports inside functions count)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # importing a name from a package can import its submodule of that name: count both
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def test_nothing_imports_the_tests_package() -> None:
    offences = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _python_files()
        for line, module in _imported_modules(ast.parse(path.read_text(), str(path)))
        if module == "tests" or module.startswith("tests.")
    ]
    assert _python_files(), "no files found: is ROOT the checkout?"
    assert not offences, "import from testsupport instead:\n" + "\n".join(offences)
