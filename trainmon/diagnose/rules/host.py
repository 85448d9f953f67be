"""The host side: main-thread overhead while the GPU idles, host memory pressure."""

from __future__ import annotations

from trainmon.diagnose.findings import LOWER, AdviceItem, Finding, code_advice
from trainmon.diagnose.rules.common import base_evidence
from trainmon.diagnose.rules.context import RuleContext
from trainmon.diagnose.rules.input import host_to_device
from trainmon.diagnose.rules.stage import Stage, rule
from trainmon.numbers import is_nan, rounded


@rule(Stage.PER_RUN, "host.overhead")
def host_overhead(ctx: RuleContext) -> Finding | None:
    w, ev, th = ctx.w, ctx.ev, ctx.th
    f = w.wait_fraction
    if is_nan(f) or f > th.wait_warning or is_nan(ev.gpu_util) or is_nan(ev.main.cpu_pct):
        return None
    if host_to_device(ctx) is not None:
        return None  # the copies explain the idle GPU better than generic host overhead
    if ev.gpu_util >= th.host_overhead_gpu_util or ev.main.cpu_pct < th.host_overhead_main_cpu:
        return None
    return Finding(
        "host.overhead",
        "critical" if ev.gpu_util < 40 else "warning",
        f"the GPU is only {ev.gpu_util:.0f}% busy while the main thread runs {ev.main.cpu_pct:.0f}% of a core outside "
        f"data waits ({f:.0%} wait): the loop is host-bound (kernel launches, syncs, Python work)",
        [],
        base_evidence(w) | {"gpu_util_pct": rounded(ev.gpu_util, 1), "main_cpu_pct": rounded(ev.main.cpu_pct, 1)},
        advice_items=code_advice(
            "capture the step with CUDA Graphs or torch.compile(mode='reduce-overhead')",
            "remove per-step syncs (.item(), .cpu(), print of tensors); use a larger batch",
            "press d on the main process to see where its time goes",
        ),
    )


@rule(Stage.PER_HOST, "memory.host_pressure")
def host_memory(ctx: RuleContext) -> Finding | None:
    host, th = ctx.h, ctx.th
    mem, swap = host.mem_used_pct_max, host.swap_growth_mb
    if (not is_nan(mem) and mem >= th.host_mem_pct) or (not is_nan(swap) and swap >= th.swap_growth_mb):
        return Finding(
            "memory.host_pressure",
            "critical" if not is_nan(swap) and swap >= th.swap_growth_mb else "warning",
            f"host memory {mem:.0f}% used, swap grew {0 if is_nan(swap) else swap:.0f} MB in the window",
            [],
            {"mem_used_pct_max": rounded(mem, 1), "swap_growth_mb": rounded(swap, 1)},
            [
                AdviceItem(
                    "reduce num_workers or prefetch_factor (each worker holds its own copy of Python objects)",
                    {"num_workers": LOWER, "prefetch_factor": LOWER},
                    "each worker holds its own copy of Python objects",
                ),
                AdviceItem("keep datasets as memory-mapped arrays or tensors instead of lists of Python objects"),
            ],
        )
    return None
