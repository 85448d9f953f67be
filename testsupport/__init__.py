"""What the tests and the benchmarks share: the fake ``pynvml``, child processes, store builders, golden files.

One home for each helper. Test modules never import each other (nor ``tests.conftest``, which holds only
fixtures), and ``benchmarks/`` never imports ``tests/``: both import from here. The layout is described in
docs/architecture.md ("Tests") and checked by tests/unit/test_test_layout.py.
"""
