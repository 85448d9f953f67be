"""The agentless data-wait estimate against the training's own meters: real CPU trainings written like
pytorch/examples' imagenet/main.py (tests/workloads/examples_imagenet.py), sampled by PySpySampler as the monitor
samples them, over exactly the span between two of the script's meter lines. The cases run one after the other:
on a small host, two at once would change each other's figures. benchmarks/sampling_accuracy.py measures the same
over longer spans, with the sampler's cost and the target's slowdown."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks.sampling_accuracy import CASES, TOLERANCE, Training, sample_span
from trainmon.sources.pyspy import py_spy as pyspy

SPAN_S = 12.0
WARMUP_S = 2.0  # past the first steps (worker start, allocator warm-up)


@pytest.fixture(scope="module", autouse=True)
def _needs_torch_and_pyspy() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    if pyspy.find_pyspy() is None:
        pytest.skip(pyspy.NOT_FOUND)


@pytest.mark.parametrize("case", CASES)
def test_estimate_within_tolerance_of_the_scripts_own_figure(case: str) -> None:
    with Training(case, seconds=600) as training:
        first = training.next_meter(timeout=180)
        training.meter_after(first.t + WARMUP_S)
        probe = pyspy.dump(training.pid, timeout=15.0)
        if probe.error and "permission denied" in probe.error:
            pytest.skip(f"py-spy cannot attach here: {probe.error}")
        span = sample_span(training, SPAN_S)
    print(f"{case}: own {span.own:.3f}, estimate {span.estimate:.3f} ± {span.se:.3f}, {span.samples} samples")
    assert span.sampler_error is None, span.sampler_error
    assert span.samples >= 10 * SPAN_S, span  # about 50 a second, less py-spy's start-up once a second
    assert abs(span.estimate - span.own) <= TOLERANCE, span
