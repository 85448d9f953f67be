"""A GPU's energy since the monitor began watching it, one interval between samples at a time.

Where the GPU has NVML's total energy counter (`nvmlDeviceGetTotalEnergyConsumption`: millijoules since the
driver loaded, Volta and newer) an interval's energy is the counter's difference. Where it has none (the call
raises NotSupported, or the binding or driver lacks it), and for an interval where the counter went backwards (the
driver was reloaded: it starts again from 0) or jumped further than any GPU can draw, it is the power read at both
ends of the interval, averaged, times the time between them. An interval neither way can measure adds nothing and
is marked unmeasured: the readers of the series leave it out rather than count it as 0 J.

The source writes two series per GPU (``trainmon.metrics.GPU``): ``energy_j``, the joules summed so far (a
counter: it never goes back), and ``energy_counter``, how the interval that ends at this sample was measured (1
the counter, 0 power × time, NaN unmeasured or the first sample).
"""

from __future__ import annotations

import math

from trainmon.numbers import NAN, is_nan

# No GPU draws this much: a counter difference above it over an interval is a reset or a glitch, not energy.
MAX_PLAUSIBLE_W = 3000.0

COUNTER = 1.0
POWER = 0.0


class EnergyMeter:
    """One device's energy. `update` once per sample with what NVML gave (None / NaN where it gave nothing)."""

    def __init__(self) -> None:
        self.total_j = 0.0
        self._t: float | None = None  # when the previous sample was taken
        self._counter_mj: float | None = None  # the counter read at that sample (None: not read)
        self._power_w = NAN  # the power read at that sample (NaN: not read)
        self.resets = 0  # intervals where the counter went back or jumped: measured from power instead

    def update(self, now: float, counter_mj: float | None, power_w: float) -> tuple[float, float]:
        """(joules so far, how the interval ending ``now`` was measured: COUNTER, POWER or NaN).

        Where this sample read neither counter nor power (the GPU answered nothing) both are NaN and the next
        sample measures from the previous one."""
        if counter_mj is None and is_nan(power_w):
            return NAN, NAN
        method = NAN
        dt = now - self._t if self._t is not None else 0.0
        if dt > 0:
            joules = NAN
            if counter_mj is not None and self._counter_mj is not None:
                delta = (counter_mj - self._counter_mj) / 1e3
                if 0.0 <= delta <= MAX_PLAUSIBLE_W * dt:
                    joules, method = delta, COUNTER
                else:
                    self.resets += 1
            if is_nan(joules) and not is_nan(self._power_w) and not is_nan(power_w):
                joules, method = (self._power_w + power_w) / 2 * dt, POWER
            if not is_nan(joules):
                self.total_j += joules
        # Both baselines belong to this sample: a counter that failed here cannot measure across it.
        self._t, self._counter_mj, self._power_w = now, counter_mj, power_w
        return self.total_j, method

    def restart(self) -> None:
        """Forget the previous sample (the GPU was lost): the next one starts a new interval, the total stays."""
        self._t, self._counter_mj, self._power_w = None, None, NAN


def counter_value(raw: object) -> float | None:
    """NVML's counter reading as millijoules, or None where it is not a number."""
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value >= 0 else None
