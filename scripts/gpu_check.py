"""GPU check of the exposed-idle measurement (needs a CUDA GPU; elsewhere prints "no CUDA GPU: skipped").

Two real CUDA trainings, each under a real ``trainmon record``: every step waits WAIT_MS on data loaded in
the main process, then queues matmuls and never synchronises.

- ``hidden``: each step queues about 1.5 × WAIT_MS of GPU work, so the queue is deep and the GPU keeps
  computing through every wait: trainmon's exposed share should be about 0 while the raw wait share is high.
- ``exposed``: each step queues about 0.3 × WAIT_MS of work, so the queue runs dry during each wait: the
  GPU idles for about 0.7 × WAIT_MS per step.

Ground truth: ``torch.profiler`` over the steady steps in the training child: the GPU's idle share of the
profiled span (span minus the union of its kernel intervals). The table puts trainmon's
``exposed_wait_fraction`` (from ``trainmon report --format json``) beside it.

    python scripts/gpu_check.py [--steps 120] [--wait-ms 40]

Written without a GPU at hand: it has not been run on one yet.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {"hidden": 1.5, "exposed": 0.3}  # GPU work queued per step, in units of the wait
PROFILE_FROM = 20  # steps before this are warm-up (trainmon skips its first 5 too)


def _child(case: str, steps: int, wait_ms: float) -> int:
    import torch
    from torch.utils.data import DataLoader, Dataset

    import trainmon.agent

    torch.cuda.init()  # the job initialises CUDA (the agent never does)
    trainmon.agent.attach()
    dev = torch.device("cuda")
    a = torch.randn(2048, 2048, device=dev)
    b = torch.randn(2048, 2048, device=dev)
    # Calibrate one matmul (synchronising here, before the measured loop, is the job's business).
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ b
    end.record()
    end.synchronize()
    per_mm = start.elapsed_time(end) / 20
    mms = max(1, round(CASES[case] * wait_ms / per_mm))

    class Slow(Dataset):
        def __len__(self) -> int:
            return steps

        def __getitem__(self, i: int):
            time.sleep(wait_ms / 1e3)
            return torch.zeros(8)

    model = torch.nn.Linear(8, 8).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    it = iter(DataLoader(Slow(), batch_size=None, num_workers=0))
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    prof = torch.profiler.profile(activities=acts)
    for k in range(steps):
        if k == PROFILE_FROM:
            prof.start()
        batch = next(it).to(dev, non_blocking=True)
        c = a
        for _ in range(mms):
            c = c @ b
        model(batch).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    prof.stop()
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start
    )
    busy = 0.0
    cur_s, cur_e = spans[0]
    for s, e in spans[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = spans[-1][1] - spans[0][0]
    print(json.dumps({"idle_share": 1 - busy / span, "matmuls": mms, "matmul_ms": per_mm, **trainmon.agent.stats()}))
    return 0


def _run_case(case: str, steps: int, wait_ms: float, tmp: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINMON_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    addr, rec = os.path.join(tmp, f"{case}.sock"), os.path.join(tmp, f"{case}.tmrec")
    py = sys.executable
    recorder = subprocess.Popen(
        [py, "-m", "trainmon", "record", "-o", rec, "--listen", addr, "-q"], env=env, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(addr) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = subprocess.run(
            [py, __file__, "--child", case, "--steps", str(steps), "--wait-ms", str(wait_ms)],
            env=dict(env, TRAINMON_ADDR=addr),
            capture_output=True,
            text=True,
            timeout=600,
        )
        if child.returncode != 0:
            raise SystemExit(f"{case}: training failed:\n{child.stderr}")
        truth = json.loads(child.stdout.strip().splitlines()[-1])
        time.sleep(1.0)
    finally:
        recorder.terminate()
        recorder.wait(timeout=30)
    report = subprocess.run(
        [py, "-m", "trainmon", "report", rec, "--format", "json"], env=env, capture_output=True, text=True, check=True
    )
    (run,) = json.loads(report.stdout)["runs"]
    return {"case": case, "run": run, "truth": truth}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--wait-ms", type=float, default=40.0)
    ap.add_argument("--child", choices=sorted(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return _child(args.child, args.steps, args.wait_ms)
    try:
        import torch
    except ImportError:
        print("no torch: skipped")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA GPU: skipped")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="tm-gpu-check-") as tmp:
        for case in CASES:
            rows.append(_run_case(case, args.steps, args.wait_ms, tmp))
    print(f"{'case':<8} {'data wait':>10} {'trainmon exposed':>17} {'profiler GPU idle':>18} {'diff':>7}  pairs")
    worst = 0.0
    for r in rows:
        run, truth = r["run"], r["truth"]
        exposed = run.get("exposed_wait_fraction")
        diff = abs(exposed - truth["idle_share"]) if exposed is not None else float("nan")
        worst = max(worst, diff) if diff == diff else float("inf")
        print(
            f"{r['case']:<8} {run['data_wait_fraction']:>10.3f} "
            f"{exposed if exposed is not None else float('nan'):>17.3f} {truth['idle_share']:>18.3f} {diff:>7.3f}  "
            f"measured {truth.get('exposed_measured')}, skipped {truth.get('exposed_skipped')}"
        )
    print(f"largest difference: {worst:.3f} (the profiler's idle share also counts idle outside waits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
