"""The live window of a run and what is read from it: its steady steps' sums and quantiles (``window``, memoised per
tick), the latest change inside it (``change``), its long steps and idle spans, and the host figures over the span
it covers (``host_window``). Every rule reads a run through these."""
