"""Every rule's advice goes through one fitting step: no item recommends a value the run already has (its loader's
settings, or what its framework does itself), items about another loader are fitted to that loader, and a finding
whose every item is in place says what was measured instead of advising nothing."""

from __future__ import annotations

import importlib
import pkgutil
from array import array
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import trainmon.diagnose.rules as rules_pkg
from testsupport.stores import uniform_store, worker_figs
from trainmon import protocol as P
from trainmon.diagnose import Thresholds, evaluate
from trainmon.diagnose.advice import fit_to_loader, fit_to_window
from trainmon.diagnose.findings import HIGHER, LOWER, AdviceItem, Finding
from trainmon.diagnose.live.window import run_window
from trainmon.report import build_report
from trainmon.store.store import Store

LOADER_KNOBS = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")
# A loader with every setting a rule could advise already in place (num_workers aside: each store has its own).
EVERY_SETTING = {"batch_size": 32, "persistent_workers": True, "pin_memory": True, "prefetch_factor": 4}
NS = 1_000_000_000


def _with_every_setting(store: Store) -> Store:
    """Every loader of every run of ``store`` re-reported with every setting in place (as the agent would)."""
    for run_id, run in store.runs.items():
        for lid, info in list(run.loaders.items()):
            workers = info.config.get("num_workers", 2)
            cfg = {**EVERY_SETTING, "num_workers": workers}
            if not workers:  # num_workers=0 loaders cannot persist or prefetch
                cfg |= {"persistent_workers": False, "prefetch_factor": None}
            store.info(run_id, 0.0, {"loader": {"id": lid, **cfg}})
    return store


def _figs(cpu: float, **extra: float) -> dict:
    return {pid: {**figs, **extra} for pid, figs in worker_figs(cpu).items()}


STORES: dict[str, Callable[[], Store]] = {
    "cpu-bound, idle cores": lambda: uniform_store(wait_ms=25, procs=worker_figs(98), host={"cpu.busy": 35}),
    "cpu-bound, saturated": lambda: uniform_store(wait_ms=25, procs=worker_figs(60, runq=450), host={"cpu.busy": 97}),
    "latency": lambda: uniform_store(wait_ms=25, procs=worker_figs(5)),
    "latency at the bound": lambda: uniform_store(wait_ms=25, procs=worker_figs(5), host={"cpu.cores": 0.5}),
    "disk": lambda: uniform_store(
        wait_ms=25, procs=worker_figs(15, d=0.6, read=40), host={"disk.vda.util_pct": 96, "disk.vda.r_await_ms": 4.0}
    ),
    "remote reads": lambda: uniform_store(wait_ms=25, procs=worker_figs(5, rchar=8.0)),
    "network waits": lambda: uniform_store(wait_ms=25, procs=_figs(9, net_wait=0.8, net_sockets=2)),
    "workers ahead": lambda: uniform_store(
        wait_ms=4, procs={**_figs(5), 10: {"state_main_R": 1.0, "cpu_pct": 99}}, host={"cpu.busy": 60}
    ),
    "main process": lambda: uniform_store(wait_ms=25, workers=0, procs={10: {"cpu_pct": 99}}),
    "host memory": lambda: uniform_store(wait_ms=1, host={"mem.used_pct": 98, "swap.used_mb": 0}),
    "periodic": lambda: uniform_store(wait_ms=1, long_every=10, long_ms=400),
    "checkpoint": lambda: uniform_store(wait_ms=1, checkpoints=[(k + 0.2, k + 0.5) for k in range(10)]),
    "compute-bound": lambda: uniform_store(wait_ms=0.5),
}


def _findings(store: Store) -> Iterator[Finding]:
    """What the live engine and the report (every phase's verdict and finding) give."""
    yield from evaluate(store, 10.0)
    report = build_report(store)
    for held in [report["verdict"], *report["findings"]]:
        yield Finding(
            held["code"],
            held["severity"],
            held["summary"],
            evidence=held["evidence"],
            advice_items=[AdviceItem(i["text"], i["settings"]) for i in held["advice_items"]],
        )


@pytest.mark.parametrize("name", sorted(STORES))
def test_no_rule_advises_a_setting_the_loader_already_has(name: str) -> None:
    store = _with_every_setting(STORES[name]())
    configs = [dict(info.config) for run in store.runs.values() for info in run.loaders.values()]
    seen = 0
    for f in _findings(store):
        assert f.advice, f"{f.code} advises nothing: {f.summary}"
        for item in f.advice_items:
            for knob, value in item.settings.items():
                if knob not in LOADER_KNOBS or value in (HIGHER, LOWER):
                    continue
                seen += 1
                for config in configs:
                    assert config.get(knob) != value, f"{f.code} advises {knob}={value!r}, already set: {item.text}"
    assert seen or name not in ("cpu-bound, idle cores", "latency")  # those advise num_workers at least


def _rule_items() -> Iterator[tuple[str, AdviceItem]]:
    """Every advice item a rule module holds as a constant (alone or in a tuple)."""
    for mod in pkgutil.iter_modules(rules_pkg.__path__):
        module = importlib.import_module(f"{rules_pkg.__name__}.{mod.name}")
        for name, value in vars(module).items():
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, AdviceItem):
                    yield f"{mod.name}.{name}", item


def test_every_constant_item_sets_at_most_one_loader_setting_to_a_value() -> None:
    """So that one in place is dropped alone, never kept for the sake of another in the same sentence."""
    items = list(_rule_items())
    assert len(items) >= 10
    for where, item in items:
        fixed = [k for k, v in item.settings.items() if k in LOADER_KNOBS and v not in (HIGHER, LOWER)]
        assert len(fixed) <= 1, (where, item.settings)


def test_nothing_left_to_advise_says_what_was_measured() -> None:
    f = Finding(
        "input.too_few_workers",
        "warning",
        "x",
        evidence={"data_wait_fraction": 0.31, "workers_cpu_pct_mean": 97.0, "num_workers": 2},
        advice_items=[AdviceItem("set persistent_workers=True", {"persistent_workers": True})],
    )
    out = fit_to_loader(f, {"persistent_workers": True})
    (only,) = out.advice
    assert only.startswith("no setting left to change (already set: persistent_workers=True)")
    assert "data wait 31% of the step" in only and "2 worker(s) at 97% of a core" in only
    assert out.evidence["advice_dropped"][0]["why"] == "already set: persistent_workers=True"


def test_more_workers_past_the_bound_is_not_advised() -> None:
    f = Finding(
        "input.io",
        "warning",
        "x",
        evidence={"num_workers_cap": 8},
        advice_items=[AdviceItem("raise num_workers", {"num_workers": HIGHER}), AdviceItem("stage the data")],
    )
    assert fit_to_loader(f, {"num_workers": 8}).advice == ["stage the data"]
    assert fit_to_loader(f, {"num_workers": 4}).advice == ["raise num_workers", "stage the data"]


def test_what_lightning_does_itself_is_not_advised() -> None:
    """Lightning copies each batch with non_blocking=True: of "pin_memory and non_blocking" only pin_memory is
    left to set."""
    store = uniform_store(wait_ms=1)
    store.info(1, 0.0, {"framework": {"name": "lightning", "version": "2.5"}})
    run = store.runs[1]
    w = run_window(run, 0.0, 10.0)
    item = AdviceItem("set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True)", _h2d())
    fitted = fit_to_window(Finding("input.host_to_device", "warning", "x", advice_items=[item]), w)
    assert fitted.advice_items[0].settings == {"pin_memory": True}


def _h2d() -> dict[str, Any]:
    return {"pin_memory": True, "non_blocking": True}


def test_epoch_restart_advice_is_fitted_to_the_loader_that_restarts() -> None:
    """A persistent train loader beside a validation loader whose workers start again at every validation run:
    persistent_workers=True is advised for the validation loader, not dropped because the train loader has it."""
    store = Store(cap=None, series_keep_s=None)
    store.hello(1, 0.0, {"pid": 10})
    for lid, persistent in ((1, True), (2, False)):
        cfg = {"id": lid, "batch_size": 32, "num_workers": 2, "persistent_workers": persistent, "prefetch_factor": 2}
        store.info(1, 0.0, {"loader": cfg})
    recs: list[int] = [P.K_ITER_START | 1 << 8, 0, int(0.01 * NS), 2]
    t = 0.01
    for k in range(200):
        recs += [P.K_WAIT | 1 << 8, int(t * NS), int((t + 0.002) * NS), 0]
        t += 0.05
        recs += [P.K_OPT, int(t * NS), int(t * NS), 0]
        if k % 20 == 19:  # a validation run: a new iterator whose workers start, then five batches
            recs += [P.K_ITER_START | 2 << 8, int(t * NS), int((t + 0.01) * NS), 2]
            t += 0.01
            for b in range(5):
                wait = 0.4 if b == 0 else 0.002
                recs += [P.K_WAIT | 2 << 8, int(t * NS), int((t + wait) * NS), 0]
                t += wait + 0.01
            recs += [P.K_ITER_END | 2 << 8, int(t * NS), int((t + 0.02) * NS), 0]
            t += 0.02
    store.events(1, t, array("q", recs))
    (f,) = [f for f in evaluate(store, t, Thresholds(window_s=t)) if f.code == "input.epoch_restart"]
    assert any("persistent_workers=True" in a and "validation" in a for a in f.advice), f.advice
    assert "advice_dropped" not in f.evidence
