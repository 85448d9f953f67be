"""Each rule declares its stage and codes once, where it is defined; the engine's stages are built from that."""

from __future__ import annotations

import pytest

from trainmon.diagnose import rules
from trainmon.diagnose.findings import PRIORITY
from trainmon.diagnose.rules.dist import comm_bound, straggler
from trainmon.diagnose.rules.stage import DECLARED, Stage, rule, stage_rules
from trainmon.diagnose.verdicts import VERDICTS


def test_every_code_the_registry_declares_is_given_by_a_declared_rule():
    given = {code for d in DECLARED for code in d.gives}
    assert [v.code for v in VERDICTS if v.code not in given] == []


def test_each_rule_is_declared_once_and_runs_in_exactly_its_stage():
    fns = [d.fn for d in DECLARED]
    assert len(fns) == len(set(fns))
    stages = {
        Stage.ENDING: rules.ENDING,
        Stage.BEFORE_WARMUP: rules.BEFORE_WARMUP,
        Stage.WARMUP_GATE: rules.WARMUP_GATE,
        Stage.PER_RUN: rules.PER_RUN,
        Stage.PER_JOB: rules.PER_JOB,
        Stage.PER_HOST: rules.PER_HOST,
    }
    for d in DECLARED:
        if d.stage is Stage.SAMPLED:
            assert rules.SAMPLED is d.fn
        else:
            assert stages[d.stage].count(d.fn) == 1, d.fn.__name__
            assert all(d.fn not in other for s, other in stages.items() if s is not d.stage)
    assert sum(len(s) for s in stages.values()) + 1 == len(DECLARED)


def test_a_stage_runs_its_rules_in_the_order_of_their_codes_in_the_registry():
    for stage in Stage:
        order = [min(PRIORITY[c] for c in d.gives) for fn in stage_rules(stage) for d in DECLARED if d.fn is fn]
        assert order == sorted(order), stage
    # dist.comm reads what dist.straggler found, so it must come after it
    assert rules.PER_JOB.index(straggler) < rules.PER_JOB.index(comm_bound)
    assert rules.ENDING[0].__name__ == "hang"


def test_a_rule_that_gives_a_code_the_registry_lacks_fails_where_it_is_declared():
    before = len(DECLARED)
    with pytest.raises(ValueError, match=r"no\.such_code"):

        @rule(Stage.PER_RUN, "no.such_code")
        def invented(ctx):  # pragma: no cover - never declared
            return None

    assert len(DECLARED) == before
