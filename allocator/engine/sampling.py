"""Requests with several output sequences: parallel sampling and beam search in the engine.

A request may ask for ``width`` output sequences (:class:`Sampling`). Its prompt is prefilled once
and the sequences share the prompt's blocks by refcount
(:class:`allocator.memory.forking.ForkingPagedAllocator`):

* **Parallel sampling** (``mode="parallel"``): at admission the prompt's sequence is forked
  ``width - 1`` times; each sequence writes its first token, which copies the partly filled last
  prompt block for all but the last writer (copy-on-write). From then on every sequence writes
  its own blocks; the prompt's full blocks stay shared until the request finishes, so the blocks
  saved are the prompt's full blocks times ``width - 1``.
* **Beam search** (``mode="beam"``): the prompt's first ``width`` candidates start the beams (as
  above). At every later step the beam model (:class:`BeamModel`) says which beams fell out of the
  best ``width``; each is freed and replaced by a fork of a surviving beam, and every beam then
  writes its token (copy-on-write of a shared partial last block). Blocks stay shared as long as
  any two beams descend from them.

**The beam model** (which beams survive). No language model runs here, so which beams stay
in the best ``width`` is drawn, seeded (:class:`BeamModel`): at every step each beam falls out
with probability ``replacement`` and is replaced by a continuation of a surviving beam chosen at
random. At 0 the beams never meet again after the prompt (they share its blocks only, like
parallel samples); at 1 all beams descend from one beam at every step (they share all but their
newest tokens). Real beam search lies in between, where depending on the model and the text; the
default, :data:`DEFAULT_REPLACEMENT` (a beam replaced about once in twenty steps), is a round
value fixed before comparing with the paper, and :mod:`allocator.studies.sharing` shows the
result over the values :data:`REPLACEMENT_SWEEP` (at 0.2 and above nearly every block but the newest
is already shared, so the saving barely moves further).

All sequences of a request have the request's ``output_len`` tokens (the paper's runs ignore
end-of-sequence), and the request finishes when they all have. Scheduling follows the classroom
engine's order (:mod:`allocator.engine.simulate`): serve the running (oldest request first;
when blocks run out the youngest request is preempted by recompute, all its sequences at once),
admit FCFS while a request fits and nobody was preempted this step, compute, finish, record.
A request preempted and admitted again prefills its prompt once (its full blocks shared again)
and each sequence's own tokens on their own: the sharing of beams' common histories is not
rebuilt after a preemption (a small undercount of the saving, only in preempted requests).
``width == 1`` is the classroom engine's single sequence and is run by it: use
:func:`allocator.engine.simulate.simulate` (this module refuses it, so that today's numbers stay
the classroom engine's).

Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, section 4.4 (parallel sampling, beam search) and section 6.3
(Figures 14 and 15).
"""
from __future__ import annotations

import gc
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.validate import one_of, real_number, whole_number
from allocator.engine.loop import Run, drive
from allocator.engine.result import SimulationResult, build_result
from allocator.engine.sequence import SequenceStatus
from allocator.memory.forking import ForkingPagedAllocator
from allocator.workloads.requests import Workload

__all__ = ["BEAM_MODES", "DEFAULT_REPLACEMENT", "MAX_WIDTH", "REPLACEMENT_SWEEP", "BeamModel", "Sampling",
           "SamplingRun", "SamplingScheduler", "simulate_sampling"]

#: The two ways a request asks for several sequences.
BEAM_MODES = ("parallel", "beam")
#: Output sequences (parallel) or beams (beam search) per request: 2 .. this.
MAX_WIDTH = 16
#: The beam model's default per-step replacement probability, fixed before any comparison.
DEFAULT_REPLACEMENT = 0.05
#: The values a study sweeps the replacement probability over (its whole range is 0 .. 1).
REPLACEMENT_SWEEP = (0.0, 0.01, 0.05, 0.2)

WAITING, RUNNING, PREEMPTED, FINISHED = (SequenceStatus.WAITING, SequenceStatus.RUNNING,
                                         SequenceStatus.PREEMPTED, SequenceStatus.FINISHED)


@dataclass(frozen=True)
class Sampling:
    """What every request of a run asks for.

    Attributes:
        mode: ``"parallel"`` (``width`` independent samples) or ``"beam"`` (beam search of ``width``).
        width: sequences per request, 2 .. :data:`MAX_WIDTH`.
        replacement: the beam model's per-step probability that a beam is replaced
            (:class:`BeamModel`), 0 .. 1; unused by parallel sampling.
        seed: the beam model's random seed (>= 0).

    Raises:
        FieldError: naming ``mode``, ``width``, ``replacement`` or ``seed``.
    """

    mode: str = "parallel"
    width: int = 2
    replacement: float = DEFAULT_REPLACEMENT
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "mode", one_of("mode", self.mode, BEAM_MODES))
        object.__setattr__(self, "width", whole_number("width", self.width, 2, MAX_WIDTH))
        object.__setattr__(self, "replacement", real_number("replacement", self.replacement, 0, 1))
        object.__setattr__(self, "seed", whole_number("seed", self.seed, 0))


class BeamModel:
    """Which beams survive a step (see the module's docstring), drawn from a seeded generator.

    At every step each beam independently falls out of the best ``width`` with probability
    ``replacement`` (a beam that is not the last survivor); each beam that fell out is replaced by
    a continuation of one of the surviving beams, chosen uniformly. If every beam fell out, the
    first survives. ``replacement = 0``: beams never meet again after the prompt (they share only
    its blocks, as parallel samples do); ``replacement = 1``: every step all beams descend from one
    (they share everything but their last tokens).

    Args:
        width: beams (>= 2).
        replacement: the per-step probability that a beam is replaced, 0 .. 1.
        rng: a ``numpy.random.Generator``.
    """

    def __init__(self, width: int, replacement: float, rng: np.random.Generator):
        self.width, self.rho, self.rng = width, float(replacement), rng

    def step(self, groups: int) -> dict:
        """One step for ``groups`` requests at once.

        Returns:
            {request index: [(beam, parent beam), ...]}: for each request where some beam fell out,
            each fallen beam with the surviving beam whose continuation takes its place (requests
            where every beam survived are absent: most of them at a small ``replacement``).
        """
        w = self.width
        if self.rho <= 0 or groups == 0:
            return {}
        fallen = np.flatnonzero(self.rng.random(groups * w) < self.rho).tolist()
        if not fallen:
            return {}
        by_group: dict = {}
        for i in fallen:
            by_group.setdefault(i // w, []).append(i % w)
        out = {}
        for g, dead in by_group.items():
            if len(dead) == w:
                dead = dead[1:]                               # somebody survives: the first
            gone = set(dead)
            alive = [j for j in range(w) if j not in gone]
            picks = self.rng.integers(0, len(alive), size=len(dead)).tolist()
            out[g] = [(j, alive[k]) for j, k in zip(dead, picks)]
        return out


class _Group:
    """A request inside the engine: its sequences (ids ``(request id, j)``), all of equal length."""

    __slots__ = ("id", "prompt_len", "output_len", "arrival", "status", "first_step", "seqs", "length", "order",
                 "next_j", "contexts")

    def __init__(self, req, arrival):
        self.id, self.prompt_len, self.output_len, self.arrival = req.id, req.prompt_len, req.output_len, arrival
        self.status, self.first_step, self.order = WAITING, None, 0
        self.seqs: list = []             # sequence ids holding blocks, beam order
        self.length = 0                  # tokens each sequence holds
        self.next_j = 0                  # the next sequence id's second part
        self.contexts: list = []         # after a preemption: each sequence's tokens to prefill again


class SamplingScheduler:
    """The busy step for requests of ``sampling.width`` sequences (see the module's docstring), with
    the interface :func:`allocator.engine.loop.drive` calls (``step``, ``new_seq``, ``waiting``,
    ``running``, ``busy_limit``, ``lengths``, ``check_invariants``)."""

    name = "sampling simulation"
    new_seq = _Group
    quiet_stretches = False

    def __init__(self, allocator: ForkingPagedAllocator, run: Run, sampling: Sampling):
        self.allocator, self.run, self.sampling = allocator, run, sampling
        self.waiting: deque[_Group] = deque()
        self.running: dict[int, _Group] = {}
        self.order = 0
        self.beams = BeamModel(sampling.width, sampling.replacement, np.random.default_rng(sampling.seed)) \
            if sampling.mode == "beam" else None
        self.busy_limit = 2 * (sum(r.output_len for r in run.pending) + run.n) + 16
        self.forks = self.frees = 0      # beam forks and frees so far

    # -------------------------------------------------------------- admission arithmetic

    def admission_need(self, g: _Group) -> int:
        """Blocks ``g`` takes when admitted now: the prompt's full blocks once, and each sequence's
        blocks past them, room for the token its admission emits included."""
        a, w = self.allocator, self.sampling.width
        full = g.prompt_len // a.block_size
        contexts = g.contexts or [g.prompt_len] * w
        return full + sum(a.blocks_for(c + 1) - full for c in contexts)

    def reject_reason(self, req) -> str | None:
        """Why a request can never fit the pool: its ``width`` sequences at full length, sharing
        only the prompt's full blocks, need more blocks than the pool has."""
        a, w = self.allocator, self.sampling.width
        full = req.prompt_len // a.block_size
        need = full + w * (a.blocks_for(req.prompt_len + req.output_len) - full)
        if need > a.num_blocks:
            return (f"its {w} sequences need up to {need} blocks of {a.block_size} slots; "
                    f"the pool has {a.num_blocks}")
        return None

    # -------------------------------------------------------------- the step

    def step(self, t: int) -> tuple:
        """One busy step at ``t``; returns (prefill tokens, prefill pairs, decodes, decode pairs)."""
        a, run = self.allocator, self.run
        preempted = 0
        decode_pairs = decodes = 0
        groups = list(self.running.values())
        reforked = set()
        if self.beams is not None and groups:        # the model re-chooses every request's beams
            for i, pairs in self.beams.step(len(groups)).items():
                self._rechoose_beams(groups[i], pairs)
                reforked.add(i)
        bs = a.block_size
        for i, g in enumerate(groups):                # 2. serve the running, oldest first
            if g.status is not RUNNING:
                continue
            if g.length % bs and i not in reforked:   # every last block partly filled and its own
                a.write_in_place(g.seqs)
                decode_pairs += (g.length + 1) * len(g.seqs)
                decodes += len(g.seqs)
                g.length += 1
                continue
            need = a.append_need(g.seqs)
            while need > a.free_blocks():
                victim = self._preempt_youngest()
                preempted += 1
                if victim is g:
                    break
            if g.status is not RUNNING:
                continue
            for sid in g.seqs:
                a.append(sid)
            decode_pairs += (g.length + 1) * len(g.seqs)    # each attends to all it holds after its write
            decodes += len(g.seqs)
            g.length += 1
        admitted = prefill = prefill_pairs = recomputed = 0
        if self.waiting and not preempted:                  # 3. admit (not after a preemption)
            admitted, prefill, prefill_pairs, recomputed = self._admit(t)
        for g in [g for g in self.running.values() if g.length >= g.prompt_len + g.output_len]:
            self._finish(g, t)                              # 5. free the finished
        need = self.admission_need(self.waiting[0]) * a.block_size if self.waiting else 0
        seqs = sum(len(g.seqs) for g in self.running.values())
        logical = sum(g.length * len(g.seqs) for g in self.running.values())
        final = sum((g.prompt_len + g.output_len) * len(g.seqs) for g in self.running.values())
        run.record(step=t, span=1, logical_tokens=logical, holders=seqs, running=decodes + admitted,
                   waiting=len(self.waiting), finished=run.finished, preemptions=preempted, next_need=need,
                   recomputed_tokens=recomputed, admitted=admitted, prefill_tokens=prefill,
                   prefill_pairs=prefill_pairs, decode_pairs=decode_pairs, final=final)
        return prefill, prefill_pairs, decodes, decode_pairs

    def _new_id(self, g: _Group):
        g.next_j += 1
        return (g.id, g.next_j - 1)

    def _rechoose_beams(self, g: _Group, pairs: list) -> None:
        """Beam search: each (beam, parent) in ``pairs`` is a beam that fell out and the surviving
        beam whose continuation takes its place: the fallen beam's sequence is freed and forked
        again from the parent (one :meth:`ForkingPagedAllocator.refork`: the same refcounts as
        fork, then free)."""
        seqs = g.seqs
        for j, p in pairs:
            self.allocator.refork(seqs[j], seqs[p])
            self.forks += 1
            self.frees += 1

    def _preempt_youngest(self) -> _Group:
        """Preempt the request admitted last (recompute): free its sequences, queue it at the head."""
        g = self.running.pop(next(reversed(self.running)))
        g.contexts = [g.length] * len(g.seqs)        # tokens computed up to the last step
        for sid in g.seqs:
            self.allocator.free(sid)
        g.seqs = []
        g.status = PREEMPTED
        self.waiting.appendleft(g)
        return g

    def _admit(self, t: int) -> tuple:
        """Admit the queue's head while it fits (FCFS, no skipping): prefill the prompt once, fork
        it into the request's sequences, each writes its first token (copy-on-write of a shared
        partial last block). Returns (admitted, prefill tokens, prefill pairs, recomputed tokens)."""
        a, w = self.allocator, self.sampling.width
        admitted = prefill = pairs = recomputed = 0
        while self.waiting and self.admission_need(self.waiting[0]) <= a.free_blocks():
            g = self.waiting.popleft()
            p, full = g.prompt_len, g.prompt_len // a.block_size
            first = self._new_id(g)
            if g.status is WAITING:                    # a first admission: prompt, fork, first tokens
                a.allocate(first, p)
                g.seqs = [first] + [self._new_id(g) for _ in range(w - 1)]
                for sid in g.seqs[1:]:
                    a.fork(first, sid)
                for sid in g.seqs:
                    a.append(sid)
                g.length = p + 1
                prefill += p
                pairs += p * (p + 1) // 2
                g.first_step = t
            else:                                      # back from recompute: the prompt once, each own tail
                g.seqs = []
                if full:                               # the prompt's full blocks, shared again
                    a.allocate(first, full * a.block_size)
                for c in g.contexts:
                    sid = self._new_id(g)
                    if full:
                        a.fork(first, sid)
                        for _ in range(c - full * a.block_size):
                            a.append(sid)
                    else:                              # a prompt shorter than a block: nothing full to share
                        a.allocate(sid, c)
                    g.seqs.append(sid)
                if full:
                    a.free(first)
                for sid in g.seqs:
                    a.append(sid)
                own = sum(c - p for c in g.contexts)
                recomputed += p + own
                prefill += p + own
                pairs += p * (p + 1) // 2 + sum((c * (c + 1) - p * (p + 1)) // 2 for c in g.contexts)
                g.length = g.contexts[0] + 1
                g.contexts = []
            self.order += 1
            g.order, g.status = self.order, RUNNING
            self.running[g.id] = g
            admitted += w
        return admitted, prefill, pairs, recomputed

    def _finish(self, g: _Group, t: int) -> None:
        """Free a request whose sequences have all emitted their last token at ``t``."""
        for sid in g.seqs:
            self.allocator.free(sid)
        g.seqs = []
        del self.running[g.id]
        g.status = FINISHED
        self.run.served.append((g.id, g.prompt_len, g.output_len, g.arrival, g.first_step, t))
        self.run.finished += 1

    # -------------------------------------------------------------- checks and pictures

    def lengths(self, t: int) -> dict:
        """{sequence id: tokens held} for every running sequence."""
        return {sid: g.length for g in self.running.values() for sid in g.seqs}

    def check_invariants(self, lengths: dict, t: int) -> None:
        """Assert the requests' sequences are the allocator's, each with its request's length."""
        assert set(lengths) == set(self.allocator.tables), "a sequence holds blocks that no running request lists"
        assert all(g.status is RUNNING and len(g.seqs) == self.sampling.width for g in self.running.values()), \
            "a running request lost or gained a sequence"


class SamplingRun(NamedTuple):
    """What :func:`simulate_sampling` returns: the run's result (per-step metrics as any run's),
    beam forks and frees (each replacement is one of each; 0 for parallel sampling) and the partly
    filled blocks copied on write (count)."""

    result: SimulationResult
    forks: int
    frees: int
    cow_copies: int


def simulate_sampling(workload: Workload, allocator: ForkingPagedAllocator, sampling: Sampling, *, clock=None,
                      seconds_per_step: float | None = None, stop_s: float | None = None,
                      record_snapshots: bool = False, check_invariants: bool = False) -> SamplingRun:
    """Run ``workload`` with every request asking for ``sampling.width`` sequences.

    The loop, clock, arrivals and records are the engine's (:func:`allocator.engine.loop.drive`,
    :func:`allocator.engine.result.build_result`); the per-step metrics read as any run's, counted
    over sequences (``running``: sequences that computed; ``waiting``: requests), with ``saving``
    the slots that sharing saves. Memory saved at a step = saving / (allocated_slots + saving)
    = 1 - physical / logical blocks.

    Args:
        workload: the requests (every one asks for ``sampling``).
        allocator: a :class:`ForkingPagedAllocator` (reset first).
        sampling: :class:`Sampling`.
        clock, seconds_per_step, stop_s, record_snapshots, check_invariants: as
            :func:`allocator.engine.simulate.simulate`.

    Raises:
        FieldError (``allocator``): not a :class:`ForkingPagedAllocator`; (``sampling``): not a
            :class:`Sampling`; as :func:`allocator.engine.simulate.simulate` otherwise.
    """
    if not isinstance(allocator, ForkingPagedAllocator):
        raise FieldError("allocator", f" must be a ForkingPagedAllocator for several sequences per request, "
                                      f"got {type(allocator).__name__}")
    if not isinstance(sampling, Sampling):
        raise FieldError("sampling", f" must be a Sampling, got {type(sampling).__name__}")
    allocator.validate_workload(workload)
    run = Run(workload, allocator, clock=clock, seconds_per_step=seconds_per_step,
              record_snapshots=record_snapshots, tokens_column=False)
    if stop_s is not None:
        stop_s = real_number("stop_s", stop_s, above=0)
    scheduler = SamplingScheduler(allocator, run, sampling)
    collecting = gc.isenabled()
    if collecting:
        gc.disable()
    try:
        drive(run, scheduler, stop_s=stop_s, check_invariants=check_invariants)
    finally:
        if collecting:
            gc.enable()
    return SamplingRun(build_result(workload, allocator, run, clock), scheduler.forks, scheduler.frees,
                       allocator.cow_copies)
