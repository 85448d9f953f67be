"""Distributed jobs: a rank that holds the others back, and steps spent in collectives."""

from trainmon.diagnose.verdicts.declaration import Verdict

DIST_STRAGGLER = Verdict(
    "dist.straggler",
    "one rank is slower than the rest",
    "#00838f",
    thresholds=("straggler_wait_gap", "straggler_step_ratio", "straggler_score"),
    explains="one rank of a job is slower than the others",
    evidence=(
        "ranks grouped by rendezvous or `trainmon run`; per rank: data wait, time in collectives, own "
        "work (median of step − data wait − communication) and its score (the others' median own work ÷ "
        "its own, as nvidia-resiliency-ext scores a section); the slow rank's own input sub-cause; "
        "`kind` is `data`, `compute` (synchronous ranks: equal steps, the others wait for it in "
        "collectives) or `step` (unsynchronised ranks)"
    ),
    advice=(
        "fix that rank first: its sub-cause's advice; for a compute straggler, its accelerator's clocks "
        "and throttling, uneven work per rank, or moving off slower hardware"
    ),
    when=(
        "its wait exceeds the others' by > {straggler_wait_gap:%} of the step; else its score < "
        "{straggler_score}; else (no communication seen) its step time > {straggler_step_ratio}× theirs"
    ),
)

DIST_COMM = Verdict(
    "dist.comm",
    "time in collectives is a material share of the step and no single rank explains it",
    "#0097a7",
    thresholds=("comm_share", "comm_critical_share"),
    explains=(
        "the ranks of a job spend a material share of each step blocked in collectives, and no slower rank explains it"
    ),
    evidence=(
        "`comm_share`: at each step the least share blocked in collectives among the ranks (steps "
        "matched by their ends; the last rank to arrive hardly waits, the others' extra is waiting for "
        "it), the median over the steps; per rank `comm_fraction`, `comm_share_p50`, ms per step and "
        "compute; the shares by operation over the run (`by_op`: `ddp_grad_sync`, `all_reduce`, `wait`, "
        "...), ranks seen and world size"
    ),
    advice=(
        "let DDP overlap the all-reduce with backward (`bucket_cap_mb`, `gradient_as_bucket_view`, "
        "`static_graph`); gradient accumulation under `no_sync()`; fewer syncs of the job's own "
        "(metrics, barriers); compression hooks; placement on fast links"
    ),
    when=(
        "`comm_share` > {comm_share:%} (the PyTorch Profiler plugin's communication threshold; critical "
        "≥ {comm_critical_share:%}), no `dist.straggler`"
    ),
)
