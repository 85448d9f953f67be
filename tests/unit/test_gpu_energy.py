"""A GPU's energy (gpu.<i>.energy_j, energy_counter) from the GPU source, against a fake pynvml whose energy
counter and power a test clock drives: NVML's counter where the GPU has one, power × time where it has none, and a
counter that went back (a driver reload) or jumped never makes a negative or huge figure."""

from __future__ import annotations

import logging
import math

import pytest

from testsupport import fake_pynvml as fk
from testsupport.fake_pynvml import FakeNvml
from trainmon.sources.gpu.energy_counter import MAX_PLAUSIBLE_W, EnergyMeter
from trainmon.sources.gpu.gpu_source import GpuSource


class Clock:
    """The fake driver's clock and the monitor's ticks, one and the same here."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def rig(n: int = 1, **device) -> tuple[Clock, FakeNvml, GpuSource]:
    clock = Clock()
    fake = FakeNvml(n, clock=clock, **device)
    return clock, fake, GpuSource(fake, pid_exists=lambda pid: True)


def tick(clock: Clock, src: GpuSource, dt: float = 1.0) -> dict[str, float]:
    clock.t += dt
    return src.sample(clock.t)


def test_counter_gives_the_energy_the_gpu_drew_not_its_power_reading_times_time():
    clock, fake, src = rig()
    fake.set_power(0, 250_000, draw_mw=300_000)  # reads 250 W; what it drew was 300 W
    first = src.sample(clock.t)
    assert first["gpu.0.energy_j"] == 0.0 and math.isnan(first["gpu.0.energy_counter"])
    totals = [tick(clock, src, dt) for dt in (1.0, 0.5, 2.0)]
    assert [round(o["gpu.0.energy_j"], 6) for o in totals] == [300.0, 450.0, 1050.0]
    assert all(o["gpu.0.energy_counter"] == 1.0 for o in totals)
    assert round(fake.energy_j(0) - fk.FakeDevice().energy_mj / 1e3, 6) == 1050.0  # the counter by hand


def test_a_gpu_without_the_counter_integrates_power_and_is_asked_once(caplog):
    caplog.set_level(logging.INFO, logger="trainmon.gpu")
    clock, fake, src = rig(energy_counter=False)
    fake.set_power(0, 200_000)
    src.sample(clock.t)
    out = tick(clock, src, 2.0)
    assert out["gpu.0.energy_j"] == pytest.approx(400.0) and out["gpu.0.energy_counter"] == 0.0
    fake.set_power(0, 300_000)
    out = tick(clock, src, 1.0)
    assert out["gpu.0.energy_j"] == pytest.approx(400.0 + (200.0 + 300.0) / 2)  # power at both ends, averaged
    for _ in range(5):
        tick(clock, src)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1  # Not Supported: never asked again
    said = [r.getMessage() for r in caplog.records if "nvmlDeviceGetTotalEnergyConsumption" in r.getMessage()]
    assert len(said) == 1 and "Not Supported" in said[0]


def test_a_binding_without_the_function_integrates_power():
    clock = Clock()
    fake = FakeNvml(1, clock=clock)
    fake.hide("nvmlDeviceGetTotalEnergyConsumption")
    src = GpuSource(fake, pid_exists=lambda pid: True)
    src.sample(clock.t)
    out = tick(clock, src, 1.0)
    assert out["gpu.0.energy_j"] == pytest.approx(fk.FakeDevice().power_mw / 1e3)
    assert out["gpu.0.energy_counter"] == 0.0


def test_a_counter_reset_falls_back_to_power_for_that_interval_only():
    clock, fake, src = rig()
    fake.set_power(0, 250_000, draw_mw=300_000)
    src.sample(clock.t)
    before = tick(clock, src)["gpu.0.energy_j"]
    clock.t += 0.4
    fake.reset_energy(0)  # the driver reloads 0.4 s into the interval: the counter starts again from 0
    out = tick(clock, src, 0.6)
    assert out["gpu.0.energy_counter"] == 0.0  # measured from power: 250 W at both ends
    assert out["gpu.0.energy_j"] == pytest.approx(before + 250.0)
    after = tick(clock, src)
    assert after["gpu.0.energy_counter"] == 1.0 and after["gpu.0.energy_j"] == pytest.approx(before + 250.0 + 300.0)


def test_a_counter_that_jumps_beyond_any_gpu_is_not_taken():
    clock, fake, src = rig()
    src.sample(clock.t)
    fake.devices[0].energy_mj += MAX_PLAUSIBLE_W * 1e3 * 5  # 5 s of 3 kW within one 1 s interval
    out = tick(clock, src)
    assert out["gpu.0.energy_counter"] == 0.0
    assert out["gpu.0.energy_j"] == pytest.approx(fk.FakeDevice().power_mw / 1e3)


def test_energy_is_a_counter_across_a_lost_gpu_and_no_interval_spans_the_loss():
    clock, fake, src = rig()
    src.sample(clock.t)
    total = tick(clock, src)["gpu.0.energy_j"]
    fake.devices[0].lost = True
    assert math.isnan(tick(clock, src)["gpu.0.energy_j"])
    fake.devices[0].lost = False
    clock.t += 10.0  # the source opens a lost GPU again every few seconds
    back = src.sample(clock.t)
    assert back["gpu.0.energy_j"] == total and math.isnan(back["gpu.0.energy_counter"])  # a new start, not 12 s
    assert tick(clock, src)["gpu.0.energy_j"] == pytest.approx(total + fk.FakeDevice().power_mw / 1e3)


def test_nothing_read_is_nan_with_the_reason():
    clock, fake, src = rig()
    src.sample(clock.t)
    fake.fail("nvmlDeviceGetTotalEnergyConsumption", fk.NVML_ERROR_TIMEOUT)
    fake.fail("nvmlDeviceGetPowerUsage", fk.NVML_ERROR_TIMEOUT)
    out = tick(clock, src)
    assert math.isnan(out["gpu.0.energy_j"]) and math.isnan(out["gpu.0.energy_counter"])
    assert "Timeout" in src.na_reasons["gpu.0.energy_j"]
    fake.clear_failures()
    out = tick(clock, src)  # the counter measures from the last sample that read it, over both intervals
    assert out["gpu.0.energy_counter"] == 1.0
    assert out["gpu.0.energy_j"] == pytest.approx(2 * fk.FakeDevice().power_mw / 1e3)


def test_mig_devices_have_no_energy_and_their_gpu_has():
    clock, fake, src = rig()
    fake.enable_mig(0, ["3g.40gb"])
    src = GpuSource(fake, pid_exists=lambda pid: True)
    src.sample(clock.t)
    out = tick(clock, src)
    assert out["gpu.0.energy_counter"] == 1.0 and out["gpu.0.energy_j"] > 0
    assert math.isnan(out["gpu.1.energy_j"]) and "MIG" in src.na_reasons["gpu.1.energy_j"]


def test_meter_never_goes_back():
    meter = EnergyMeter()
    readings = [(0.0, 5e6, 100.0), (1.0, 5.1e6, 100.0), (2.0, 10.0, 120.0), (3.0, 1e15, 90.0), (4.0, 1e15, 90.0)]
    totals = [meter.update(t, c, p)[0] for t, c, p in readings]
    assert totals == sorted(totals) and totals[-1] == pytest.approx(100.0 + 110.0 + 105.0 + 0.0)
    assert meter.resets == 2
