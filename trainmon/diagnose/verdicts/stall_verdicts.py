"""The stalls: the loop stops (a hang, a checkpoint save, torch.compile recompiling, a periodic pause)."""

from trainmon.diagnose.verdicts.declaration import Verdict

STALL_HANG = Verdict(
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
)

STALL_CHECKPOINT = Verdict(
    "stall.checkpoint",
    "checkpoint saves take a material share of wall time",
    "#6a1b9a",
    reads_states=True,
    thresholds=("checkpoint_share", "checkpoint_critical_share"),
    explains="`torch.save` takes a material share of wall time",
    evidence="checkpoint spans from the agent vs. the window",
    advice="save less often or asynchronously; write to fast local storage",
    when="> {checkpoint_share:%} of the window (critical ≥ {checkpoint_critical_share:%})",
)

STALL_RECOMPILE = Verdict(
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
)

STALL_PERIODIC = Verdict(
    "stall.periodic",
    "recurring long steps (eval, logging bursts, GC)",
    "#8e24aa",
    reads_states=True,
    thresholds=(
        "long_step_factor",
        "periodic_share",
        "periodic_irregularity",
        "gc_explains",
        "periodic_critical_share",
    ),
    explains="recurring long steps (eval, logging bursts, GC) not explained by checkpoints",
    evidence=(
        "step times vs. the median; eval-loader iterations and `phase()` spans inside the long steps; "
        "their period; the agent's gen-2 pauses inside them (\"gen-2 garbage collection, N ms each, "
        'explains K of M long steps"; `gc`: pauses by generation in the window)'
    ),
    advice=(
        "evaluate/log less often or asynchronously; no per-step `.item()`; for GC: `gc.freeze()` after "
        "start-up and the model build, fewer reference cycles per step, `gc.set_threshold` or "
        "`gc.disable()` with `gc.collect()` at epoch boundaries"
    ),
    when=(
        "≥ 2 steps longer than {long_step_factor}× the median, taking ≥ {periodic_share:%} of the time "
        "(critical ≥ {periodic_critical_share:%}); GC named when gen-2 pauses are ≥ {gc_explains:%} of "
        "the excess of ≥ 2 and half of the long steps"
    ),
)
