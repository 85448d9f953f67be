"""`trainmon serve` in a real headless Chromium, used as a person uses it: open the page, start the screen, press keys,
resize the window, open a second tab, close tabs; live (a real training reporting to it) and --replay.

One browser and two servers serve the whole module. The `held` tabs (one live, one replay) open first and stay open
while the other tests run on tabs of their own; the last test checks them a minute after they started.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import psutil
import pytest

from testsupport.browser import CHROMIUM, BrowserThread, Served, Tab, start_serve
from testsupport.paths import RECORDINGS
from testsupport.procs import force_stop, start_python, wait_for

pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")

HOLD_S = 60.0
CLOSE_WITHIN_S = 5.0
REPLAY_CAP = 3
SCREEN_SHOWN = "document.body.classList.contains('-first-byte')"
SESSION_ENDED = "document.body.classList.contains('-closed')"


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserThread]:
    with BrowserThread(1600, 1000) as bt:
        yield bt


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> Iterator[Served]:
    recording = RECORDINGS / "healthy.tmrec"
    log = str(tmp_path_factory.mktemp("serve") / "replay.log")
    served = start_serve("serve", "--replay", str(recording), "--max-screens", str(REPLAY_CAP), log_path=log)
    yield served
    served.stop()


@dataclass
class Live:
    served: Served
    training: subprocess.Popen


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[Live]:
    """`trainmon serve` of the live monitor, and a real CPU training (a slow loader) reporting to its address."""
    tmp = tmp_path_factory.mktemp("live")
    address = str(tmp / "agents.sock")
    training = start_python(
        "-m",
        "trainmon.demo.train",
        *("--seconds", "240", "--sleep-ms", "2", "--batch-size", "8", "--width", "64", "--features", "32"),
        env={"TRAINMON_ADDR": address},
    )
    served = start_serve("--listen", address, "serve", log_path=str(tmp / "live.log"))
    yield Live(served, training)
    served.stop()
    force_stop(training)


@dataclass
class Held:
    live: Tab
    replay: Tab
    live_pid: int
    replay_pid: int
    started: float


@pytest.fixture(scope="module")
def held(browser: BrowserThread, live: Live, replay: Served) -> Held:
    """A live tab opened at the plain address (the screen starts at once) and a replay tab started with its
    Start button, both showing their screen."""
    live_tab = browser.run(browser.browser.new_tab(live.served.url))
    replay_tab = browser.run(browser.browser.new_tab(replay.url + "?delay=1"))
    assert browser.run(replay_tab.wait_js("getComputedStyle(document.getElementById('start')).display !== 'none'"))
    browser.run(replay_tab.click("#start"))
    for tab in (live_tab, replay_tab):
        assert browser.run(tab.wait_js(SCREEN_SHOWN)), browser.run(tab.evaluate("document.body.innerText"))
    assert browser.run(live_tab.wait_text("Training", "LIVE", "demo", timeout=30)), live_tab.text()
    assert browser.run(replay_tab.wait_text("Training", "REPLAY", "demo:healthy")), replay_tab.text()
    (live_pid,) = live.served.screens()
    (replay_pid,) = replay.screens()
    return Held(live_tab, replay_tab, live_pid, replay_pid, time.monotonic())


def _open(browser: BrowserThread, served: Served) -> tuple[Tab, int]:
    """A new tab on ``served`` showing its screen, and the pid of the screen process it started."""
    before = set(served.screens())
    tab = browser.run(browser.browser.new_tab(served.url))
    assert browser.run(tab.wait_js(SCREEN_SHOWN)), browser.run(tab.evaluate("document.body.innerText"))
    assert wait_for(lambda: set(served.screens()) - before, 10)
    (pid,) = set(served.screens()) - before
    return tab, pid


def _axis(tab: Tab) -> str:
    """The time axis line: the one with the LIVE / PAUSED / REPLAY status."""
    lines = [line for line in tab.text().splitlines() if re.match(r"(LIVE|PAUSED|REPLAY|END)\b", line)]
    return lines[-1] if lines else ""


def _close_modal(browser: BrowserThread, tab: Tab, shown: str) -> None:
    """Escape, then wait until ``shown`` is gone, as a person would before the next key: an ESC followed at once by
    a key reads as Alt+key, in a browser as in a terminal."""
    browser.run(tab.press("escape"))
    assert browser.run(tab.wait(lambda: shown not in tab.text())), tab.text()


def _press_and_see(browser: BrowserThread, tab: Tab, keys: str | list[str], *needles: str, timeout=15.0) -> None:
    since = time.monotonic()
    browser.run(tab.press(*([keys] if isinstance(keys, str) else keys)))
    assert browser.run(tab.wait_text(*needles, since=since, timeout=timeout)), (keys, needles, tab.text())


# ---------------------------------------------------------------- keys


def test_keys_on_the_live_screen(browser, held, live):
    tab = held.live
    assert browser.run(tab.wait(lambda: re.search(r"\b1m\b", _axis(tab)), 10)), tab.text()
    since = time.monotonic()
    browser.run(tab.press("w"))
    assert browser.run(tab.wait(lambda: tab.terminal_bytes(since) and re.search(r"\b5m\b", _axis(tab)))), tab.text()
    browser.run(tab.press("w", "w"))  # 15 min, back to 1
    assert browser.run(tab.wait(lambda: re.search(r"\b1m\b", _axis(tab)))), tab.text()

    _press_and_see(browser, tab, "left", "▲")  # the time cursor, on every pane
    browser.run(tab.press("right"))
    _close_modal(browser, tab, "▲")  # esc drops the cursor
    assert _axis(tab).startswith("LIVE"), tab.text()

    _press_and_see(browser, tab, "e", ") at ")  # "<code>  (<severity>) at <instant>": the evidence behind it
    assert re.search(r"\((ok|warning|critical|none)\) at ", tab.text()) or "no verdict yet" in tab.text()
    _close_modal(browser, tab, ") at ")

    # The process table's selected row is the training: its stack, dumped by py-spy.
    _press_and_see(browser, tab, "d", f"py-spy dump of pid {live.training.pid}")
    assert browser.run(tab.wait_text("<module>", timeout=20)), tab.text()
    _close_modal(browser, tab, "py-spy dump of pid")

    _press_and_see(browser, tab, "?", "trainmon keys", "stack dump of the selected process")
    _close_modal(browser, tab, "trainmon keys")

    _press_and_see(browser, tab, "p", "PAUSED")
    browser.run(tab.press("p"))
    assert browser.run(tab.wait(lambda: _axis(tab).startswith("LIVE"))), tab.text()


def test_keys_on_the_replay_screen(browser, held):
    tab = held.replay
    _press_and_see(browser, tab, "+", "2×")
    assert browser.run(tab.wait(lambda: "2×" in _axis(tab))), tab.text()
    browser.run(tab.press("-"))
    assert browser.run(tab.wait(lambda: "1×" in _axis(tab))), tab.text()
    _press_and_see(browser, tab, "p", "PAUSED")
    frozen = _axis(tab)
    time.sleep(2.5)
    assert _axis(tab) == frozen, "a paused replay moved on"
    browser.run(tab.press("p"))
    assert browser.run(tab.wait(lambda: _axis(tab).startswith("REPLAY") and _axis(tab) != frozen)), tab.text()
    _press_and_see(browser, tab, "left", "▲")
    _close_modal(browser, tab, "▲")


# ---------------------------------------------------------------- tabs


def test_two_tabs_are_two_independent_screens(browser, held, replay):
    (a, pid_a), (b, pid_b) = _open(browser, replay), _open(browser, replay)
    try:
        assert pid_a != pid_b and {pid_a, pid_b}.isdisjoint({held.replay_pid})
        _press_and_see(browser, a, "p", "PAUSED")
        time.sleep(2.5)  # b plays on: its clock moves, it never shows PAUSED
        b_axis = _axis(b)
        assert b_axis.startswith("REPLAY"), b.text()
        assert browser.run(b.wait(lambda: _axis(b) != b_axis and _axis(b).startswith("REPLAY"), 5)), b.text()
        assert _axis(a).startswith("PAUSED")
        _press_and_see(browser, b, "?", "trainmon keys")
        assert "trainmon keys" not in a.text()
    finally:
        for tab in (a, b):
            browser.run(tab.close())
    assert wait_for(lambda: not {pid_a, pid_b} & set(replay.screens()), CLOSE_WITHIN_S + 2)


def test_closing_a_tab_ends_its_screen_within_5_s(browser, held, replay):
    tab, pid = _open(browser, replay)
    process = psutil.Process(pid)
    closed_at = time.monotonic()
    browser.run(tab.close())
    try:
        process.wait(CLOSE_WITHIN_S)
    except psutil.TimeoutExpired:
        pytest.fail(f"screen {pid} still runs {CLOSE_WITHIN_S} s after its tab closed")
    took = time.monotonic() - closed_at
    assert pid not in replay.screens()
    # The server logs a screen's end when it reaps it, a moment after the process is gone.
    assert wait_for(lambda: f"screen {pid} ended" in replay.log(), 5), replay.log()[-2000:]
    print(f"screen ended {took:.2f} s after its tab closed")


def test_quit_ends_the_screen_and_restart_starts_a_new_one(browser, held, replay):
    tab, pid = _open(browser, replay)
    try:
        browser.run(tab.press("q"))
        assert browser.run(tab.wait_js(SESSION_ENDED, 10)), browser.run(tab.evaluate("document.body.innerText"))
        assert "The screen ended." in browser.run(tab.evaluate("document.getElementById('ended').textContent"))
        assert wait_for(lambda: not psutil.pid_exists(pid) or pid not in replay.screens(), CLOSE_WITHIN_S)
        before = set(replay.screens())
        browser.run(tab.click("#restart"))
        assert browser.run(tab.wait_js(SCREEN_SHOWN, 20)) and not browser.run(tab.evaluate(SESSION_ENDED))
        assert browser.run(tab.wait_text("── Training", "REPLAY")), tab.text()
        assert wait_for(lambda: set(replay.screens()) - before - {pid}, 10)
    finally:
        browser.run(tab.close())


def test_resizing_the_window_lays_the_screen_out_again(browser, held, replay):
    tab, _ = _open(browser, replay)
    try:
        assert browser.run(tab.wait_text("── Training", "── GPU", "── CPU", "── Disk")), tab.text()
        (_, wide_cols, wide_rows) = tab.resizes()[-1]
        browser.run(tab.resize(760, 520))  # about 80×24 cells: the compact layout, no pane titles
        assert browser.run(tab.wait(lambda: tab.resizes()[-1][1] < 100)), tab.resizes()
        (_, cols, rows) = tab.resizes()[-1]
        assert cols < wide_cols and rows < wide_rows
        assert browser.run(tab.wait(lambda: "── Training" not in tab.text() and _axis(tab).startswith("REPLAY"))), (
            tab.text()
        )
        screen = tab.screen()
        assert (screen.width, screen.height) == (cols, rows)
        browser.run(tab.resize(1600, 1000))
        assert browser.run(tab.wait_text("── Training", "── GPU")), tab.text()
    finally:
        browser.run(tab.close())


def test_past_the_cap_a_tab_gets_a_message_and_no_screen(browser, held, replay, live):
    opened: list[Tab] = []
    try:
        assert wait_for(lambda: len(replay.screens()) == 1, CLOSE_WITHIN_S + 2)  # the held tab
        opened += [_open(browser, replay)[0] for _ in range(REPLAY_CAP - 1)]
        before = set(replay.screens())
        extra = browser.run(browser.browser.new_tab(replay.url))
        opened.append(extra)
        assert browser.run(extra.wait_js(SESSION_ENDED, 15)), browser.run(extra.evaluate("document.body.innerText"))
        message = browser.run(extra.evaluate("document.getElementById('ended').textContent"))
        assert f"{REPLAY_CAP} screens are already open" in message and "--max-screens" in message, message
        assert set(replay.screens()) == before
        # The live screen is one tab at a time: its monitor holds the agent address.
        second_live = browser.run(browser.browser.new_tab(live.served.url))
        opened.append(second_live)
        assert browser.run(second_live.wait_js(SESSION_ENDED, 15))
        message = browser.run(second_live.evaluate("document.getElementById('ended').textContent"))
        assert "live screen is already open in another tab" in message, message
        assert live.served.screens() == [held.live_pid]
    finally:
        for tab in opened:
            browser.run(tab.close())


# ---------------------------------------------------------------- a minute later


def test_held_screens_still_show_a_minute_later(browser, held, live, replay, tmp_path):
    left = held.started + HOLD_S - time.monotonic()
    if left > 0:
        time.sleep(left)
    for tab, served, pid, status in (
        (held.live, live.served, held.live_pid, "LIVE"),
        (held.replay, replay, held.replay_pid, "REPLAY"),
    ):
        assert psutil.pid_exists(pid) and pid in served.screens(), served.log()[-2000:]
        assert not browser.run(tab.evaluate(SESSION_ENDED)), browser.run(tab.evaluate("document.body.innerText"))
        assert browser.run(tab.evaluate(SCREEN_SHOWN))
        # Read the screen now, then ask it for something new: it still answers.
        assert "── Training" in tab.text() and re.match(status, _axis(tab)), tab.text()
        _press_and_see(browser, tab, "?", "trainmon keys")
        _close_modal(browser, tab, "trainmon keys")
        log = served.log()
        assert "terminal lost" not in log and "server lost" not in log, log[-2000:]
        assert f"screen {pid} ended" not in log, log[-2000:]
    assert time.monotonic() - held.started >= HOLD_S
    # The live screen kept up with the training all along.
    assert browser.run(held.live.wait(lambda: held.live.terminal_bytes(time.monotonic() - 3), 5))
    shot = tmp_path / "serve.png"
    browser.run(held.live.screenshot(str(shot)))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_the_pages_asked_nothing_of_any_other_address(browser, held, live, replay):
    served = {urlsplit(s.url).netloc for s in (live.served, replay)}
    tabs = list(browser.browser.tabs.values())
    requests = [url for tab in tabs for url in tab.requests]
    assert any(url.startswith("ws://") for url in requests) and any("/static/js/textual.js" in u for u in requests)
    outside = [u for u in requests if urlsplit(u).scheme not in ("data", "about") and urlsplit(u).netloc not in served]
    assert not outside, outside


def test_closing_the_held_tabs_ends_their_screens_within_5_s(browser, held, live, replay):
    """The live screen stops its monitor on the way out: it too is gone within 5 s of its tab closing."""
    processes = {psutil.Process(held.live_pid): live.served, psutil.Process(held.replay_pid): replay}
    closed_at = time.monotonic()
    for tab in (held.live, held.replay):
        browser.run(tab.close())
    _, alive = psutil.wait_procs(list(processes), timeout=CLOSE_WITHIN_S - (time.monotonic() - closed_at))
    assert not alive, [p.pid for p in alive]
    print(f"held screens ended {time.monotonic() - closed_at:.2f} s after their tabs closed")
    for process, served in processes.items():
        # The server logs a screen's end when it reaps it, a moment after the process is gone.
        line = f"screen {process.pid} ended (exit status 0)"
        assert wait_for(lambda line=line, served=served: line in served.log(), 5), served.log()[-2000:]
        assert "did not exit" not in served.log()  # each left on "quit", never by SIGTERM or SIGKILL


def test_stopping_the_server_ends_every_screen(live, replay, browser):
    """Last: Ctrl-C (SIGINT to the server alone here) ends the screens of its open tabs, and the pages say so."""
    tabs = [_open(browser, served) for served in (live.served, replay)]
    screens = [psutil.Process(pid) for _, pid in tabs]
    for served in (live.served, replay):
        served.process.send_signal(signal.SIGINT)
    for served in (live.served, replay):
        served.process.wait(20)
    _, alive = psutil.wait_procs(screens, timeout=5)
    assert not alive, [p.pid for p in alive]
    for tab, _ in tabs:
        assert browser.run(tab.wait_js(SESSION_ENDED, 10))
