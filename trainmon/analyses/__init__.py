"""Analyses of a run as a whole, for its report and the views: the time budget (every second of its wall time in
one part), its phases (the verdict over time, cut where the cause changed) and its energy per step. They read the
store and the diagnosis; the live judgement never waits on them."""
