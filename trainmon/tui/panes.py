"""Each pane's tracks from a Frame: which charts, at what scale and height, with which figures beside them.

Pure functions of (frame, geometry, glyphs, size): the widgets only draw what these return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainmon.numbers import finite
from trainmon.tui.budget_line import budget_line
from trainmon.tui.charts import (
    Layer,
    area,
    bars,
    fmt_mb,
    fmt_ms,
    fmt_num,
    fmt_pct,
    fmt_rate,
    heat,
    nice_top,
    overlay_marks,
)
from trainmon.tui.energy_cells import energy_line, per_step
from trainmon.tui.lines import Geometry, Line, Track, plain
from trainmon.tui.mig_pane import mig_track as _mig_track
from trainmon.tui.pane_text import UTIL
from trainmon.tui.pane_text import columns as _cols
from trainmon.tui.pane_text import label as _lbl
from trainmon.tui.pane_text import value as _val
from trainmon.tui.theme import Glyphs
from trainmon.view import Frame, RunView

PANES = ("training", "gpu", "cpu", "disk", "procs")
WAIT = Layer("wait", "█", "#")
COMPUTE = Layer("compute", "▒", "=")
SWING = Layer("swing", "░", ":")
BUSY = Layer("busy", "█", "#")
IOWAIT = Layer("iowait", "▒", "%")
READ = Layer("read", "█", "#")
WRITE = Layer("write", "▒", "=")


@dataclass(frozen=True)
class Size:
    """How much room a pane gets: ``compact`` at 80×24; ``focused`` doubles its charts."""

    compact: bool = False
    focused: bool = False

    def rows(self, full: int, compact: int) -> int:
        n = compact if self.compact else full
        return n * 2 if self.focused else n


PaneBuilder = Callable[[Frame, Geometry, Glyphs, Size], "tuple[Line, list[Track]]"]


# ---------------------------------------------------------------- training


def training(frame: Frame, geo: Geometry, glyphs: Glyphs, size: Size) -> tuple[Line, list[Track]]:
    runs = frame.runs
    if not runs and not frame.agentless:
        text = plain(
            "waiting for a training process: trainmon.agent.attach() in the script, or trainmon run -- python train.py",
            "dim",
        )
        return [("Training", "text", True)], [Track(text=text)]
    tracks: list[Track] = []
    many = len(runs) > 1
    if runs:
        totals = [
            w + c
            for r in runs
            for w, c in zip(_cols(r.wait_ms, frame), _cols(r.compute_ms, frame), strict=True)
            if finite(w) and finite(c)
        ]
        top = nice_top(totals, 1.0)
        for i, run in enumerate(runs[:8] if many else runs):
            if many:
                height = size.rows(3 if i == 0 else 2, 1)
            else:
                height = size.rows(4, 3)
            tracks.append(_run_track(run, frame, glyphs, top, height, many, size, geo.values_w))
            if not many and not size.compact:
                tracks.append(_rate_track(run, frame, glyphs, size.rows(2, 1), geo.values_w))
        if many and len(runs) > 8:
            tracks.append(Track(text=plain(f"… {len(runs) - 8} more ranks", "dim")))
    for a in frame.agentless:
        rows = area(a.wait_share, 100.0, size.rows(2, 1), "wait", glyphs)
        values: list[Line] = [
            [_lbl("not attached "), _val(f"{a.name} pid {a.pid}".strip())],
            [_lbl("data wait "), _val(fmt_pct(a.values.get("wait_pct")), "wait", True)],
            [_lbl("checkpoint "), _val(fmt_pct(a.values.get("checkpoint_pct")))],
        ]
        if size.compact:
            values = [
                [
                    _lbl("sampled wait "),
                    _val(fmt_pct(a.values.get("wait_pct")), "wait", True),
                    _lbl(f" {a.name} pid {a.pid} not attached".replace("  ", " ")),
                ]
            ]
        tracks.append(Track(["py-spy", "wait%"], rows, values))
    first = runs[0] if runs else None
    title: Line = [("Training", "text", True)]
    if first is not None and not many:
        title += [
            _lbl(f" · {first.name} pid {first.pid}"),
            _lbl(f" · {first.loader}" if first.loader else ""),
            _lbl(f" · {first.state}" if first.state != "running" else ""),
        ]
    elif many:
        title += [_lbl(f" · {len(runs)} ranks · {first.name if first else ''}")]
    if frame.agentless and not runs:
        title += [_lbl(" · not attached: sampled by py-spy · select it below and press a to attach")]
    return title, tracks


def _run_track(
    run: RunView, frame: Frame, glyphs: Glyphs, top: float, height: int, many: bool, size: Size, width: int
) -> Track:
    wait, compute = _cols(run.wait_ms, frame), _cols(run.compute_ms, frame)
    rows = bars([wait, compute], [WAIT, COMPUTE], top, height, glyphs)
    if rows:
        rows[0] = overlay_marks(rows[0], run.marks)
    v = run.values
    gutter = ["step", fmt_ms(top)] if not many else [run.label.replace("rank ", "rank"), fmt_ms(top)]
    if height == 1:
        gutter = [gutter[0]]
    step_line: Line = [
        _lbl("step "),
        _val(fmt_ms(v.step_ms), bold=True),
        _lbl(" = wait "),
        _val(fmt_ms(v.wait_ms), "wait", True),
        _lbl(" + "),
        _val(fmt_ms(v.compute_ms), "compute", True),
    ]
    wait_line: Line = [
        _lbl("data wait "),
        _val(fmt_pct(v.wait_pct), "wait", True),
        _lbl(" · "),
        _val(fmt_num(v.samples_s, 0)),
        _lbl(" samples/s"),
    ]
    steps_line: Line = [_lbl("steps "), _val(str(v.steps_total)), _lbl(" · "), _val(fmt_num(v.steps_s, 1)), _lbl("/s")]
    if many:
        values: list[Line] = [
            [
                _val(fmt_ms(v.step_ms), bold=True),
                _lbl(" wait "),
                _val(fmt_pct(v.wait_pct), "wait"),
                _lbl(" · "),
                _val(fmt_num(v.samples_s, 0)),
                _lbl("/s"),
            ]
        ]
        if height > 1:
            values.append([_lbl(f"pid {run.pid} "), _lbl(run.state if run.state != "running" else "")])
    elif size.compact and height < 4:
        values = [
            [
                _val(fmt_ms(v.step_ms), bold=True),
                _lbl(" = "),
                _val(fmt_ms(v.wait_ms), "wait"),
                _lbl("+"),
                _val(fmt_ms(v.compute_ms), "compute"),
            ],
            [
                _lbl("wait "),
                _val(fmt_pct(v.wait_pct), "wait", True),
                _lbl(" "),
                _val(fmt_num(v.samples_s, 0)),
                _lbl(" smp/s"),
            ],
            budget_line(run, width) or steps_line,  # where the time went: room for one of them at 80x24
        ]
    else:
        values = [step_line, wait_line, steps_line]
        legend = _legend(glyphs)
        if legend:
            values.append(legend)
    return Track(gutter, rows, values[: max(height, 1)])


def _legend(glyphs: Glyphs) -> Line:
    if glyphs.color:
        return [
            ("■", "wait", False),
            _lbl(" data wait  "),
            ("■", "compute", False),
            _lbl(" compute  "),
            ("C", "mark", True),
            _lbl("kpt "),
            ("E", "mark", True),
            _lbl("val"),
        ]
    if glyphs.unicode:
        return [_lbl("█ data wait  ▒ compute  C ckpt E eval")]
    return [_lbl("# data wait  = compute  C ckpt E eval")]


def _rate_track(run: RunView, frame: Frame, glyphs: Glyphs, height: int, width: int) -> Track:
    top = nice_top(run.samples_s, 1.0)
    rows = area(run.samples_s if glyphs.braille else _cols(run.samples_s, frame), top, height, "rate", glyphs)
    v = run.values
    rate: Line = [_lbl("samples/s "), _val(fmt_num(v.samples_s, 0), "rate", True), *_tokens(v.tokens_s)]
    values: list[Line] = [rate, budget_line(run, width) or [_lbl(run.loader or "")]]  # the title names the loader
    return Track(["thru", fmt_num(top, 0)], rows, values[:height])


def _tokens(tokens_s: float) -> Line:
    """ " · 12.8k tok/s" beside samples/s for sequence batches (nothing for others); in the throughput track, where
    the value column has room for it."""
    return [_lbl(" · "), _val(fmt_num(tokens_s, 1)), _lbl(" tok/s")] if finite(tokens_s) else []


# ---------------------------------------------------------------- GPU


def gpu(frame: Frame, geo: Geometry, glyphs: Glyphs, size: Size) -> tuple[Line, list[Track]]:
    title: Line = [("GPU", "text", True)]
    if not frame.gpus:
        return title, [
            Track(text=[("no NVIDIA GPU: ", "warning", True), (frame.gpu_error or "none found", "dim", False)])
        ]
    n = len(frame.gpus)
    full_rows = 3 if n <= 2 else 2 if n <= 4 else 1
    tracks = []
    for g in frame.gpus:
        height = size.rows(full_rows, 1)
        if g.util_note:
            tracks.append(_mig_track(g, frame, glyphs, height))
            continue
        util, swing = _cols(g.util, frame), _cols(g.util_max, frame)
        swing = [max(0.0, m - u) if finite(m) and finite(u) else float("nan") for u, m in zip(util, swing, strict=True)]
        rows = bars([util, swing], [UTIL, SWING], 100.0, height, glyphs)
        v = g.values
        util_line: Line = [_lbl("util "), _val(fmt_pct(v.get("util")), "util", True)]
        if finite(v.get("util_min")) and finite(v.get("util_max")):
            util_line += [_lbl(f" ({v['util_min']:.0f}–{v['util_max']:.0f}%)")]
        if finite(v.get("temp_c")):
            util_line += [_lbl(" · "), _val(f"{v['temp_c']:.0f}°C")]
        mem = f"{fmt_mb(v.get('mem_used_mb'))}/{fmt_mb(v.get('mem_total_mb'))}"
        power = f"{fmt_num(v.get('power_w'), 0)}/{fmt_num(v.get('power_limit_w'), 0)}W"
        mem_line: Line = [_lbl("mem "), _val(mem), _lbl(" · pwr "), _val(power)]
        energy = g.energy[0] if g.energy else None  # the first run on this GPU ("*": shared with another)
        if energy is not None and height < 4:  # energy per step in place of the power limit (and total memory)
            narrow = size.compact or geo.values_w < 34  # 80 columns: used memory only, to keep J/step whole
            shown = fmt_mb(v.get("mem_used_mb")) if narrow else mem
            mem_line = [_lbl("mem "), _val(shown), _lbl(" " if narrow else " · ")]
            mem_line += [_val(f"{fmt_num(v.get('power_w'), 0)}W "), *per_step(energy)]
        pcie_line: Line = [
            _lbl("pcie h2d "),
            _val(fmt_rate(v.get("pcie_rx_mb_s"))),
            _lbl(" d2h "),
            _val(fmt_rate(v.get("pcie_tx_mb_s"))),
        ]
        extra: Line
        if g.throttle:
            extra = [("throttled: ", "warning", True), (", ".join(g.throttle), "warning", False)]
        elif g.gpm:
            extra = [
                _lbl("sm "),
                _val(fmt_pct(g.gpm.get("sm_active"))),
                _lbl(" tensor "),
                _val(fmt_pct(g.gpm.get("tensor_active"))),
                _lbl(" dram "),
                _val(fmt_pct(g.gpm.get("dram_bw"))),
            ]
        else:
            clock = f"{fmt_num(v.get('sm_clock_mhz'), 0)}/{fmt_num(v.get('sm_clock_max_mhz'), 0)}"
            extra = [_lbl("clock "), _val(clock), _lbl(" MHz")]
        if height == 1:
            values = [
                [
                    _val(fmt_pct(v.get("util")), "util", True),
                    _lbl(" "),
                    _val(mem if energy is None else fmt_mb(v.get("mem_used_mb"))),
                    _lbl(" "),
                    _val(f"{fmt_num(v.get('power_w'), 0)}W"),
                    ("!" if g.throttle else "", "warning", True),
                    *([_lbl(" "), *per_step(energy)] if energy is not None else []),
                ]
            ]
        else:
            energy_lines = [energy_line(energy)] if energy is not None else []
            values = (
                [util_line, mem_line, *energy_lines, pcie_line, extra][:height]
                if height >= 4
                else ([util_line, mem_line, extra if (g.throttle or g.gpm) else pcie_line][:height])
            )
        tracks.append(Track([g.label or f"GPU{g.index}", "util%"][:height], rows, values))
    names = sorted({g.name for g in frame.gpus if g.name and g.mig_of is None})
    if names:
        title += [_lbl(" · " + ", ".join(names))]
    migs = sum(1 for g in frame.gpus if g.mig_of is not None)
    if migs:
        title += [_lbl(f" · {migs} MIG device{'s' if migs > 1 else ''}")]
    return title, tracks


# ---------------------------------------------------------------- CPU and memory


def cpu(frame: Frame, geo: Geometry, glyphs: Glyphs, size: Size) -> tuple[Line, list[Track]]:
    c = frame.cpu
    v = c.values
    height = size.rows(3, 1)
    rows = bars([_cols(c.busy, frame), _cols(c.iowait, frame)], [BUSY, IOWAIT], 100.0, height, glyphs)
    cpu_line: Line = [
        _lbl("cpu "),
        _val(fmt_pct(v.get("cpu.busy")), "busy", True),
        _lbl(" usr "),
        _val(fmt_num(v.get("cpu.user"), 0)),
        _lbl(" sys "),
        _val(fmt_num(v.get("cpu.system"), 0)),
        _lbl(" io "),
        _val(fmt_pct(v.get("cpu.iowait")), "iowait", True),
    ]
    mem_line: Line = [
        _lbl("mem "),
        _val(f"{fmt_mb(v.get('mem.used_mb'))}/{fmt_mb(v.get('mem.total_mb'))}"),
        _lbl(" "),
        _val(fmt_pct(v.get("mem.used_pct"))),
        _lbl(" swap "),
        _val(f"{fmt_mb(v.get('swap.used_mb'))}/{fmt_mb(v.get('swap.total_mb'))}"),
    ]
    room = geo.values_w - 6
    cores = heat(c.per_core, glyphs, room)
    cores_line: Line = [_lbl("cores "), (cores, "busy", False)]
    if height == 1:
        values = [
            [
                _val(fmt_pct(v.get("cpu.busy")), "busy", True),
                _lbl(" io "),
                _val(fmt_pct(v.get("cpu.iowait")), "iowait"),
                _lbl(" mem "),
                _val(fmt_pct(v.get("mem.used_pct"))),
                _lbl(" "),
                (heat(c.per_core, glyphs, max(0, geo.values_w - 20)), "busy", False),
            ]
        ]
    else:
        values = [cpu_line, cores_line, mem_line]
        if height >= 4:
            values.append(
                [
                    _lbl("load "),
                    _val(fmt_num(v.get("load.1"), 2)),
                    _lbl(" · "),
                    _val(f"{v.get('cores', 0):.0f}" if finite(v.get("cores")) else "n/a"),
                    _lbl(" cores"),
                ]
            )
    title: Line = [
        ("CPU", "text", True),
        _lbl(f" · {v.get('cores', 0):.0f} cores" if finite(v.get("cores")) else ""),
        _lbl(f" · load {v['load.1']:.2f}" if finite(v.get("load.1")) else ""),
    ]
    return title, [Track(["CPU", "busy%"][:height], rows, values)]


# ---------------------------------------------------------------- disks


def disk(frame: Frame, geo: Geometry, glyphs: Glyphs, size: Size) -> tuple[Line, list[Track]]:
    title: Line = [("Disk", "text", True)]
    if not frame.disks:
        return title, [Track(text=plain("no block device with I/O", "dim"))]
    shown = frame.disks[:1] if size.compact and not size.focused else frame.disks[:3]
    tracks = []
    for d in shown:
        height = size.rows(2, 1)
        read, write = _cols(d.read, frame), _cols(d.write, frame)
        top = nice_top([r + w for r, w in zip(read, write, strict=True) if finite(r) and finite(w)], 1.0)
        rows = bars([read, write], [READ, WRITE], top, height, glyphs)
        v = d.values
        if height == 1:
            values = [
                [
                    _lbl("r "),
                    _val(fmt_rate(v.get("read_mb_s")), "read", True),
                    _lbl(" w "),
                    _val(fmt_rate(v.get("write_mb_s")), "write"),
                    _lbl(" "),
                    _val(fmt_pct(v.get("util_pct"))),
                ]
            ]
        else:
            values = [
                [
                    _lbl("read "),
                    _val(fmt_rate(v.get("read_mb_s")), "read", True),
                    _lbl(" write "),
                    _val(fmt_rate(v.get("write_mb_s")), "write", True),
                ],
                [
                    _lbl("util "),
                    _val(fmt_pct(v.get("util_pct"))),
                    _lbl(" await r "),
                    _val(fmt_num(v.get("r_await_ms"), 1)),
                    _lbl(" w "),
                    _val(fmt_num(v.get("w_await_ms"), 1)),
                    _lbl(" ms"),
                ],
            ]
        tracks.append(Track([d.name[:7], fmt_rate(top).replace("/s", "")][:height], rows, values))
    if len(frame.disks) > len(shown):
        title += [_lbl(f" · busiest {len(shown)} of {len(frame.disks)}")]
    return title, tracks


BUILDERS: dict[str, PaneBuilder] = {"training": training, "gpu": gpu, "cpu": cpu, "disk": disk}
