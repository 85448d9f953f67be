"""The monitor side of framework support: each run's advice in its framework's own settings (diagnose/advice.py,
applied by the engine to the real rules' findings), the framework and the late rank identity through the protocol
and the store, tokens/s in the report, the screen and Prometheus."""

from __future__ import annotations

import math
import re
from array import array
from types import SimpleNamespace

import pytest

from testsupport.stores import uniform_store, worker_figs
from trainmon import protocol as P
from trainmon.diagnose import evaluate
from trainmon.diagnose.advice import KNOBS, LOADER_KNOBS, knob_text, localise
from trainmon.diagnose.findings import AdviceItem, Finding
from trainmon.store.store import Store

BARE = re.compile(r"(?<![\w.])(" + "|".join(LOADER_KNOBS) + r")\b")
TOKENS = {"measured_batches": 10, "measured_samples": 80, "measured_token_batches": 10, "measured_tokens": 5120}

# Stores whose headline is each input finding with DataLoader settings in its advice (as tests/unit/test_rules.py).
CASES = {
    "input.main_process": lambda: uniform_store(wait_ms=30, workers=0),
    "input.too_few_workers": lambda: uniform_store(wait_ms=25, procs=worker_figs(98), host={"cpu.busy": 35}),
    "input.io": lambda: uniform_store(
        wait_ms=25, procs=worker_figs(15, d=0.6, read=40), host={"disk.vda.util_pct": 96, "disk.vda.r_await_ms": 4.0}
    ),
}


def _with_framework(store: Store, name: str | None, run_id: int = 1) -> Store:
    if name is not None:
        store.info(run_id, 0.0, P.clean_info({"framework": {"name": name, "version": "9.9"}}))
    return store


def _headline(code: str, framework: str | None) -> Finding:
    f = evaluate(_with_framework(CASES[code](), framework), 10.0)[0]
    assert f.code == code
    return f


@pytest.mark.parametrize("code", sorted(CASES))
def test_plain_pytorch_keeps_the_rules_text(code):
    plain = _headline(code, None)
    assert localise(plain, None) is plain
    assert any(BARE.search(line) for line in plain.advice)  # the rule names DataLoader settings: there is work here


@pytest.mark.parametrize("code", sorted(CASES))
def test_a_trainer_user_is_told_the_training_arguments(code):
    plain, f = _headline(code, None), _headline(code, "transformers")
    assert len(f.advice) >= len(plain.advice)
    for line in f.advice:
        assert not BARE.search(line) and "DataLoader(" not in line, line
        if "dataloader_" in line:
            assert "TrainingArguments" in line, line
    assert not BARE.search(f.summary)
    assert localise(f, "transformers") == f  # a finding quoting another's advice can be localised again


@pytest.mark.parametrize("framework", ["lightning", "accelerate"])
@pytest.mark.parametrize("code", sorted(CASES))
def test_lightning_and_accelerate_users_are_told_which_dataloader(code, framework):
    where = {"lightning": "train_dataloader()", "accelerate": "accelerator.prepare()"}[framework]
    f = _headline(code, framework)
    named = [line for line in f.advice if BARE.search(line)]
    assert named and all(where in line for line in named), f.advice
    assert localise(f, framework) == f


def test_main_process_numbers_survive_and_the_trainer_user_gets_the_tokenize_once_fix():
    plain, f = _headline("input.main_process", None), _headline("input.main_process", "transformers")
    n = plain.evidence["suggested_num_workers"]
    assert f"DataLoader(num_workers={n})" in plain.advice[0]
    assert f"TrainingArguments(dataloader_num_workers={n})" in f.advice[0]
    assert "dataloader_num_workers=0" in f.summary
    assert any("datasets.Dataset.map" in line for line in f.advice)
    assert f.evidence == {**plain.evidence, "framework": "transformers", "framework_version": "9.9"}
    store = uniform_store(wait_ms=25, procs=worker_figs(60, runq=450), host={"cpu.busy": 97})
    cpu = evaluate(_with_framework(store, "transformers"), 10.0)[0]
    assert cpu.code == "input.workers_cpu" and any("datasets.Dataset.map" in line for line in cpu.advice)


def test_pinned_memory_advice_per_framework():
    f = Finding(
        "input.host_to_device",
        "critical",
        "the GPU is 30% busy while 5000 MB/s cross PCIe from pageable memory (pin_memory=False)",
        advice_items=[
            AdviceItem(
                "set DataLoader(pin_memory=True) and copy with .to(device, non_blocking=True)",
                {"pin_memory": True, "non_blocking": True},
            ),
            AdviceItem("move less per step"),
        ],
    )
    hf = localise(f, "transformers").advice[0]
    assert "TrainingArguments(dataloader_pin_memory=True)" in hf and '"non_blocking": True' in hf
    assert ".to(device" not in hf
    assert "Lightning copies" in localise(f, "lightning").advice[0]
    assert "DataLoaderConfiguration(non_blocking=True)" in localise(f, "accelerate").advice[0]
    assert localise(f, "transformers").advice[1] == "move less per step"


def test_each_run_gets_its_own_frameworks_words():
    store = uniform_store(wait_ms=30, workers=0, pid=10, run_id=1)
    uniform_store(wait_ms=30, workers=0, pid=11, run_id=2, store=store)
    _with_framework(store, "transformers", 1)
    _with_framework(store, "lightning", 2)
    by_run = {f.evidence["run"]: f for f in evaluate(store, 10.0) if f.code == "input.main_process"}
    assert "TrainingArguments(dataloader_num_workers=" in by_run["pid 10"].advice[0]
    assert "train_dataloader()" in by_run["pid 11"].advice[0]


def test_the_readme_table_is_what_the_advice_says():
    from testsupport.paths import ROOT

    readme = (ROOT / "docs" / "diagnosis.md").read_text()
    for framework in KNOBS:
        for knob in LOADER_KNOBS:
            text = knob_text(framework, knob, "2" if knob in ("num_workers", "prefetch_factor") else "True")
            head = text.split(" (")[0]
            assert f"`{head}`" in readme, f"docs/diagnosis.md lacks {framework}'s {head}"


def test_the_protocol_keeps_known_frameworks_and_well_formed_identities():
    assert P.clean_info({"framework": {"name": "transformers", "version": "5.1"}}) == {
        "framework": {"name": "transformers", "version": "5.1"}
    }
    assert P.clean_info({"framework": {"name": "keras"}}) == {}
    assert P.clean_info({"framework": "lightning"}) == {}
    ident = {"rank": 1, "world_size": 2, "local_rank": 1, "job_id": "h:1/2", "job": {"MASTER_PORT": "1"}}
    assert P.clean_info({"dist": ident}) == {"dist": ident}
    assert P.clean_info({"dist": {**ident, "rank": -1}}) == {}
    assert P.clean_info({"dist": {**ident, "rank": True}}) == {}
    bad = P.clean_info({"dist": {**ident, "world_size": 0, "local_rank": "x", "job": [1]}})["dist"]
    assert bad["world_size"] is None and bad["local_rank"] is None and bad["job"] == {}
    loader = P.clean_info({"loader": {"id": 1, **TOKENS, "measured_tokens": -5}})["loader"]
    assert loader["measured_samples"] == 80 and loader["measured_tokens"] is None


def test_a_rank_told_late_joins_its_job():
    """Lightning's rank 0 attaches before it knows it is one; its child rank knows from its environment."""
    store = Store()
    store.hello(1, 0.0, P.clean_hello({"pid": 10, "job": {}}))
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "2"}
    store.hello(2, 0.0, P.clean_hello({"pid": 11, "local_rank": 1, "world_size": 2, "job": env}))
    r0, r1 = store.runs[1], store.runs[2]
    assert r0.job_key != r1.job_key and r0.rank is None
    for run_id, rank in ((1, 0), (2, 1)):
        ident = {"rank": rank, "world_size": 2, "local_rank": rank, "job_id": "127.0.0.1:29500/2", "job": env}
        store.info(run_id, 1.0, P.clean_info({"dist": ident}))
    assert r0.job_key == r1.job_key and (r0.rank, r1.rank) == (0, 1)
    assert r0.job_id == r1.job_id == "127.0.0.1:29500/2" and r0.label == "rank 0"


def _measured_store(steps: int = 200, wait_ms: float = 30.0, step_ms: float = 50.0) -> Store:
    """A run whose loader has no batch_size (a batch sampler makes its batches): the agent measured 8 samples and
    512 non-padding tokens a batch."""
    store = Store()
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, P.clean_info({"loader": {"id": 1, "batch_size": None, "num_workers": 0, **TOKENS}}))
    recs: list[int] = []
    for i in range(steps):
        t = int(i * step_ms * 1e6)
        recs += [P.K_WAIT | 1 << 8, t, t + int(wait_ms * 1e6), 0, P.K_OPT, t + int(step_ms * 1e6), 0, 0]
        recs[-3] = recs[-2] = t + int(step_ms * 1e6)
    store.events(1, steps * step_ms / 1e3, array("q", recs))
    return store


def test_tokens_per_second_in_the_report_screen_and_prometheus():
    from trainmon.export.prometheus import MonitorCollector
    from trainmon.monitor import Monitor
    from trainmon.report import build_report
    from trainmon.view.resample import run_values

    store = _with_framework(_measured_store(), "accelerate")
    (run,) = build_report(store)["runs"]
    assert run["dataloader"]["batch_size"] == 8 and run["batch_size_source"] == "batches"
    assert run["samples_per_s"] == pytest.approx(8 / 0.05, rel=0.01)  # a batch of 8 every 50 ms
    assert run["tokens_per_s"] == pytest.approx(run["samples_per_s"] * 64, rel=0.01)  # 512 tokens a batch
    assert run["framework"] == {"name": "accelerate", "version": "9.9"}

    v = run_values(store.runs[1], store.last_t)
    assert v.tokens_s == pytest.approx(v.samples_s * 64)

    monitor = Monitor(listen=False, sources=[])
    monitor.store = store
    statuses = monitor.run_statuses(store.last_t)
    collector = MonitorCollector(
        SimpleNamespace(store=store, last_snapshot=SimpleNamespace(runs=statuses, verdict=None, findings=[]))
    )
    (family,) = [f for f in collector.collect() if f.name == "trainmon_tokens_per_second"]
    (sample,) = family.samples
    assert sample.value == pytest.approx(statuses[0].samples_per_s * 64)

    plain = uniform_store(wait_ms=30, workers=0)
    (run,) = build_report(plain)["runs"]
    assert run["tokens_per_s"] is None and run["framework"] is None and run["dataloader"]["batch_size"] == 32
    assert run["batch_size_source"] == "loader"
    assert math.isnan(run_values(plain.runs[1], plain.last_t).tokens_s)


def _opt_steps(pattern: list[str]) -> int:
    """Steps a run makes of a record pattern: W a train batch, O an optimizer step, E the iterator's end."""
    store = Store()
    store.hello(1, 0.0, {"pid": 10})
    store.info(1, 0.0, {"loader": {"id": 1, "batch_size": 4, "num_workers": 0}})
    recs: list[int] = []
    kinds = {"W": P.K_WAIT | 1 << 8, "O": P.K_OPT, "E": P.K_ITER_END | 1 << 8}
    for i, c in enumerate(pattern):
        t = i * 5_000_000
        recs += [kinds[c], t, t + 1_000_000, 0]
    store.events(1, 1.0, array("q", recs))
    return store.runs[1].steps.total


def test_a_loader_that_fetches_one_batch_ahead_keeps_its_last_optimizer_step():
    """accelerate's DataLoaderShard reads batch k+1 before it hands out batch k: its last batch comes after the
    iterator ended, and that optimizer step is a step; a second optimizer of one iteration still is not."""
    ahead = ["W", "W", "O"] + ["W", "O"] * 38 + ["E", "O"]
    assert _opt_steps(ahead) == ahead.count("O") == 40
    gan = ["W", "O", "O"] * 30 + ["E"]
    assert _opt_steps(gan) == 30
    gan_ahead = ["W", "W", "O", "O"] + ["W", "O", "O"] * 28 + ["E", "O", "O"]
    assert _opt_steps(gan_ahead) == 30
