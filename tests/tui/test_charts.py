"""The chart drawing functions as text: stacked bars, braille areas, heat strips, scales, glyph modes."""

from __future__ import annotations

from testsupport.tui import COLOR
from trainmon.tui.charts import Layer, area, bars, heat, nice_top
from trainmon.tui.theme import Glyphs, detect_mode

# ---------------------------------------------------------------- chart widgets as text


def test_stacked_bars_split_each_column_to_an_eighth():
    rows = bars([[1.0, 2.0, 0.0], [1.0, 0.0, 4.0]], [Layer("wait"), Layer("compute")], 4.0, 2, COLOR)
    assert ["".join(c[0] for c in row) for row in rows] == ["  █", "▄██"]
    # column 0: the lower row is half wait (fg) on compute (bg); column 2: compute alone
    assert rows[1][0] == ("▄", "wait", "compute") and rows[0][2] == ("█", "compute", None)
    mono = bars([[3.0], [1.0]], [Layer("wait", "█", "#"), Layer("compute", "▒", "=")], 4.0, 4, Glyphs("block", False))
    assert [r[0][0] for r in mono] == ["▒", "█", "█", "█"]
    ascii_rows = bars(
        [[3.0], [1.0]], [Layer("wait", "█", "#"), Layer("compute", "▒", "=")], 4.0, 4, Glyphs("ascii", True)
    )
    assert [r[0][0] for r in ascii_rows] == ["=", "#", "#", "#"]


def test_braille_area_two_samples_per_cell_and_heat_strip():
    rows = area([100.0, 50.0, 0.0, float("nan")], 100.0, 1, "rate", COLOR)
    assert rows[0][0][0] == chr(0x2800 + 0x40 | 0x04 | 0x02 | 0x01 | 0x80 | 0x20)  # left full, right half
    assert rows[0][1][0] == " "  # zero and missing: nothing drawn
    assert heat([0.0, 50.0, 100.0], COLOR, 10) == " ▄█"
    assert heat([0.0, 50.0, 100.0, 100.0], Glyphs("ascii", True), 2) == ":@"
    assert nice_top([0.3, 37.0]) == 50 and nice_top([]) == 1.0 and nice_top([120.0]) == 200


def test_a_column_drawn_from_memory_is_the_column_drawn_afresh():
    """Columns are kept by what decides them (tui/charts.py): a chart whose values come back, shifted, on other
    settings or in another glyph mode, draws what it draws with nothing kept."""
    import math

    from trainmon.tui import charts

    specs = [Layer("wait"), Layer("compute")]
    waits = [(k * 7 % 11) * 0.9 for k in range(40)] + [math.nan, -1.0, math.inf]
    computes = [(k * 5 % 13) * 0.4 for k in range(43)]
    levels = [(k * 3 % 17) * 6.0 for k in range(86)] + [math.nan, 0.0]
    draws = []
    for glyphs in (COLOR, Glyphs("block", False), Glyphs("ascii", True)):
        for shift in (0, 3):
            for top, height in ((10.0, 3), (20.0, 3), (10.0, 5)):
                w, c = waits[shift:] + waits[:shift], computes[shift:] + computes[:shift]
                draws.append(lambda w=w, c=c, t=top, h=height, g=glyphs: bars([w, c], specs, t, h, g))
                draws.append(lambda t=top, h=height, g=glyphs, s=shift: area(levels[2 * s :], t * 10, h, "rate", g))
    kept = [draw() for draw in draws]
    assert charts._COLUMNS  # the columns were kept
    charts._COLUMNS.clear()
    fresh = [draw() for draw in draws]
    assert kept == fresh
    assert kept[0] != kept[2]  # another scale draws other cells (the key holds it)


def test_glyph_mode_detection():
    assert detect_mode({"LANG": "en_US.UTF-8", "TERM": "xterm-256color"}) == "braille"
    assert detect_mode({"LANG": "C", "TERM": "xterm"}) == "ascii"
    assert detect_mode({"LC_ALL": "en_US.UTF-8", "LANG": "C"}) == "braille"
    assert detect_mode({"TERM": "linux"}) == "ascii"
    assert detect_mode({"TRAINMON_GLYPHS": "block", "LANG": "C"}) == "block"
    assert detect_mode({}) == "braille"


def test_chart_scale_is_not_pushed_up_by_float_noise():
    assert nice_top([0.05 * 1e3 + 1e-11]) == 50  # a 50 ms step, summed in floats
    assert nice_top([50.5]) == 100
    assert nice_top([0.2], floor=1.0) == 1


def test_chart_row_segments_are_the_cells_run_by_run_with_the_cursor_reversed():
    """``cells_to_segments`` groups runs at C speed: held against the plain reading, one cell at a time, of rows
    of every shape (long runs, alternating colours, blanks) with the cursor anywhere or nowhere."""
    import random

    from rich.segment import Segment

    from trainmon.tui.lines import cells_to_segments
    from trainmon.tui.theme import style

    def plain(cells, glyphs, cursor):
        out = []
        for c, (ch, fg, bg) in enumerate(cells):
            rev = False
            if c == cursor:
                if ch == " ":
                    ch, fg, bg = ("│" if glyphs.unicode else "|"), "cursor", None
                else:
                    rev = True
            s = style(fg, bg, reverse=rev, color=glyphs.color)
            if out and out[-1][1] == (fg, bg, rev):
                out[-1][0].append(ch)
            else:
                out.append(([ch], (fg, bg, rev), s))
        return [Segment("".join(chars), s) for chars, _, s in out]

    rng = random.Random(7)
    palette = [(" ", None, None), ("█", "wait", None), ("▄", "wait", "compute"), ("█", "compute", None)]
    for glyphs in (COLOR, Glyphs("block", False), Glyphs("ascii", True)):
        for _ in range(200):
            cells = [rng.choice(palette[: rng.randint(1, 4)]) for _ in range(rng.randint(0, 40))]
            for cursor in (None, 0, len(cells) - 1, rng.randint(-2, 42)):
                got = cells_to_segments(cells, glyphs, cursor)
                want = plain(cells, glyphs, cursor)
                assert "".join(s.text for s in got) == "".join(s.text for s in want)
                assert got == want, (cells, cursor)
