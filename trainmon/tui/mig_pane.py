"""The GPU pane's rows for a MIG device, or a GPU in MIG mode, where NVML gives no utilisation."""

from __future__ import annotations

from trainmon.numbers import finite
from trainmon.tui.charts import bars, fmt_mb, fmt_num, fmt_pct, fmt_rate
from trainmon.tui.lines import Line, Track
from trainmon.tui.pane_text import UTIL
from trainmon.tui.pane_text import columns as _cols
from trainmon.tui.pane_text import label as _lbl
from trainmon.tui.pane_text import value as _val
from trainmon.tui.theme import Glyphs
from trainmon.view import Frame
from trainmon.view.frames import GpuView


def mig_track(g: GpuView, frame: Frame, glyphs: Glyphs, height: int) -> Track:
    """A MIG device, or a GPU in MIG mode: NVML gives no utilisation, so the chart is memory and the figure says
    why there is none (never 0 %)."""
    v = g.values
    rows = bars([_cols(g.mem_pct, frame)], [UTIL], 100.0, height, glyphs)
    mem = f"{fmt_mb(v.get('mem_used_mb'))}/{fmt_mb(v.get('mem_total_mb'))}"
    util_line: Line = [_lbl("util "), ("n/a", "dim", True), _lbl(g.util_note.removeprefix("n/a"))]
    if g.gpm:
        util_line += [_lbl(" · sm "), _val(fmt_pct(g.gpm.get("sm_active")))]
    mem_line: Line = [_lbl("mem "), _val(mem)]
    if g.mig_of is not None:
        where: Line = [_lbl(f"{g.mig_profile + ' ' if g.mig_profile else ''}on GPU{g.mig_of}")]
    else:
        power = f"{fmt_num(v.get('power_w'), 0)}/{fmt_num(v.get('power_limit_w'), 0)}W"
        mem_line += [_lbl(" · pwr "), _val(power)]
        where = (
            [("throttled: ", "warning", True), (", ".join(g.throttle), "warning", False)]
            if g.throttle
            else [_lbl("pcie h2d "), _val(fmt_rate(v.get("pcie_rx_mb_s"))), _lbl(" · "), _val(temp(v))]
        )
    if height == 1:
        values: list[Line] = [
            [("n/a", "dim", True), _lbl(g.util_note.removeprefix("n/a") + " "), _val(mem)]
            + ([_lbl(f" {g.mig_profile}")] if g.mig_profile else [])
        ]
    else:
        values = [util_line, mem_line, where][:height]
    return Track([g.label or f"GPU{g.index}", "mem%"][:height], rows, values)


def temp(v: dict[str, float]) -> str:
    return f"{v['temp_c']:.0f}°C" if finite(v.get("temp_c")) else "n/a"
