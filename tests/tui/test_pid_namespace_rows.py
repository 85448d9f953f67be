"""The process table's rows for a training in a pid namespace the monitor could not map: "n/a (other pid
namespace)" instead of another process's figures, and no stack dump of the pid it names here."""

from __future__ import annotations

from types import SimpleNamespace

from testsupport.stores import T0, timeline_store
from testsupport.tui import aio, fake_monitor, make_app, settle
from trainmon.tui.widgets import ProcTable
from trainmon.view import LiveFeed
from trainmon.view.frames import NS_NOTE


@aio
async def test_unmapped_rows_show_no_figures_and_are_never_dumped():
    store = timeline_store(20.0)
    hello = {"pid": 1, "host": "h", "session": "ns", "name": "contained", "pid_namespace": "unmapped"}
    store.hello(99, T0 + 1.0, hello)
    store.info(99, T0 + 1.0, {"workers": {"loader": 0, "pids": [7]}})
    store.sample(T0 + 20.5, {"proc.1.rss_mb": 5.0, "proc.1.cpu_pct": 1.0})  # this machine's pid 1: not the run
    dumped: list[int] = []
    monitor = fake_monitor(store, dump_stacks=dumped.append)
    app = make_app(LiveFeed(monitor, dumper=lambda pid: dumped.append(pid) or []))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            monitor.listeners[0](SimpleNamespace(t=T0 + 20.5, verdict=None, findings=[]))
        await settle(pilot, app)
        table = app.query_one(ProcTable)
        cells = {key: table._cells[key] for key in ("ns99-1", "ns99-7")}
        assert cells["ns99-1"][:2] == ("ns:1", "main") and cells["ns99-7"][:2] == ("ns:7", "worker")
        assert all(c[-1].startswith(NS_NOTE) and c[2:7] == ("-", "-/-/-", "-", "-", "-") for c in cells.values())
        assert table._cells["1"][1] == "proc"  # pid 1 here keeps its own row, not the run's role
        for key in cells:
            table.move_cursor(row=table.get_row_index(key))
            assert table.selected_pid() is None
            await pilot.press("d")
            await pilot.pause()
            await app.workers.wait_for_complete()
        assert dumped == []
        messages = [n.message for n in app._notifications]
        assert messages and all("pid namespace trainmon cannot see" in m for m in messages), messages
