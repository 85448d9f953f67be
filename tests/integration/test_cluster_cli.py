"""``trainmon cluster`` when there is nothing to show: Prometheus unreachable, a Prometheus that holds no trainmon
series, a URL that is not one; on the command line (one line, status 2) and on the screen (the banner says it)."""

from __future__ import annotations

import subprocess

import pytest

from testsupport.procs import child_env, free_port, trainmon_cmd, wait_for
from testsupport.prometheus_server import api, prometheus_binary, start_prometheus
from testsupport.tui import COLOR, aio, until
from trainmon.tui.cluster import ClusterApp, ClusterTable


def _cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(trainmon_cmd("cluster", *args), env=child_env(), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus", "http://127.0.0.1:{port}"], "cannot reach Prometheus at http://127.0.0.1:{port}: "),
        (["--prometheus", "127.0.0.1:{port}/graph"], "cannot reach Prometheus at http://127.0.0.1:{port}: "),
        (["--prometheus", "ftp://x"], "--prometheus needs a URL such as http://HOST:9090"),
        ([], "cluster needs --prometheus URL"),
    ],
)
def test_nothing_to_read_is_one_line_and_status_2(args, message):
    port = free_port()  # nothing listens there
    res = _cluster(*(a.format(port=port) for a in args), "--once")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and message.format(port=port) in res.stderr, res.stderr


def test_a_prometheus_without_trainmon_series(tmp_path):
    if prometheus_binary() is None:
        pytest.skip("prometheus is not installed (Debian package prometheus; .ci/run installs it)")
    prom, url = start_prometheus(tmp_path, [])
    try:
        assert wait_for(lambda: api(url, "query", query="up")["result"] == [], 10)
        res = _cluster("--prometheus", url, "--once")
    finally:
        prom.terminate()
        prom.wait(timeout=30)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (
        f"trainmon: error: Prometheus at {url} has no trainmon series: does it scrape monitors "
        "started with trainmon --prometheus HOST:PORT (or trainmon record --prometheus)?\n"
    )


@aio
async def test_the_screen_says_when_prometheus_is_unreachable():
    port = free_port()
    app = ClusterApp(f"http://127.0.0.1:{port}", interval=0.3, glyphs=COLOR)
    async with app.run_test(size=(100, 20)) as pilot:
        assert await until(pilot, lambda: app.updates >= 2, 10)
        banner = str(app.query_one("#banner").render())
        assert banner.startswith(" UNREACHABLE  cannot reach Prometheus at http://127.0.0.1:")
        assert app.query_one(ClusterTable).row_count == 0 and app.state is None
        await pilot.press("enter")  # no row: nothing to show, nothing breaks
        await pilot.press("q")
    assert app.return_code in (0, None)
