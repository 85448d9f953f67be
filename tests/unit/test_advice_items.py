"""Advice as data: each item names its knobs and values; the framework's words come from the knob, not the phrase;
an item that recommends what the loader already has is left out, with the reason kept in the evidence."""

from __future__ import annotations

from testsupport.stores import uniform_store, worker_figs
from trainmon.diagnose import evaluate
from trainmon.diagnose.advice import localise
from trainmon.diagnose.findings import HIGHER, AdviceItem, Finding
from trainmon.report import build_report

TIMM_LOADER = {"id": 1, "batch_size": 32, "num_workers": 2, "persistent_workers": True, "prefetch_factor": 2}


def too_few(loader: dict | None = None) -> Finding:
    store = uniform_store(wait_ms=25, procs=worker_figs(98), host={"cpu.busy": 35})
    if loader is not None:
        store.info(1, 0, {"loader": loader})
    f = evaluate(store, 10.0)[0]
    assert f.code == "input.too_few_workers"
    return f


def test_advice_already_in_place_is_dropped_and_the_reason_kept():
    kept = too_few({**TIMM_LOADER, "persistent_workers": False})
    assert any("set persistent_workers=True" in a for a in kept.advice)
    assert not any("prefetch_factor" in a for a in kept.advice)  # 2 already: only the knob not in place is advised
    timm = too_few(TIMM_LOADER)  # a timm-style loader: persistent workers, prefetch_factor=2 already
    assert not any("persistent_workers" in a or "prefetch_factor" in a for a in timm.advice), timm.advice
    persistent, prefetch = timm.evidence["advice_dropped"]
    assert (
        "persistent_workers=True" in persistent["text"] and persistent["why"] == "already set: persistent_workers=True"
    )
    assert "prefetch_factor≥2" in prefetch["text"] and prefetch["why"] == "already set: prefetch_factor=2"
    assert timm.advice == [item.text for item in timm.advice_items]
    assert timm.advice_items[0].settings["num_workers"] > 2  # raising num_workers is still advised


def test_a_larger_prefetch_factor_counts_as_in_place_for_an_at_least_item():
    f = too_few({**TIMM_LOADER, "prefetch_factor": 4})
    assert not any("prefetch_factor≥2" in a for a in f.advice)


def test_items_in_reports_name_knob_value_and_why():
    store = uniform_store(wait_ms=25, procs=worker_figs(98), host={"cpu.busy": 35})
    verdict = build_report(store)["verdict"]
    assert verdict["advice"] == [item["text"] for item in verdict["advice_items"]]
    first = verdict["advice_items"][0]
    assert first["kind"] == "setting" and first["knob"] == "num_workers" and first["value"] > 2 and first["why"]


def test_the_framework_wording_follows_the_knob_whatever_the_sentence():
    # A sentence worded nothing like the rules' usual ones still gets the framework's knob, because it says which.
    item = AdviceItem("bump the worker count to 6", {"num_workers": 6}, names=())
    odd = AdviceItem("give num_workers a larger value", {"num_workers": HIGHER})
    f = Finding("input.too_few_workers", "warning", "x", advice_items=[item, odd, AdviceItem("profile the dataset")])
    hf = localise(f, "transformers")
    assert hf.advice[0].endswith("(in TrainingArguments)")
    assert hf.advice[1] == "give dataloader_num_workers a larger value (in TrainingArguments)"
    assert hf.advice[2] == "profile the dataset"  # names no knob: nothing to translate
    assert localise(hf, "transformers").advice == hf.advice  # idempotent
    assert hf.advice_items[1].settings == {"num_workers": HIGHER}  # the data is unchanged


def test_item_kinds():
    env = AdviceItem("set X=1", {"env:PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert env.kind == "env" and AdviceItem("refactor").kind == "code"
    assert AdviceItem("x", {"pin_memory": True}).to_dict() == {
        "kind": "setting",
        "knob": "pin_memory",
        "value": True,
        "settings": {"pin_memory": True},
        "why": "",
        "text": "x",
    }
    assert AdviceItem("x", {"pin_memory": True}).holds_in({"pin_memory": True})
    assert AdviceItem("x", {"pin_memory": True}).holds_in({"pin_memory": 1}) is None  # not the same setting
    assert AdviceItem("x", {"num_workers": HIGHER}).holds_in({"num_workers": 8}) is None
