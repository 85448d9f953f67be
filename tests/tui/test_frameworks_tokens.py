"""The training pane shows tokens/s beside samples/s for sequence batches, and the batch size the agent read off
the batches of a loader without one."""

from __future__ import annotations

from testsupport.stores import timeline_store
from testsupport.tui import aio, make_app, settle, text
from trainmon.tui.widgets import ChartPane

LOADER = {"id": 1, "num_workers": 2, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True}
# 10 batches of 32 samples read, all token batches: 4096 real tokens each, 128 a sample.
MEASURED = {"measured_batches": 10, "measured_samples": 320, "measured_token_batches": 10, "measured_tokens": 40960}


@aio
async def test_tokens_per_second_beside_samples_per_second():
    store = timeline_store(120.0)
    store.info(1, store.last_t, {"loader": {**LOADER, "batch_size": 32, **MEASURED}})
    app = make_app(store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        training = text(app.query_one("#training", ChartPane))
        line = next(ln for ln in training.splitlines() if ln.startswith("thru"))
        samples = float(line.split("samples/s ")[1].split(" ·")[0])
        tokens = line.split(" · ")[1].split(" tok/s")[0]
        assert tokens.endswith("k") and abs(float(tokens[:-1]) * 1000 - samples * 128) <= 0.01 * samples * 128


@aio
async def test_a_loader_without_batch_size_shows_the_measured_one_and_no_tokens_for_other_batches():
    store = timeline_store(120.0)
    store.info(1, store.last_t, {"loader": {**LOADER, "batch_size": None, **MEASURED, "measured_token_batches": 0}})
    app = make_app(store=store)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        training = text(app.query_one("#training", ChartPane))
        assert training.splitlines()[0].startswith("── Training · train.py pid 4242 · bs 32 · 2 workers")
        assert "tok/s" not in training
