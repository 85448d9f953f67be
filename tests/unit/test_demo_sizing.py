"""The demo's model sized to the host (--step-ms): the width is found from the step's cost model, clamped, and a
distributed run is told to give --width instead of each rank sizing a model of its own."""

from __future__ import annotations

import pytest

from trainmon.demo import sizing
from trainmon.demo.train import main


@pytest.mark.parametrize("width", [64, 512, 1536, 4096, 8192])
def test_the_width_for_a_size_is_the_width_that_has_it(width):
    assert sizing._width_for(sizing._size(width, 256), 256) == width


def test_the_width_stays_within_what_the_demo_can_train():
    assert sizing._width_for(0.0, 256) == sizing.MIN_WIDTH
    assert sizing._width_for(1e12, 256) == sizing.MAX_WIDTH
    assert sizing._width_for(sizing._size(1000, 256), 256) % sizing.QUANTUM == 0


def test_the_sizing_inverts_the_cost_it_measures(monkeypatch):
    """With a host whose step costs 1 ms plus 10 ns per unit of size, the width for a 40 ms step is the one whose
    size costs 39 ms (up to the quantum), found from the probes and one correction."""
    probes: list[int] = []

    def fake_step(width, features, batch, device, steps=5):
        probes.append(width)
        return 1e-3 + 1e-8 * sizing._size(width, features)

    monkeypatch.setattr(sizing, "step_time", fake_step)
    width, measured = sizing.sized_width(40.0, 256, 32, None)
    one_quantum_ms = 1e-5 * (sizing._size(width + sizing.QUANTUM, 256) - sizing._size(width, 256))
    assert abs(measured - 40.0) <= one_quantum_ms
    assert probes[:2] == list(sizing.PROBE_WIDTHS) and len(probes) <= 4


def test_a_distributed_run_is_refused_with_one_line(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main(["--step-ms", "10", "--no-attach", "--steps", "1"]) == 2
    assert "--step-ms sizes one rank's model" in capsys.readouterr().out
