"""The loop stops, or one rank holds the whole job back: these come first, since nothing else matters while
they hold (a hang, checkpoint saves, torch.compile recompiling, a straggler).

In the order of their priority (``VERDICTS`` in ``trainmon.diagnose.verdicts``)."""

from trainmon.diagnose.verdicts.declaration import Verdict

STOPS: tuple[Verdict, ...] = (
    Verdict(
        "stall.hang",
        "no step for far longer than usual while the process lives (stacks dumped automatically)",
        "#b71c1c",
        immediate=True,
        reads_states=True,
        dump_workers=8,
        thresholds=(
            "hang_min_s",
            "hang_step_factor",
            "freeze_headline_share",
        ),
        explains=(
            "the training stopped stepping long ago while its process lives: a deadlock, a collective a peer "
            "never joins, a worker stuck in a read, a SIGSTOP"
        ),
        evidence=(
            "time since the run's last step, batch, save or mark (`silent_s`) against its limit (`limit_s`) "
            "and p95 step; the main process's CPU % and running share over the silence; the stacks dumped "
            "for it (`stack_dumps`, `main_thread_in`: the main thread's innermost frame)"
        ),
        advice=(
            "read the stacks; a collective: give `init_process_group` a timeout "
            "(`TORCH_NCCL_ASYNC_ERROR_HANDLING=1`) so the job fails instead of hanging; the DataLoader with "
            "a stuck worker: `DataLoader(timeout=...)` and timeouts on its reads; a lock: take locks in one "
            "order"
        ),
        when=(
            "no activity for max({hang_min_s} s, {hang_step_factor} × p95 step), critical at once; a report "
            "keeps every freeze, one that resumed too, and heads with it unless it resumed having cost under "
            "{freeze_headline_share:%} of the run's wall time"
        ),
    ),
    Verdict(
        "stall.checkpoint",
        "checkpoint saves take a material share of wall time",
        "#6a1b9a",
        reads_states=True,
        thresholds=("checkpoint_share", "checkpoint_critical_share"),
        explains="`torch.save` takes a material share of wall time",
        evidence="checkpoint spans from the agent vs. the window",
        advice="save less often or asynchronously; write to fast local storage",
        when="> {checkpoint_share:%} of the window (critical ≥ {checkpoint_critical_share:%})",
    ),
    Verdict(
        "stall.recompile",
        "torch.compile recompilations (or an eager fallback at the recompile limit) take a material share of the time",
        "#d81b60",
        thresholds=("compile_share", "compile_critical_share"),
        explains=(
            "`torch.compile` recompiles a function again and again (each new sequence length, each changed "
            "Python value it guards on), or sent it back to eager at its recompile limit"
        ),
        evidence=(
            "the agent's compilation spans (torch.compile's compile start/end callbacks) and torch's own "
            "record of each compilation (`get_compilation_metrics()`: function, seconds, `recompile_reason`, "
            "graph breaks, a compilation refused at the limit); recompilations only (a function's first "
            "compilation is warm-up): `recompile_s`, `recompile_share` of the window, `function` (name, "
            "file:line), `failed_guard` (e.g. `tensor 'input_ids' size mismatch at index 1`), `last_reason`, "
            "`eager_fallback`, `limit`"
        ),
        advice=(
            "a size guard: `torch._dynamo.mark_dynamic(tensor, dim)` or `dynamic=True` (or the default "
            "`None`, not `False`); pad to a few length buckets; raise `torch._dynamo.config.recompile_limit` "
            "only for a known, small set of shapes"
        ),
        when=(
            "recompilations ≥ {compile_share:%} of the window (critical ≥ {compile_critical_share:%}), or a "
            "function fell back to eager at its recompile limit"
        ),
    ),
    Verdict(
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
    ),
)
