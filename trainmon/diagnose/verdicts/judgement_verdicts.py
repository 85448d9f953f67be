"""The judgements that name no cause: the model is what takes the time, or too little is known yet.

In the order of their priority (``VERDICTS`` in ``trainmon.diagnose.verdicts``)."""

from trainmon.diagnose.verdicts.declaration import Verdict

JUDGEMENTS: tuple[Verdict, ...] = (
    Verdict(
        "ok.compute_bound",
        "no starvation: the accelerator (or the compute) is the limit",
        "#2e7d32",
        thresholds=(
            "wait_warning",
            "gpu_busy_pct",
            "wait_critical",
            "workers_ahead_share",
            "sm_active_low_pct",
        ),
        explains="nothing starves the accelerator",
        evidence="`f_wait`; with a GPU, the run's GPUs' utilisation and (GPM) SM activity",
        advice="speed up the model itself (AMP, `torch.compile`, larger batch)",
        when=(
            "`f_wait` ≤ {wait_warning:%}, and with a GPU: ≥ {gpu_busy_pct} % busy and SM activity ≥ "
            "{sm_active_low_pct} % where GPM exists"
        ),
    ),
    Verdict(
        "insufficient_data",
        "too few steps after warm-up to judge",
        "#9e9e9e",
        thresholds=("min_steps", "sampled_min_samples", "sampled_idle_cpu_pct"),
        explains="too few steps after warm-up to judge",
        evidence="steady-state step count",
        advice="keep training",
        when=(
            "< {min_steps} steady-state steps (a training sampled without an agent: < {sampled_min_samples} "
            "samples, or its main process under {sampled_idle_cpu_pct} % CPU)"
        ),
    ),
)
