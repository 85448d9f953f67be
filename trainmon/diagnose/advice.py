"""Advice in the words of the framework that drives the loop.

The rules write their advice as items (``findings.AdviceItem``): the knobs they set, and a sentence for a plain
PyTorch loop: ``DataLoader(num_workers=4)``, ``persistent_workers=True``, ``pin_memory=True``, ``prefetch_factor``, a
copy ``.to(device, non_blocking=True)``. A ``transformers.Trainer`` user sets none of these on a DataLoader: the
Trainer builds it from ``TrainingArguments(dataloader_num_workers=...)``. A Lightning user sets them on the
DataLoader their ``train_dataloader()`` returns; an accelerate user on the DataLoader they pass to
``accelerator.prepare``. ``localise`` renders each item that sets one of those knobs in the run's framework's own
terms, from the table ``KNOBS`` keyed by knob (the item says which knobs it sets: no phrase is matched to find
them); plain PyTorch keeps the rules' text. Every rendering is idempotent, so a finding that quotes another's advice
(``dist.straggler``) can be localised again. ``fit_to_window`` (the one fitting step every run's findings go
through) drops the items that advise what the run's loader already has, or what its framework does itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from trainmon.diagnose.findings import HIGHER, AdviceItem, Finding
from trainmon.diagnose.live.window import RunWindow

LOADER_KNOBS = ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor")
# A DataLoader setting named on its own (not already prefixed, not an attribute, not part of a longer name).
_KNOB = re.compile(r"(?<![\w.])(" + "|".join(LOADER_KNOBS) + r")\b")
_COPY = re.compile(r"\s*(?:and )?copy with \.to\(device, non_blocking=True\)")


@dataclass(frozen=True)
class Knobs:
    """Where a framework's user sets the DataLoader settings, and what they are called there."""

    prefix: str  # what the framework puts before a DataLoader setting's name
    constructor: str  # what takes them
    placed: str  # a line of advice holding this says where already
    where: str  # else this is appended to a line that names a setting
    copy: str  # in place of "copy with .to(device, non_blocking=True)"


KNOBS: dict[str, Knobs] = {
    "transformers": Knobs(
        "dataloader_",
        "TrainingArguments",
        "TrainingArguments",
        " (in TrainingArguments)",
        ' and accelerator_config={"non_blocking": True} in TrainingArguments (the Trainer copies each batch itself)',
    ),
    "lightning": Knobs(
        "",
        "DataLoader",
        "_dataloader()",
        " (on the DataLoader that train_dataloader() returns, in the LightningModule or DataModule)",
        " (Lightning copies each batch to the GPU with non_blocking=True itself)",
    ),
    "accelerate": Knobs(
        "",
        "DataLoader",
        "accelerator.prepare",
        " (on the DataLoader passed to accelerator.prepare())",
        " and Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))",
    ),
}
_LIGHTNING_BOTH = " (on the DataLoaders that train_dataloader() and val_dataloader() return)"
# Advice a framework adds to a finding: the fix in that framework's own terms that the rules cannot name.
EXTRA: dict[tuple[str, str], str] = {
    ("transformers", "input.main_process"): (
        "or tokenize once before training (datasets.Dataset.map(tokenize, batched=True, num_proc=N)) rather "
        "than in __getitem__: the Trainer's loader then only pads and stacks"
    ),
    ("transformers", "input.workers_cpu"): (
        "tokenize once before training (datasets.Dataset.map(tokenize, batched=True, num_proc=N)) rather than "
        "in __getitem__ on every epoch"
    ),
}


def knob_text(framework: str, knob: str, value: str) -> str:
    """How ``framework``'s user sets DataLoader setting ``knob`` to ``value`` (docs/diagnosis.md's table)."""
    if knob not in LOADER_KNOBS:
        return KNOBS[framework].copy.strip()
    return render(AdviceItem(f"DataLoader({knob}={value})", {knob: value}), framework).text


def localise(finding: Finding, framework: str | None, version: str | None = None) -> Finding:
    """``finding`` with its advice (and summary) in ``framework``'s knobs, and the framework in its evidence
    (``framework``, ``framework_version``); unchanged for plain PyTorch."""
    if framework not in KNOBS:
        return finding
    items = [render(item, framework) for item in finding.advice_items]
    extra = EXTRA.get((framework, finding.code))
    if extra and extra not in [item.text for item in items]:
        items.append(AdviceItem(extra))
    evidence = finding.evidence
    if evidence.get("framework") != framework:
        evidence = {**evidence, "framework": framework}
        if version:
            evidence["framework_version"] = version
    out = replace(finding, summary=_rename(finding.summary, KNOBS[framework]), evidence=evidence)
    out.set_advice(items)
    return out


def render(item: AdviceItem, framework: str) -> AdviceItem:
    """``item`` in ``framework``'s knobs: the loader settings it sets renamed (and where they are set added), the
    host→device copy in the framework's words."""
    k = KNOBS[framework]
    knobs = [knob for knob in item.knobs if knob in LOADER_KNOBS]
    text = item.text
    if "non_blocking" in item.settings:
        text = _COPY.sub(k.copy, text)
    if not knobs:
        return replace(item, text=text)
    text = text.replace("DataLoader(", k.constructor + "(")
    if k.prefix:
        text = re.sub(r"(?<![\w.])(" + "|".join(knobs) + r")\b", k.prefix + r"\1", text)
    placed, where = k.placed, k.where
    if framework == "lightning" and "validation" in text:
        placed, where = "val_dataloader()", _LIGHTNING_BOTH
    if placed not in text:
        text += where
    return replace(item, text=text)


# What a framework does itself, as if set: Lightning copies every batch to the device with non_blocking=True.
IMPLIED: dict[str, dict[str, Any]] = {"lightning": {"non_blocking": True}}


def fit_to_window(finding: Finding, w: RunWindow) -> Finding:
    """``finding`` fitted to the run its window judged (see ``fit_to_loader``): the window's loader, what the
    run's framework does itself, and the other loaders an item may be about (``AdviceItem.loaders``)."""
    implied = IMPLIED.get(str((w.run.framework or {}).get("name")), {})
    configs = {lid: dict(info.config) for lid, info in w.run.loaders.items()}
    return fit_to_loader(finding, {**implied, **w.loader}, configs)


def fit_to_loader(
    finding: Finding, config: dict[str, Any], configs: dict[int, dict[str, Any]] | None = None
) -> Finding:
    """``finding`` without the advice that recommends what the loader (``config``; an item about other loaders:
    theirs, from ``configs``) already has: an item whose every setting is in place is left out, one with some in
    place advises only the rest, a "higher" num_workers at or past the finding's ``num_workers_cap`` is left out.
    What was left out, and why, goes to its evidence (``advice_dropped``). When nothing is left to advise, one item
    says so and what was measured: a finding always has advice."""
    keep: list[AdviceItem] = []
    dropped: list[dict[str, str]] = []
    cap = finding.evidence.get("num_workers_cap")
    others = configs or {}
    for item in finding.advice_items:
        scoped = [others[lid] for lid in item.loaders if lid in others] if item.loaders else [config]
        why = _in_place(item, scoped, cap if isinstance(cap, int) else None)
        if why is None:
            keep.append(_narrowed(item, scoped))
        else:
            dropped.append({"text": item.text, "why": why})
    if not dropped:
        if keep == finding.advice_items:
            return finding
        out = replace(finding)
        out.set_advice(keep)
        return out
    if not keep:
        keep = [nothing_to_set(finding, dropped)]
    out = replace(finding, evidence={**finding.evidence, "advice_dropped": dropped})
    out.set_advice(keep)
    return out


def _in_place(item: AdviceItem, configs: list[dict[str, Any]], cap: int | None) -> str | None:
    """Why ``item`` advises nothing new for every one of ``configs``, else None."""
    if not configs:
        return None
    have = configs[0].get("num_workers")
    if item.settings == {"num_workers": HIGHER} and cap is not None and isinstance(have, int) and have >= cap:
        return f"num_workers={have} is at its bound already ({cap})"
    whys = [item.holds_in(config) for config in configs]
    return whys[0] if all(why is not None for why in whys) else None


def _narrowed(item: AdviceItem, configs: list[dict[str, Any]]) -> AdviceItem:
    """``item`` setting only what is not in place in ``configs`` (what a framework does itself drops out of its
    settings; its sentence is rendered in the framework's words by ``localise``)."""
    settings = {
        knob: value
        for knob, value in item.settings.items()
        if any(AdviceItem("", {knob: value}, at_least=item.at_least).holds_in(c) is None for c in configs)
    }
    return item if len(settings) == len(item.settings) or not settings else replace(item, settings=settings)


def nothing_to_set(finding: Finding, dropped: list[dict[str, str]]) -> AdviceItem:
    """The advice of a finding whose every item is in place already: what is set, and what was measured."""
    ev = finding.evidence
    figures = []
    if isinstance(wait := ev.get("data_wait_fraction"), float):
        figures.append(f"data wait {wait:.0%} of the step")
    if isinstance(cpu := ev.get("workers_cpu_pct_mean"), float):
        figures.append(f"{ev.get('num_workers') or 'the'} worker(s) at {cpu:.0f}% of a core")
    if isinstance(p50 := ev.get("step_time_ms_p50"), float):
        figures.append(f"step p50 {p50:.0f} ms")
    measured = ", ".join(figures) if figures else finding.summary
    settings = "; ".join(sorted({d["why"] for d in dropped}))
    return AdviceItem(f"no setting left to change ({settings}); measured: {measured}")


def _rename(text: str, k: Knobs) -> str:
    return _KNOB.sub(k.prefix + r"\1", text) if k.prefix else text


def common_framework(runs: Iterable[Any]) -> str | None:
    """The framework every one of ``runs`` (objects with ``framework``) reported, else None."""
    names = {(run.framework or {}).get("name") for run in runs}
    return names.pop() if len(names) == 1 else None


def localise_runs(findings: list[Finding], owners: Sequence[tuple[int, Any]]) -> None:
    """Localise ``findings`` in place, each by the framework of the run that owns it: ``owners`` lists, in order,
    (index of the run's first finding, the run)."""
    for k, (start, run) in enumerate(owners):
        end = owners[k + 1][0] if k + 1 < len(owners) else len(findings)
        framework = run.framework or {}
        for i in range(start, end):
            findings[i] = localise(findings[i], framework.get("name"), framework.get("version"))
