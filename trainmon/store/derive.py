"""Step derivation: the state machine that turns a run's records, one at a time, into the rows of its step table.

Step boundaries, in order of precedence:
1. explicit ``trainmon.agent.step()`` calls;
2. optimizer ``step()`` post-hooks (a step = all work between two optimizer steps; a second
   optimizer stepping with no new train batch in between belongs to the same step);
3. otherwise consecutive ``__next__`` calls of the train loader.
The train loader is the most iterated one; the others are eval/other phases.

``StepDeriver`` holds the step being built (its start, wait, batches, exposed idle, time in collectives), the mode,
the train loader, warm-up and the other loaders' pending waits, and one handler per kind of record. Its ``Run`` owns
it and hands it each batch; regular stretches of a batch are folded in whole columns by ``trainmon.store.folds``,
which reads and advances this same state.
"""

from __future__ import annotations

from array import array
from typing import Protocol

from trainmon.protocol import (
    COMM_OPS,
    K_CKPT,
    K_FEED,
    K_FEED_END,
    K_HANDOVER,
    K_ITER_END,
    K_ITER_START,
    K_MARK,
    K_OPT,
    K_OUTSIDE,
    K_PHASE,
    K_STEP,
    K_WAIT,
)
from trainmon.store.gcspans import GcSpans
from trainmon.store.loaders import LoaderInfo, bounded, loader_of
from trainmon.store.restarts import Restarts
from trainmon.store.steps import Steps

NS = 1e-9
WARMUP_STEPS = 5  # first steps of a run: compilation, cuDNN autotune, worker start
RESTART_WARMUP_STEPS = 2  # after an epoch restarts non-persistent workers
CKPT_MERGE_GAP_S = 0.005
_NAN = float("nan")
# Steps between the agent's bursts of timing the model (agent/_outside.py): the share outside the model of the latest
# measured steps (decayed per measured step), given to steps that end within OUTSIDE_GAP_S of the last measured one
# (the agent's pauses are at most 10 s), of at most OUTSIDE_LONG typical spans each.
OUTSIDE_DECAY = 1 / 32
OUTSIDE_GAP_S = 30.0
OUTSIDE_LONG = 4.0


class RunParts(Protocol):
    """What of its run the deriver reads and writes (``trainmon.store.run.Run`` is one)."""

    steps: Steps
    loaders: dict[int, LoaderInfo]
    gc: GcSpans
    restarts: Restarts
    names: dict[int, str]
    checkpoints: list[tuple[float, float]]
    marks: list[tuple[float, str]]
    phases: list[tuple[float, float, str]]
    iter_starts: list[tuple[float, int]]
    comm_by_op: dict[str, float]
    eval_wait_s: float


class StepDeriver:
    """The step state machine of one run. Writes the run's step table, loader totals, restarts, checkpoints, marks,
    phases, iterator starts, eval wait and time per collective; ``steps``, ``loaders``, ``gc`` and ``restarts`` are
    the run's own objects (kept here so the per-record handlers reach them in one lookup)."""

    def __init__(self, run: RunParts) -> None:
        self.run = run
        self.steps = run.steps
        self.loaders = run.loaders
        self.gc = run.gc
        self.restarts = run.restarts
        self.mode = "next"  # what marks steps: "explicit" (step()), "opt" (optimizer steps) or "next" (train batches)
        self.train: int | None = None  # the train loader's id
        self.cur_start: float | None = None  # the step being built: its start ...
        self.cur_wait = 0.0  # ... its data wait
        self.cur_batches = 0  # ... its train batches
        self.cur_exposed = _NAN  # ... its measured exposed idle (nan: none measured)
        self.cur_exposed_wait = 0.0  # ... the host time of its measured waits (-1: all of its wait)
        self.cur_comm = 0.0  # ... its time in collectives
        self.cur_outside = 0.0  # ... its time outside the model, where no loader fed it (agent/_outside.py)
        self.cur_outside_n = 0  # ... the outside records that told it
        self.outside_steps = 0  # steps whose data wait is their time outside the model
        self.outside_estimated = 0  # steps between the agent's bursts: their wait from the measured steps' share
        self.outside_share = [0.0, 0.0, 0.0]  # the measured steps' outside time, spans (decayed sums), last end
        self.cur_handover = 0.0  # ... the training thread's wait for a batch another thread made (agent/_handover.py)
        self.cur_handover_n = 0
        self.handover_steps = 0  # steps whose data wait is their hand-over wait
        # What measured the latest step whose wait was measured on the training thread ("handover", "outside", or
        # None): a loop whose first steps were timed before the hand-over wrappers went in is a hand-over loop after.
        self.last_measured: str | None = None
        self.fed: int | None = None  # the loader a prefetcher's thread iterates (feed records), where one does
        self.own_steps = 0  # steps whose own code was measured (the model timed, the data wait known)
        self.own_estimated = 0  # steps between the agent's bursts: their own code from the measured steps' share
        self.own_share = [0.0, 0.0, 0.0]  # the measured steps' own code, spans (decayed sums), last end
        self.last_end: float | None = None
        self.warm_until = WARMUP_STEPS  # steps before this count are warm-up
        self.seen_any_wait = False
        self.last_wait_loader: int | None = None
        self.pending_wait: dict[int, tuple[float, int]] = {}  # other loaders' waits since the last step
        self.train_ended = False  # the train loader's iterator ended since the last step

    def train_loader(self) -> LoaderInfo | None:
        """The loader that feeds the loop: the train loader, else the one a prefetcher's thread iterates for it."""
        lid = self.train if self.train is not None else self.fed
        return self.loaders.get(lid) if lid is not None else None

    # ------------------------------------------------------------ a run met mid-way (see Store._missed_steps)

    def resume_mid_step(self, last: int) -> None:
        """Optimizer steps arriving before any batch belong to the step the agent was in (a first optimizer step
        ends it if its batch went to the old monitor; more optimizers of it end nothing). ``last``: the kind of
        the agent's last record."""
        self.seen_any_wait = True  # so further optimizers of that step close nothing
        if last == K_WAIT:
            self.cur_batches = max(self.cur_batches, 1)

    def seed_train_loader(self, lid: int, batches: int) -> None:
        """Loader-driven steps: the train loader is the most iterated one over the whole run, not since the
        restart."""
        info = loader_of(self.loaders, lid)
        info.batches = max(info.batches, batches)
        if self.train is None:
            self.train = lid

    # ------------------------------------------------------------ records

    def apply_each(
        self, tags: array[int], t0s: array[int], t1s: array[int], vals: array[int], lo: int, hi: int
    ) -> None:
        """Records [lo, hi) of a batch, one at a time."""
        on_wait, on_boundary = self.on_wait, self.on_boundary
        for i in range(lo, hi):
            tag = tags[i]
            kind = tag & 0xFF
            if kind == K_WAIT:
                on_wait(tag >> 8, t0s[i] * NS, t1s[i] * NS)
            elif kind == K_OPT:
                on_boundary(t0s[i] * NS, False)
            elif kind == K_STEP:
                on_boundary(t0s[i] * NS, True)
            else:
                self.apply_other(tag, t0s[i] * NS, t1s[i] * NS, vals[i])

    def apply_other(self, tag: int, t0: float, t1: float, value: int) -> None:
        kind = tag & 0xFF
        if kind == K_ITER_END:
            self.on_iter_end(tag >> 8, t0, t1)
        elif kind == K_ITER_START:
            self.on_iter_start(tag >> 8, t0, value, t1)
        elif kind == K_CKPT:
            self.add_checkpoint(t0, t1)
        elif kind == K_MARK:
            self.run.marks.append((t0, self.run.names.get(tag >> 8, f"mark-{tag >> 8}")))
        elif kind == K_PHASE:
            self.run.phases.append((t0, t1, self.run.names.get(tag >> 8, f"phase-{tag >> 8}")))
        elif kind == K_OUTSIDE:
            self.on_outside(t0, t1, value)
        elif kind == K_HANDOVER:
            if t1 > t0:
                self.cur_handover += t1 - t0
                self.cur_handover_n += 1
        elif kind == K_FEED:
            self.fed = lid = bounded(self.loaders, tag >> 8)
            info = loader_of(self.loaders, lid)
            info.fed_batches += 1
            info.fed_wait_s += max(0.0, t1 - t0)
        elif kind == K_FEED_END:
            pass  # a prefetcher's loader ended its epoch: the loop learns it from its own iterator

    def on_outside(self, t0: float, t1: float, value: int) -> None:
        """A step's time outside the model (sent just before its optimizer step). Where no loader fed it, the
        steps no loader fed before the first one were not measured: they become warm-up."""
        if t1 <= t0 or value < 0:
            return
        if self.cur_batches or self.cur_handover_n:  # its data wait is measured: the rest is the loop's own code
            self.cur_outside += min(value * NS, t1 - t0)
            self.cur_outside_n += 1
            return
        if not self.outside_steps and not self.cur_outside_n:
            self.steps.mark_warm(0)
        self.cur_outside += min(value * NS, t1 - t0)
        self.cur_outside_n += 1

    def estimated_outside(self, dur: float) -> float:
        """A step the agent did not time (between its bursts, agent/_outside.py): the measured steps' latest share
        outside the model, of at most OUTSIDE_LONG times their typical span (what made a step far longer than
        those was not measured: it is not called data wait)."""
        out, span, _ = self.outside_share
        if span <= 0:
            return 0.0
        return out / span * min(dur, OUTSIDE_LONG * span)

    def own_share_now(self, end: float) -> float:
        """The measured steps' latest share of their time in the loop's own code, for steps ending at ``end`` that
        the agent did not time (0 once the last measured step is more than OUTSIDE_GAP_S old)."""
        own, span, last = self.own_share
        if span <= 0 or end - last > OUTSIDE_GAP_S:
            return 0.0
        return own / span

    def add_checkpoint(self, t0: float, t1: float) -> None:
        """One checkpoint may be several saves (model, optimizer, RNG) inside a framework's span: merge
        spans that overlap or follow each other within CKPT_MERGE_GAP_S."""
        cps = self.run.checkpoints
        while cps and cps[-1][1] >= t0 - CKPT_MERGE_GAP_S and cps[-1][0] <= t1 + CKPT_MERGE_GAP_S:
            c0, c1 = cps.pop()
            t0, t1 = min(t0, c0), max(t1, c1)
        cps.append((t0, t1))

    def on_wait(self, lid: int, t0: float, t1: float) -> None:
        if self.gc.total:
            t1 = max(t0, t1 - self.gc.overlap_all(t0, t1))  # a collection inside __next__ is not data
        info = self.loaders.get(lid)
        if info is None:
            lid = bounded(self.loaders, lid)
            info = loader_of(self.loaders, lid)
        if self.restarts.pending:
            self.restarts.first_wait(lid, t0, t1, info.batches, info.wait_s)
        info.batches += 1
        info.wait_s += t1 - t0
        self.seen_any_wait = True
        self.last_wait_loader = lid
        if lid != self.train:
            train = self.loaders.get(self.train) if self.train is not None else None
            # Without optimizer steps the most iterated loader is the train loader; with them, the
            # loader whose batch precedes each optimizer step is (see on_boundary).
            if train is None or (self.mode == "next" and info.batches > train.batches):
                self.train = lid
        if lid != self.train:
            self.run.eval_wait_s += t1 - t0
            wait, batches = self.pending_wait.get(lid, (0.0, 0))
            self.pending_wait[lid] = (wait + t1 - t0, batches + 1)
            if self.cur_start is None and self.mode != "next":
                self.cur_start = t0
            return
        if self.mode == "next":
            if self.cur_start is not None:
                self.close(self.cur_start, t0)
            self.cur_start = t0
            self.cur_wait = t1 - t0
            self.cur_batches = 1
        else:
            if self.cur_start is None:
                self.cur_start = t0
            self.cur_wait += t1 - t0
            self.cur_batches += 1

    def on_boundary(self, t: float, explicit: bool) -> None:
        if explicit:
            if self.mode != "explicit" and self.steps.total:
                # Explicit marks are authoritative: steps inferred before the first one are replaced.
                self.steps.clear()
                self.warm_until = WARMUP_STEPS
            self.mode = "explicit"
        elif self.mode == "explicit":
            return
        else:
            if self.mode == "next" and self.steps.total:
                # Gradient accumulation: next() pairs looked like steps until the first optimizer step.
                self.steps.clear()
                self.warm_until = WARMUP_STEPS
            self.mode = "opt"
            last = self.last_wait_loader
            if last is not None and last != self.train:
                # The loader feeding the optimizer changed (a new train loader; eval loaders never
                # precede an optimizer step): its waits since the last step were this step's.
                self.train = last
                self.cur_wait, self.cur_batches = self.pending_wait.get(last, (0.0, 0))
                self.run.eval_wait_s -= self.cur_wait
                self.cur_start = self.cur_start if self.cur_start is not None else self.last_end
            self.pending_wait.clear()
            if self.seen_any_wait and self.cur_batches == 0 and not self.train_ended:
                # Another optimizer of the same iteration; unless the iterator ended since the last step: a loader
                # that fetches one batch ahead (accelerate's DataLoaderShard) hands out its last one after that.
                return
        self.train_ended = False
        start = self.cur_start if self.cur_start is not None else self.last_end
        if start is None:
            start = t
        self.close(start, t)
        self.cur_start = t

    def on_iter_end(self, lid: int, t: float, t1: float) -> None:
        self.train_ended = self.train_ended or lid == self.train
        self.restarts.iter_end(bounded(self.loaders, lid), t, t1)
        if lid == self.train and self.mode == "next" and self.cur_start is not None:
            self.close(self.cur_start, t)
            self.cur_start = None

    def on_iter_start(self, lid: int, t: float, workers: int, t1: float) -> None:
        lid = bounded(self.loaders, lid)
        workers = max(0, min(workers, 1024))  # as many as a workers message may list
        info = loader_of(self.loaders, lid)
        info.iterators += 1
        self.run.iter_starts.append((t, lid))
        persistent = bool(info.config.get("persistent_workers"))
        self.restarts.iter_start(lid, t, t1, workers, workers > 0 and not persistent and info.iterators > 1)
        if workers > 0 and not (persistent and info.iterators > 1):
            # Workers (re)starting: the next steps wait on their start-up, not on steady-state loading; each
            # worker's first batch does (they take batches in turn).
            self.warm_until = max(self.warm_until, self.steps.total + max(RESTART_WARMUP_STEPS, workers))
        if self.mode == "next" and lid == self.train:
            self.cur_start = None  # a new epoch: the gap before it is not a step

    def close(self, start: float, end: float) -> None:
        """The step being built ends: a row of the step table, and a fresh step. A step fed through a hand-over is
        counted as one batch of the loader a prefetcher iterates, where one does (for its samples; its row carries the
        train loader, 0 where none)."""
        handed = not self.cur_batches and self.cur_handover_n and self.fed is not None and self.train is None
        lid = self.fed if handed else self.train
        train = self.loaders.get(lid) if lid is not None else None
        batch = train.batch_size if train is not None else None
        samples = (1 if handed else self.cur_batches) * batch if isinstance(batch, int) else 0
        warm = self.steps.total < self.warm_until
        dur = end - start
        wait = min(self.cur_wait, dur)
        own = 0.0
        if not self.cur_batches and self.cur_handover_n:
            wait = min(self.cur_handover, dur)  # the training thread waited for another thread's batch
            self.handover_steps += 1
            self.last_measured = "handover"
        if self.cur_outside_n and (self.cur_batches or self.cur_handover_n):
            own = max(0.0, min(self.cur_outside, dur) - wait)  # outside the model, not waiting: the loop's own code
            self.own_steps += 1
            if not self.own_share[1] or dur <= OUTSIDE_LONG * self.own_share[1]:
                _decayed(self.own_share, own, dur, end)  # a long step (an eval, a collection) says nothing of the rest
        elif self.cur_outside_n and not self.cur_batches:
            wait = min(self.cur_outside, dur)  # no loader fed this step: its wait is outside the model
            self.outside_steps += 1
            self.last_measured = "outside"
            _decayed(self.outside_share, wait, dur, end)
        elif (self.cur_batches or self.cur_handover_n) and self.own_steps:
            share_now = self.own_share_now(end)
            if share_now > 0.0:
                own = max(0.0, min(share_now * min(dur, OUTSIDE_LONG * self.own_share[1]), dur - wait))
                self.own_estimated += 1
        elif self.outside_steps and not self.cur_batches and end - self.outside_share[2] <= OUTSIDE_GAP_S:
            wait = self.estimated_outside(dur)
            self.outside_estimated += 1
        self.cur_outside = 0.0
        self.cur_outside_n = 0
        self.cur_handover = 0.0
        self.cur_handover_n = 0
        covered = self.cur_exposed_wait if self.cur_exposed_wait >= 0 else wait
        self.steps.add(start, end, wait, samples, warm, self.cur_exposed, self.train or 0, covered, self.cur_comm, own)
        self.last_end = end
        self.cur_wait = 0.0
        self.cur_batches = 0
        self.cur_exposed = _NAN
        self.cur_exposed_wait = 0.0
        self.cur_comm = 0.0

    # ------------------------------------------------------------ late measurements

    def apply_comm(self, records: array[int]) -> None:
        """``comm`` records (the thread blocked in a collective, see agent/_dist.py) go to the step whose span
        holds them, or to the step being built; like ``exposed`` records they are applied after the rest of
        their batch, so they never break the regular pattern the column folds fold."""
        ops = self.run.comm_by_op
        for i in range(0, len(records), 4):
            tag, t0n, t1n = records[i : i + 3]
            if t1n <= t0n:
                continue
            t0, t1 = t0n * NS, t1n * NS
            op = tag >> 8
            name = COMM_OPS[op] if 0 <= op < len(COMM_OPS) else COMM_OPS[0]
            ops[name] = ops.get(name, 0.0) + (t1 - t0)
            if not self.steps.add_comm(t0, t1) and self.cur_start is not None and t1 > self.cur_start:
                self.cur_comm += t1 - t0

    def apply_exposed(self, records: array[int]) -> None:
        """``exposed`` records (CUDA event pairs, see agent/_cuda.py) arrive after their wait, often after
        its step ended: each goes to the step of its loader whose span holds the wait's [t0, t1] (bisect
        on the step table), or to the step being built. Applied after the rest of their batch, so they
        never break the regular pattern the column folds fold. The exposed time is clamped to [0, wait];
        one without a span (t1 <= t0, the form documented before version 1 carried spans) goes to the
        step being built and stands for its whole wait."""
        for i in range(0, len(records), 4):
            tag, t0n, t1n, value = records[i : i + 4]
            exposed = max(0, value) * NS
            if t1n <= t0n:
                self.cur_exposed = exposed if self.cur_exposed != self.cur_exposed else self.cur_exposed + exposed
                self.cur_exposed_wait = -1.0
                continue
            t0, t1 = t0n * NS, t1n * NS
            exposed = min(exposed, t1 - t0)
            lid = tag >> 8
            lid = lid if lid in self.loaders else 0
            if self.steps.add_exposed(t0, t1, exposed, lid):
                continue
            if self.cur_start is not None and t1 > self.cur_start and lid == (self.train or 0):
                self.cur_exposed = exposed if self.cur_exposed != self.cur_exposed else self.cur_exposed + exposed
                if self.cur_exposed_wait >= 0:
                    self.cur_exposed_wait += t1 - t0


def _decayed(share: list[float], value: float, dur: float, end: float) -> None:
    """A measured step's part (``value`` of ``dur`` s, ending at ``end``) into decayed sums [part, span, last end]: the
    first measured step sets them, each later one moves them by OUTSIDE_DECAY."""
    k = OUTSIDE_DECAY if share[1] else 1.0
    share[0] += (value - share[0]) * k
    share[1] += (dur - share[1]) * k
    share[2] = end
