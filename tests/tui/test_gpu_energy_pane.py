"""The GPU pane's energy per step on the whole screen at 80×24 and 120×40 (a replay of a store with GPU energy
series: testsupport/energy_stores.py), read as the terminal shows it."""

from __future__ import annotations

from testsupport.energy_stores import energy_store
from testsupport.tui import aio, make_app, settle, text
from trainmon.tui.widgets import ChartPane


@aio
async def test_energy_per_step_is_whole_at_80x24_plain_and_focused_and_per_sample_too_when_focused_wider():
    app = make_app(store=energy_store({10: [0], 20: [1]}, draw=lambda g, k: 412.0 if g == 0 else 150.0))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        rows = text(app.query_one("#gpu", ChartPane)).splitlines()
        assert len(rows) == 2 and all(len(r) <= 80 for r in rows)
        assert rows[0].startswith("GPU0") and rows[0].rstrip().endswith("90% 40.0G 412W 20.6J/step")
        assert rows[1].startswith("GPU1") and rows[1].rstrip().endswith("90% 40.0G 150W 7.50J/step")
        for _ in range(2):  # focus the GPU pane (after the training pane): taller tracks, the same narrow column
            await pilot.press("f")
            await settle(pilot, app)
        gpu = text(app.query_one("#gpu", ChartPane))
        assert "mem 40.0G 412W 20.6J/step" in gpu and "mem 40.0G 150W 7.50J/step" in gpu
        await pilot.resize_terminal(120, 40)
        await settle(pilot, app)
        gpu = text(app.query_one("#gpu", ChartPane))
        assert "energy 20.6J/step 0.64J/smp counter" in gpu and "energy 7.50J/step 0.23J/smp counter" in gpu
