"""The serving engine every page shares (DESIGN.md, "Simulation semantics").

One call to :func:`simulate` runs a workload against one allocator (anything implementing
:class:`allocator.allocators.Allocator`), in discrete steps t = 0, 1, 2, ... (one engine
iteration each), in vLLM's scheduler order -- running sequences are served before new ones
are admitted:

1. Arrivals: requests with arrival_step <= t join the waiting queue (FCFS, ties by id). A
   request that can never fit the pool is rejected with a reason and never retried.
2. Serve the running: each running sequence needs room for this step's token. One whose room is
   full asks the allocator for more (a paged sequence takes one block); if there is none, the
   running sequence admitted last is preempted -- recompute (its memory is freed and it returns
   to the head of the queue; on re-admission its prompt and generated tokens are prefilled
   again) or swap (its blocks go to host memory and come back on re-admission) -- until the
   request fits or it was itself preempted.
3. Admission: unless a sequence was preempted in this step, admit the queue's head while it
   fits; stop at the first that does not (no skipping). Admission makes room for the context
   and the token prefill emits.
4. Compute: admitted requests prefill and emit their first token; running ones emit one.
5. Finish: a request that has emitted output_len tokens frees its memory.
6. Record: the step's metrics (and a picture of the pool, if asked).

Work is counted only where it happened: a recompute counts the tokens the preempted sequence
had actually computed, when it is prefilled again; swap traffic counts blocks that existed.

Events, not steps: the engine never walks a sequence token by token. A running sequence is
described by when it was admitted and how much room it has, so its token count at any step is
``base + t``; the engine wakes it only at the step its room fills (a block boundary) and the
step it finishes. A stretch in which nothing runs and nothing waits is skipped to the next
arrival and recorded as **one** record spanning the whole gap, so the cost of a run grows with
its events (arrivals, admissions, block boundaries, finishes, busy steps), not with the length
of the trace's clock.

Records: every metric of a record holds for each of the ``span`` steps it covers (a busy step
is a record with span 1; an idle gap has span >= 1, nothing running, waiting or flowing).
"""
from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from .allocators import FREE, HOLE, PagedAllocator
from .maps import slot_picture
from .summary import RunSummary, request_table, summarize  # noqa: F401  (summarize: re-exported)
from .validate import FieldError, real_number, whole_number
from .workload import Workload

#: Most memory the pool pictures of one run may take (bytes); past it, every other busy step's
#: picture is dropped (the stride doubles) until they fit.
SNAPSHOT_BUDGET_BYTES = 64 * 2**20

#: Columns that place a record on the step axis.
RECORD_COLUMNS = ("step", "span")

#: Per-step metric names (units: slots unless stated). Each holds for every step of its record.
METRICS = (
    "used_slots",             # distinct tokens stored: a shared system prompt counts once, however many
                              # copies of it the pool holds (the utilisation numerator)
    "duplicate_slots",        # slots holding an extra copy of a shared-prompt token (each reserve-max
                              # reservation's own copy; paged: the prompt's partly filled last block)
    "logical_tokens",         # tokens the running sequences hold, counting a shared prefix per sequence
    "allocated_unshared",     # slots the block tables would need if nothing were shared
    "allocated_slots",        # slots held by some sequence
    "reserved_slots",         # allocated slots for tokens the holding request will still write (the
                              # paper's Figure 2 "reservation"): the part of its room up to its final length
    "internal_fragmentation", # allocated slots the holding request will never write: a reservation's room
                              # past the answer's end, a paged sequence's last block past its final token
    "external_fragmentation", # free slots that cannot serve the queue head although all free slots
                              # together could (placement: holes between reservations, a paged pool's
                              # remainder that forms no block); 0 when the head needs more than all free
    "free_slots",             # total - allocated
    "free_other_slots",       # free slots that are not fragmentation: nobody waits, or the queue head
                              # needs more than all free memory together (free - external)
    "utilization",            # used / total (fraction)
    "running",                # the step's batch: sequences that computed (emitted a token) this step,
                              # including any that finished in it (count)
    "waiting",                # arrived, not admitted (count)
    "finished",               # finished so far (count)
    "tokens",                 # tokens emitted this step (count)
    "preemptions",            # sequences preempted this step (count)
    "units",                  # reservations (reserve-max) or blocks (paged) in use (count)
    "next_need",              # slots the queue head needs to be admitted (0 if none waits)
    "swapped_blocks",         # blocks copied to or from the host pool this step (swap preemption)
    "recomputed_tokens",      # tokens prefilled again this step for sequences preempted by recompute
    "admitted",               # sequences admitted this step: each prefilled its context and emitted a token (count)
    "prefill_tokens",         # tokens prefilled this step: the admitted sequences' contexts, recomputed ones
                              # included (tokens; what the cost model charges 2 x parameters FLOPs each)
    "prefill_pairs",          # causal attention query-key pairs of those prefills: c(c+1)/2 per context of c
    "decode_pairs",           # query-key pairs of this step's decodes: each decoding sequence's query attends
                              # to every token it holds at the end of the step (= KV tokens read)
    "prefix_hit_tokens",      # prompt tokens of this step's first admissions found in the prefix cache (not
                              # prefilled; a re-admission after recompute may hit too, and is not counted here)
    "prompt_tokens_admitted", # prompt tokens of this step's first admissions (the hit rate's denominator)
    "cached_blocks",          # blocks held only by the prefix cache at the end of the step (count)
    "cached_evictions",       # cached blocks the free queue handed out again this step (count)
    "pending_tokens",         # tokens the running sequences will still write before they finish: the sum of
                              # (prompt + output_len - tokens held) (the PagedAttention paper's Figure 2 calls
                              # the room a reservation keeps for them "reservation")
)


#: The int64 columns both loops record per record, in order (see ``_build_result``); the four
#: prefix-cache columns follow only when the allocator caches prefixes.
_COLUMNS = ("step", "span", "logical", "holders", "saving", "allocated", "ext", "running", "waiting", "finished",
            "preemptions", "units", "need", "swapped", "recomputed", "admitted", "prefill", "prefill_pairs",
            "decode_pairs", "final", "unwritten")
_CACHE_COLUMNS = ("hit", "prompt_in", "cached", "evicted")


class _Pictures:
    """The pool pictures (snapshots) of one run, kept within ``SNAPSHOT_BUDGET_BYTES``: past it,
    every other non-empty picture is dropped and the stride between kept steps doubles (both engine
    loops keep them this way)."""

    __slots__ = ("snapshots", "stride", "_bytes")

    def __init__(self) -> None:
        self.snapshots: dict[int, tuple] = {}
        self.stride = 1
        self._bytes = 0

    def keep(self, step: int, snap: tuple) -> None:
        """Keep step's picture, thinning the kept ones while they pass the budget."""
        snapshots = self.snapshots
        snapshots[step] = snap
        self._bytes += _snapshot_bytes(snap)
        while self._bytes > SNAPSHOT_BUDGET_BYTES and len(snapshots) > 2:
            self.stride *= 2
            for k in [k for k, v in snapshots.items() if v and k % self.stride]:
                self._bytes -= _snapshot_bytes(snapshots.pop(k))


class _Seq:
    """A request inside the engine. While running, it holds ``base + t`` tokens at the end of step t."""

    __slots__ = ("id", "prompt_len", "output_len", "generated", "context_len", "base", "order",
                 "finish_step", "grow_step", "recompute", "running", "arrival", "first_step")

    def __init__(self, req, arrival):
        self.id = req.id
        self.arrival = arrival             # arrival step, or seconds on the seconds clock
        self.first_step = -1               # the step that emitted its first token (its first admission)
        self.prompt_len = req.prompt_len
        self.output_len = req.output_len
        self.generated = 0                 # tokens emitted before the current admission
        self.context_len = req.prompt_len  # tokens to (re)compute at admission: prompt + generated
        self.base = 0
        self.order = 0                     # admission counter: the youngest running has the largest
        self.finish_step = -1
        self.grow_step = -1                # the step its room fills (-1: it finishes first)
        self.recompute = False             # preempted by recompute, not yet re-admitted
        self.running = False


_BY_ORDER = attrgetter("order")


@dataclass
class SimulationResult:
    """What one simulation returns; pages render it, the CLI prints ``summary``.

    Attributes:
        kind: "reserve_max" or "paged".
        label: display name of the allocator.
        workload: name of the workload.
        total_slots: pool size in slots.
        block_size: slots per block (None for a reservation allocator).
        metrics: per-record arrays, shape [records] each: ``step`` (first engine step of the
            record), ``span`` (steps it covers, >= 1) and one entry per name in ``METRICS``,
            whose value holds for each step of the record; a run on the seconds clock also has
            ``seconds`` (float [records], the record's duration: see :func:`simulate`).
        snapshots: {record start step: pool picture} (see the allocator's ``snapshot``), or None
            when snapshots were not recorded. Busy steps are kept when ``step % snapshot_stride
            == 0`` (the stride doubles past ``SNAPSHOT_BUDGET_BYTES``); idle gaps always are,
            unless their picture is not empty (blocks held only by the prefix cache) and the
            budget drops it like a busy step's.
        snapshot_stride: the stride (a power of two).
        rejected: list of {"id", "reason", "arrival_step"} for requests that can never fit.
        summary: the run's figures, :class:`allocator.summary.RunSummary` (see :func:`summarize`).
        shared_prefix: tokens of the common system prompt (0: none).
        preemption: the paged allocator's preemption mode, or None.
        requests: per finished request, arrays of shape [finished] sorted by id: ``id``,
            ``prompt_len`` and ``output_len`` (tokens), ``arrival_step``, ``first_token_step``
            (the step whose prefill emitted its first token), ``finish_step`` (the step that
            emitted its last token) and, in a run on the seconds clock, ``arrival_s`` (seconds).
            Rejected requests are not in it (see ``rejected``).
        clock: None for a run on the step clock (arrivals in steps); for a run on the seconds
            clock, the cost model that timed it (see :func:`simulate`).
        prefix_caching: the allocator kept finished prompts' blocks findable (the summary then
            has the prefix-cache figures).
    """

    kind: str
    label: str
    workload: str
    total_slots: int
    block_size: int | None
    metrics: dict
    snapshots: dict | None
    rejected: list
    summary: RunSummary | None = None
    snapshot_stride: int = 1
    shared_prefix: int = 0
    preemption: str | None = None
    requests: dict = field(default_factory=dict)
    clock: object = None
    prefix_caching: bool = False

    @property
    def records(self) -> int:
        """Number of records (busy steps plus idle gaps)."""
        return len(self.metrics["step"])

    @property
    def steps(self) -> int:
        """Engine steps simulated: step 0 to the step the last request finished (idle gaps included)."""
        if not self.records:
            return 0
        return int(self.metrics["step"][-1] + self.metrics["span"][-1])

    def record_index(self, step: int) -> int:
        """Index of the record that covers ``step``.

        Raises:
            FieldError (``step``): a step outside 0 .. steps - 1.
        """
        if not 0 <= step < self.steps:
            raise FieldError("step", f" = {step} must be in 0..{self.steps - 1}")
        return int(np.searchsorted(self.metrics["step"], step, side="right") - 1)

    def value_at(self, name: str, step: int):
        """The value of metric ``name`` at engine step ``step`` (see :meth:`record_index`)."""
        return self.metrics[name][self.record_index(step)]

    def busy_mask(self) -> np.ndarray:
        """Boolean [records]: True on records whose waiting queue was non-empty after admission
        (these are always single busy steps)."""
        return self.metrics["waiting"] > 0

    def mean(self, values, mask: np.ndarray | None = None) -> float | None:
        """Mean over steps of a per-record array (each record weighted by its span), optionally
        over the records in ``mask`` only; None when no step is selected."""
        values = np.asarray(values, dtype=float)
        weights = self.metrics["span"].astype(float)
        if mask is not None:
            values, weights = values[mask], weights[mask]
        total = weights.sum()
        return float((values * weights).sum() / total) if total else None

    def total_cost(self, metadata_cost: float) -> np.ndarray:
        """Per-record allocated slots + c x units (blocks or reservations), in slot equivalents [records].

        Raises:
            FieldError (``metadata_cost``): c not a finite number in 0 .. 1,000,000.

        Source: the metadata-cost objective of seed 001 (001_b60e659497b44204.txt).
        """
        c = real_number("metadata_cost", metadata_cost, 0, 1e6)
        return self.metrics["allocated_slots"] + c * self.metrics["units"]

    def cost_per_token(self, metadata_cost: float, busy: bool = True) -> float | None:
        """Slot equivalents paid per stored token (1.0 = no waste, no metadata): a **ratio of
        means**, mean(allocated slots + c x units) / mean(distinct tokens stored), over the steps
        when requests waited (``busy``) or over every step. A student recomputes it from the mean
        shares beside it: (every allocated share + c x units / pool) / the token-state share.
        (A mean of per-step ratios would weigh a step storing few tokens as much as a full one,
        and could not be recomputed from the means shown.)

        Returns:
            the ratio, or None when no such step stored a token (nothing ran, or nothing waited).

        Source: seed 001's objective (allocated + c x blocks), divided by the useful tokens so
        allocators that store different amounts compare fairly.
        """
        mask = self.busy_mask() if busy else None
        if mask is not None and not mask.any():
            return None
        used = self.mean(self.metrics["used_slots"], mask)
        if not used:
            return None
        return self.mean(self.total_cost(metadata_cost), mask) / used

    def slot_states(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The pool at ``step``, slot by slot (see :func:`allocator.maps.slot_picture`).

        Returns:
            owner: int32 [total_slots], the request id holding each slot or -1.
            state: int8 [total_slots], FREE, TOKEN, EMPTY, HOLE, SHARED or DUPLICATE.

        Raises:
            FieldError: snapshots were not recorded (``snapshots``), ``step`` is outside
                0..steps-1, or its picture was thinned away (``step``).
        """
        if self.snapshots is None:
            raise FieldError("snapshots", ": this result was simulated without snapshots")
        r = self.record_index(step)
        start = int(self.metrics["step"][r])
        if start not in self.snapshots:
            raise FieldError("step", f" = {step} was not recorded (pictures every {self.snapshot_stride} steps)")
        return slot_picture(self.snapshots[start], self.total_slots, self.block_size,
                            int(self.metrics["next_need"][r]), self.shared_prefix)

    def empty_picture(self) -> tuple[np.ndarray, np.ndarray]:
        """The pool with nothing in it (after the run drained): owner all -1, state FREE, with the
        remainder that forms no block drawn as a HOLE."""
        owner = np.full(self.total_slots, -1, dtype=np.int32)
        state = np.full(self.total_slots, FREE, dtype=np.int8)
        if self.block_size:
            state[(self.total_slots // self.block_size) * self.block_size:] = HOLE
        return owner, state


#: Arrivals on the seconds clock count as due within this many seconds of the clock (1 ns), so the
#: request an idle gap was skipped to is due whatever the rounding of the gap's length.
ARRIVAL_TOLERANCE_S = 1e-9


def _arrivals(workload: Workload, clock, seconds_per_step) -> tuple[dict, float]:
    """({request id: arrival on the run's clock}, the tolerance an arrival is due within); see
    :func:`simulate` for the two clocks and the errors raised."""
    if clock is None:
        return {r.id: r.arrival_step for r in workload.requests}, 0
    if seconds_per_step is not None:
        seconds_per_step = real_number("seconds_per_step", seconds_per_step, above=0)
    arrival_of = {}
    for r in workload.requests:
        if r.arrival_s is not None:
            arrival_of[r.id] = r.arrival_s
        elif seconds_per_step is None:
            raise FieldError("seconds_per_step", f": request {r.id} has no arrival_s, so a run on the "
                             "seconds clock needs seconds_per_step to place its arrival_step")
        else:
            arrival_of[r.id] = r.arrival_step * seconds_per_step
    return arrival_of, ARRIVAL_TOLERANCE_S


def simulate(workload: Workload, allocator, *, record_snapshots: bool = True,
             check_invariants: bool = False, clock=None, seconds_per_step: float | None = None,
             rules: "V1Rules | None" = None, stop_s: float | None = None) -> SimulationResult:
    """Run ``workload`` against ``allocator`` until every request finishes or is rejected.

    Args:
        workload: the requests (lengths in tokens, arrivals in steps, or in seconds).
        allocator: an :class:`allocator.allocators.Allocator`; it is reset first, so one instance
            can be reused.
        record_snapshots: keep a picture of the pool at every busy step and idle gap (memory maps).
        check_invariants: after every step, assert the allocator's bookkeeping (tests use this).
        clock: None (the default) runs on the **step clock**: a request joins the queue at step
            ``arrival_step``, and an idle gap is one record spanning the steps to the next arrival.
            A cost model (anything with ``step_seconds(prefill_tokens, prefill_pairs,
            decode_tokens, decode_pairs, swapped_blocks) -> seconds``, e.g.
            :class:`allocator.timing.CostModel`) runs on the **seconds clock**: each busy step
            lasts what the cost model says for the work done in it, a request joins the queue at
            the first step that starts at or after its ``arrival_s``, and an idle gap is one
            record of span 1 lasting until the next arrival. Each record's duration is then the
            ``seconds`` metric.
        seconds_per_step: on the seconds clock, the arrival time of a request without
            ``arrival_s`` is ``arrival_step x seconds_per_step``.
        rules: None (the default: the classroom scheduler above, every existing scenario) or a
            :class:`V1Rules`, which runs vLLM v1's scheduler instead (token budget, chunked
            prefill, a cap on running sequences, recompute-only preemption, prefix caching of
            prompt and generated blocks when the paged allocator has ``prefix_caching``); see
            :class:`V1Rules`. Needs a paged allocator.
        stop_s: on the seconds clock, end the run after the first record that ends at or past this
            many seconds (None: run until every request finished). A cut run is a measurement window
            (the PagedAttention paper's artifact measures its Figure 2 over a fixed stretch of a
            longer trace): requests still running or waiting are neither finished nor rejected.

    Returns:
        SimulationResult with per-record metrics, snapshots, per-request steps and summary.

    Raises:
        FieldError: the allocator cannot serve this workload (e.g. an output_len above a
            reservation allocator's max_new_tokens); on the seconds clock, a request without
            ``arrival_s`` when ``seconds_per_step`` is not given, or a bad ``seconds_per_step`` or
            ``stop_s``.
        RuntimeError: the loop ran past a bound it can never legitimately reach (a bug guard,
            so a fault shows as an error rather than a hang).
    """
    allocator.validate_workload(workload)
    if rules is not None:
        return _simulate_v1(workload, allocator, rules, record_snapshots=record_snapshots,
                            check_invariants=check_invariants, clock=clock, seconds_per_step=seconds_per_step)
    timed = clock is not None
    arrival_of, tol = _arrivals(workload, clock, seconds_per_step)
    if timed:
        step_seconds = clock.step_seconds
    allocator.reset(shared_prefix=workload.shared_prefix, prompts=workload.prompts)
    pending = sorted(workload.requests, key=lambda r: (arrival_of[r.id], r.id))
    keys = [arrival_of[r.id] for r in pending]
    n = len(pending)
    # Every busy step emits a token, or preempts everything that ran (and the next one admits).
    busy_limit = 2 * (sum(r.output_len for r in pending) + n) + 16
    waiting: deque[_Seq] = deque()
    running: dict[int, _Seq] = {}              # admission order: the last one is the youngest
    grow_at: dict[int, list[_Seq]] = {}        # step -> sequences whose room fills then
    finish_at: dict[int, list[_Seq]] = {}      # step -> sequences that emit their last token then
    rejected: list[dict] = []
    served: list[tuple] = []                   # (id, prompt, output, arrival, first step, finish step)
    caching = bool(allocator.prefix_caching)   # the four prefix-cache columns are recorded only then
    names = _COLUMNS + (_CACHE_COLUMNS if caching else ())
    pack = struct.Struct(f"<{len(names)}q").pack
    rows = bytearray()                         # one record: its int64 columns packed, in `names` order
    seconds_col: list[float] | None = [] if timed else None
    pictures = _Pictures() if record_snapshots else None
    snapshots = pictures.snapshots if pictures is not None else None
    keep_picture = pictures.keep if pictures is not None else None
    admit, grow, grow_all = allocator.admit, allocator.grow, allocator.grow_all
    free, preempt = allocator.free, allocator.preempt
    need_of, ext_of = allocator.admission_need, allocator.external_fragmentation
    # The paged allocator's counters, read straight from its pool (the same figures its properties
    # give: blocks in use = blocks - free; its external fragmentation is the fixed remainder).
    fast = type(allocator) is PagedAllocator
    if fast:
        pool, num_blocks, bs, ext_const = (allocator.pool, allocator.num_blocks, allocator.block_size,
                                           allocator.remainder_slots)
    ptr = finished = order = busy = 0
    final_sum = 0                              # sum of prompt + output_len over running
    if stop_s is not None:
        stop_s = real_number("stop_s", stop_s, above=0)
    base_sum = 0                               # sum of base over running: they hold base_sum + len * t
    t = 0
    now = 0.0 if timed else 0                  # the clock: seconds (timed) or the step itself

    while finished + len(rejected) < n:
        if stop_s is not None and timed and now >= stop_s:
            break
        if not timed:
            now = t
        if not running and not waiting and keys[ptr] > now + tol:
            # Nothing in flight: skip to the next arrival; the whole gap is one record (of span 1
            # lasting until the arrival on the seconds clock).
            span = 1 if timed else keys[ptr] - t
            if fast:
                units = num_blocks - pool.num_free
                row = (t, span, 0, 0, allocator.shared_saving, units * bs, ext_const, 0, 0, finished, 0, units,
                       0, 0, 0, 0, 0, 0, 0, 0, allocator.never_written)
            else:
                row = (t, span, 0, 0, allocator.shared_saving, allocator.allocated_slots, ext_of(0), 0, 0,
                       finished, 0, allocator.units_in_use, 0, 0, 0, 0, 0, 0, 0, 0, allocator.never_written)
            rows += pack(*row, 0, 0, allocator.cached_blocks, 0) if caching else pack(*row)
            if snapshots is not None:          # the pool as the last step left it: only cached blocks
                keep_picture(t, allocator.snapshot({}) if allocator.cached_blocks else ())
            if timed:
                gap = keys[ptr] - now
                seconds_col.append(gap)
                now += gap
                t += 1
            else:
                t = now = keys[ptr]
        # 1. arrivals
        while ptr < n and keys[ptr] <= now + tol:
            req = pending[ptr]
            ptr += 1
            reason = allocator.never_fits(req.prompt_len, req.output_len)
            if reason:
                rejected.append({"id": req.id, "reason": reason, "arrival_step": req.arrival_step})
            else:
                waiting.append(_Seq(req, keys[ptr - 1]))
        if not running and not waiting:
            continue                           # every arrival was rejected: nothing happens at t
        swap_before = allocator.swap_traffic
        evicted_before = allocator.cache_evictions if caching else 0
        # 2. serve the running: a sequence whose room is full needs more (oldest first)
        preempted = 0
        needs = grow_at.pop(t, None)
        if needs:
            if len(needs) > 1:
                needs.sort(key=_BY_ORDER)
            added = grow_all([s.id for s in needs])
            if added is not None:              # the usual case: enough memory for all of them
                nxt = t + added                # each had exactly filled its room, and gained `added`
                keep = [s for s in needs if s.finish_step >= nxt]
                for s in keep:
                    s.grow_step = nxt          # the others finish first; their grow_step (t) is past
                if keep:
                    bucket = grow_at.get(nxt)
                    if bucket is None:
                        grow_at[nxt] = keep
                    else:
                        bucket.extend(keep)
                needs = ()
            for s in needs:
                if not s.running:
                    continue                   # preempted earlier in this step
                room = grow(s.id)
                while room is None:
                    victim = running[next(reversed(running))]
                    # its KV holds everything it computed up to the previous step
                    victim.context_len = victim.base + t - 1
                    victim.generated = victim.context_len - victim.prompt_len
                    victim.running = False
                    del running[victim.id]
                    base_sum -= victim.base
                    final_sum -= victim.prompt_len + victim.output_len
                    finish_at[victim.finish_step].remove(victim)
                    if victim.grow_step > t:
                        grow_at[victim.grow_step].remove(victim)
                    victim.recompute = preempt(victim.id) == "recompute"
                    waiting.appendleft(victim)
                    preempted += 1
                    if victim is s:
                        break
                    room = grow(s.id)
                else:
                    _wake_when_full(grow_at, s, room - s.base + 1)
        # 3. admission (FCFS, no skipping; none in a step that preempted)
        recomputed = admitted = prefill = prefill_pairs = hit = prompt_in = 0
        if not preempted:
            while waiting:
                s = waiting[0]
                room = admit(s.id, s.prompt_len, s.context_len, s.output_len)
                if room is None:
                    break
                waiting.popleft()
                order += 1
                s.order = order
                s.running = True
                running[s.id] = s
                c = s.context_len
                s.base = c + 1 - t
                base_sum += s.base
                final_sum += s.prompt_len + s.output_len
                admitted += 1
                cached = allocator.last_hit_tokens     # prompt tokens found in the prefix cache
                prefill += c - cached                  # tokens computed: the cached ones are not
                prefill_pairs += c * (c + 1) // 2 - cached * (cached + 1) // 2
                if s.first_step < 0:                   # the hit rate counts each prompt once
                    s.first_step = t
                    hit += cached
                    prompt_in += s.prompt_len
                if s.recompute:
                    recomputed += c
                    s.recompute = False
                s.finish_step = t + s.output_len - s.generated - 1
                _add(finish_at, s.finish_step, s)
                _wake_when_full(grow_at, s, t + room - c)
        # 4. compute: everything running now emits one token (admitted ones after their prefill);
        # a decoding sequence attends to the base + t tokens it holds at the end of the step
        batch = len(running)
        decode_pairs = base_sum + batch * t - (prefill + admitted)
        # 5. finish
        done = finish_at.pop(t, None)
        if done:
            for s in done:
                free(s.id)
                del running[s.id]
                s.running = False
                base_sum -= s.base
                final_sum -= s.prompt_len + s.output_len
                served.append((s.id, s.prompt_len, s.output_len, s.arrival, s.first_step, t))
            finished += len(done)
        # 6. record
        if waiting:
            head = waiting[0]
            need = need_of(head.prompt_len, head.context_len, head.output_len, head.id)
        else:
            need = 0
        swapped = allocator.swap_traffic - swap_before
        holders = len(running)
        if fast:
            units = num_blocks - pool.num_free
            row = (t, 1, base_sum + holders * t, holders, allocator.shared_saving, units * bs, ext_const, batch,
                   len(waiting), finished, preempted, units, need, swapped, recomputed, admitted, prefill,
                   prefill_pairs, decode_pairs, final_sum, allocator.never_written)
        else:
            row = (t, 1, base_sum + holders * t, holders, allocator.shared_saving, allocator.allocated_slots,
                   ext_of(need), batch, len(waiting), finished, preempted, allocator.units_in_use, need, swapped,
                   recomputed, admitted, prefill, prefill_pairs, decode_pairs, final_sum, allocator.never_written)
        if caching:                            # without a prefix cache these stay 0 (filled in later)
            rows += pack(*row, hit, prompt_in, allocator.cached_blocks, allocator.cache_evictions - evicted_before)
        else:
            rows += pack(*row)
        if timed:
            dt = step_seconds(prefill, prefill_pairs, batch - admitted, decode_pairs, swapped)
            seconds_col.append(dt)
            now += dt
        if snapshots is not None or check_invariants:
            lengths = {s.id: s.base + t for s in running.values()}
            if snapshots is not None and t % pictures.stride == 0:
                keep_picture(t, allocator.snapshot(lengths))
            if check_invariants:
                assert sum(lengths.values()) == base_sum + len(running) * t, "token count drifted"
                assert all(s.running for s in running.values()), "a stopped sequence is listed as running"
                allocator.check_invariants(lengths)
        busy += 1
        if busy > busy_limit:
            raise RuntimeError(f"simulation did not drain within {busy_limit} busy steps ({allocator.label})")
        t += 1

    return _build_result(workload, allocator, names, rows, seconds_col, snapshots,
                         pictures.stride if pictures is not None else 1, rejected, served,
                         clock, caching)


def _build_result(workload: Workload, allocator, names: tuple, rows: bytearray, seconds: list | None, snapshots,
                  stride: int, rejected: list, served: list, clock, caching: bool) -> SimulationResult:
    """Turn the loop's records into a :class:`SimulationResult` (both schedulers share it).

    ``rows`` holds each record's int64 columns packed in ``names`` order (one ``struct`` pack per
    record: far cheaper than one list append per column); ``seconds`` the records' durations on
    the seconds clock (None on the step clock). A ``tokens`` column, when named, overrides the
    emitted-token count, which the classroom scheduler takes to be the batch (every running
    sequence emits one token per step); the v1 scheduler records its own, since a prefill chunk
    that does not finish its prompt emits none.
    """
    timed = seconds is not None
    table = np.frombuffer(rows, dtype="<i8").reshape(-1, len(names))
    col = {name: table[:, i] for i, name in enumerate(names)}
    # An idle stretch that only led up to arrivals which were all rejected is no part of the run:
    # the run ends with its last piece of work (the rejections keep their arrival steps).
    k = len(table)
    step, span, running, waiting = col["step"], col["span"], col["running"], col["waiting"]
    while k and running[k - 1] == 0 and waiting[k - 1] == 0 and (timed or span[k - 1] > 1):
        if snapshots is not None:
            snapshots.pop(int(step[k - 1]), None)
        k -= 1
    arr = {name: np.array(values[:k], dtype=np.int64) for name, values in col.items()}
    if not caching:                            # nothing was found, held or evicted by a cache
        for name in _CACHE_COLUMNS:
            arr[name] = np.zeros(k, dtype=np.int64)
    if timed:
        arr["seconds"] = np.asarray(seconds[:k], dtype=np.float64)
    tokens = arr.get("tokens")
    total = allocator.total_slots
    # Every running sequence's prompt starts with the shared prefix (Workload checks it), so with
    # k running, k - 1 of the prefix copies are redundant: distinct tokens = logical - (k-1) x P.
    # Blocks shared through the prefix cache of a trace's prompts save their slots (``saving``);
    # a token equal to another sequence's but stored in an unshared block counts as distinct.
    stored = arr["logical"] - arr["saving"]                   # slots holding a token, any copy
    used = arr["logical"] - np.maximum(np.maximum(arr["holders"] - 1, 0) * workload.shared_prefix, arr["saving"])
    metrics = {
        "step": arr["step"], "span": arr["span"],
        "used_slots": used, "duplicate_slots": stored - used, "logical_tokens": arr["logical"],
        "allocated_unshared": arr["allocated"] + arr["saving"],
        "allocated_slots": arr["allocated"], "reserved_slots": arr["allocated"] - stored - arr["unwritten"],
        "internal_fragmentation": arr["unwritten"],
        "external_fragmentation": arr["ext"], "free_slots": total - arr["allocated"],
        "free_other_slots": total - arr["allocated"] - arr["ext"],
        "utilization": used / float(total), "running": arr["running"], "waiting": arr["waiting"],
        "finished": arr["finished"],
        "tokens": arr["running"].copy() if tokens is None else tokens, "preemptions": arr["preemptions"],
        "units": arr["units"], "next_need": arr["need"], "swapped_blocks": arr["swapped"],
        "recomputed_tokens": arr["recomputed"], "admitted": arr["admitted"], "prefill_tokens": arr["prefill"],
        "prefill_pairs": arr["prefill_pairs"], "decode_pairs": arr["decode_pairs"],
        "prefix_hit_tokens": arr["hit"], "prompt_tokens_admitted": arr["prompt_in"],
        "cached_blocks": arr["cached"], "cached_evictions": arr["evicted"],
        "pending_tokens": arr["final"] - arr["logical"],
    }
    if timed:
        metrics["seconds"] = arr["seconds"]
    result = SimulationResult(kind=allocator.kind, label=allocator.label, workload=workload.name,
                              total_slots=total, block_size=allocator.block_size, metrics=metrics,
                              snapshots=snapshots, rejected=rejected, snapshot_stride=stride,
                              shared_prefix=workload.shared_prefix, preemption=allocator.preemption,
                              requests=request_table(served, workload, timed), clock=clock,
                              prefix_caching=allocator.prefix_caching)
    result.summary = summarize(result)
    return result


# ---------------------------------------------------------------------------------------------
# vLLM v1's scheduler (for replaying real runs; the classroom scenarios keep the loop above)
# ---------------------------------------------------------------------------------------------

#: vLLM's defaults for the v1 rules: a cap of 256 running sequences (``max_num_seqs``) and a
#: per-step budget of 2,048 scheduled tokens (``max_num_batched_tokens``; vLLM picks a larger
#: one for some deployments, so a replay takes it from the run's own arguments).
V1_DEFAULT_MAX_NUM_SEQS = 256
V1_DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048


@dataclass(frozen=True)
class V1Rules:
    """vLLM v1's scheduling rules, each an option with vLLM's default (DESIGN.md, "vLLM v1
    scheduling"; read vllm/v1/core/sched/scheduler.py, ``Scheduler.schedule``).

    Args:
        max_num_seqs: cap on running sequences (default 256). A waiting request is not admitted
            while this many run.
        max_num_batched_tokens: the step's token budget (default 2,048): a decode costs one token,
            a prefill chunk its length.
        chunked_prefill: True (vLLM v1's default): a prompt longer than what is left of the budget
            is prefilled in chunks over several steps. False: admission stops at a waiting request
            whose whole prefill does not fit the budget left, and a request whose prompt is longer
            than the whole budget is rejected (vLLM then asks for a budget of at least the model's
            context). A preempted sequence whose prompt and generated tokens together exceed the
            whole budget is still recomputed in chunks (it could never come back otherwise).

    Each step (what :func:`simulate` does with ``rules``):

    1. Arrivals join the waiting queue (FCFS).
    2. Running sequences are scheduled first, in admission order, while budget is left: each asks
       for its remaining tokens (one for a decode; the rest of its prompt, capped by the budget,
       for a sequence still prefilling). Its block table grows to hold its computed tokens plus
       the scheduled ones, no more (``allocate_slots``). If too few blocks are free, the running
       sequence admitted last is preempted -- **recompute only**: its blocks are freed (they stay
       in the prefix cache, if on), it returns to the head of the queue with nothing computed, and
       is prefilled again, prompt and generated tokens, when re-admitted -- until the sequence fits
       or is itself the one preempted.
    3. Unless a sequence was preempted in this step, waiting requests are admitted FCFS while the
       budget lasts and fewer than ``max_num_seqs`` run: a new request first takes its cached
       leading blocks (prefix caching: prompt and generated blocks under chained hashes; at least
       its last token is computed), then as much of the rest as the budget allows (one chunk).
       Stop at the first that does not get blocks (no skipping).
    4. Compute: every scheduled sequence computes its scheduled tokens' KV; one whose computed
       tokens reach its prompt plus generated tokens emits a token -- the first token comes from
       the step that completes the prompt. A sequence that has emitted ``output_len`` tokens frees
       its blocks (last block first; cached ones stay findable).

    No block is taken at admission for the token prefill emits (the classroom scheduler takes one):
    v1 allocates it in the step that computes it. Swap preemption is older vLLM's (v0) option and is
    not part of these rules; a paged allocator with ``preemption="swap"`` is refused.

    Raises:
        FieldError: ``max_num_seqs`` or ``max_num_batched_tokens`` not a whole number >= 1.
    """

    max_num_seqs: int = V1_DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = V1_DEFAULT_MAX_NUM_BATCHED_TOKENS
    chunked_prefill: bool = True

    def __post_init__(self):
        whole_number("max_num_seqs", self.max_num_seqs, 1, 1 << 20)
        whole_number("max_num_batched_tokens", self.max_num_batched_tokens, 1, 1 << 24)
        object.__setattr__(self, "chunked_prefill", bool(self.chunked_prefill))

    def describe(self) -> str:
        """One line naming the rules in force, e.g. for a page's caption."""
        return (f"vLLM v1 rules: at most {self.max_num_seqs} running, a budget of "
                f"{self.max_num_batched_tokens:,} tokens per step, chunked prefill "
                f"{'on' if self.chunked_prefill else 'off'}, recompute preemption")


class _V1Seq:
    """A request inside the v1 scheduler: ``computed`` tokens have KV; it holds ``prompt_len +
    generated`` tokens in all."""

    __slots__ = ("id", "prompt_len", "output_len", "generated", "computed", "arrival", "first_step",
                 "recomputing", "started")

    def __init__(self, req, arrival):
        self.id = req.id
        self.prompt_len = req.prompt_len
        self.output_len = req.output_len
        self.arrival = arrival
        self.generated = 0
        self.computed = 0
        self.first_step = -1
        self.recomputing = 0            # tokens still to recompute after a preemption
        self.started = False            # admitted at least once (the hit rate counts each prompt once)


def _simulate_v1(workload: Workload, allocator, rules: V1Rules, *, record_snapshots: bool,
                 check_invariants: bool, clock, seconds_per_step) -> SimulationResult:
    """:func:`simulate` under :class:`V1Rules` (see there for the step). Same result layout; the
    ``tokens`` metric counts tokens emitted (a prefill chunk that leaves its prompt unfinished
    emits none), ``admitted`` counts requests taken from the queue, ``prefill_tokens`` every
    token computed other than decodes (chunks, recomputes), ``recomputed_tokens`` the part of
    them that recomputes a preempted sequence.

    Raises:
        FieldError: a non-paged allocator or one with swap preemption (``preemption``).
    """
    if allocator.kind != "paged" or not hasattr(allocator, "v1_allocate"):
        raise FieldError("rules", ": vLLM v1's scheduler needs the paged allocator")
    if allocator.preemption != "recompute":
        raise FieldError("preemption", f" = {allocator.preemption!r}: vLLM v1 preempts by recompute only "
                         "(swap is older vLLM's option; use the classroom scheduler for it)")
    timed = clock is not None
    arrival_of, tol = _arrivals(workload, clock, seconds_per_step)
    step_seconds = clock.step_seconds if timed else None
    allocator.reset(shared_prefix=workload.shared_prefix, prompts=workload.prompts)
    bs = allocator.block_size
    budget_cap, seq_cap, chunked = rules.max_num_batched_tokens, rules.max_num_seqs, rules.chunked_prefill
    pending = sorted(workload.requests, key=lambda r: (arrival_of[r.id], r.id))
    keys = [arrival_of[r.id] for r in pending]
    n = len(pending)
    busy_limit = 4 * (sum(r.prompt_len + r.output_len for r in pending) + n) + 16
    waiting: deque[_V1Seq] = deque()
    running: list[_V1Seq] = []
    rejected: list[dict] = []
    served: list[tuple] = []
    caching = bool(allocator.prefix_caching)
    names = _COLUMNS + (_CACHE_COLUMNS if caching else ()) + ("tokens",)
    pack = struct.Struct(f"<{len(names)}q").pack
    rows = bytearray()
    seconds_col: list[float] | None = [] if timed else None
    pictures = _Pictures() if record_snapshots else None
    snapshots = pictures.snapshots if pictures is not None else None
    keep_picture = pictures.keep if pictures is not None else None
    computed_blocks, allocate, v1_free = (allocator.v1_computed_blocks, allocator.v1_allocate, allocator.v1_free)
    ptr = finished = busy = 0
    t = 0
    now = 0.0 if timed else 0

    while finished + len(rejected) < n:
        if not timed:
            now = t
        if not running and not waiting and keys[ptr] > now + tol:
            row = (t, 1 if timed else keys[ptr] - t, 0, 0, allocator.shared_saving, allocator.allocated_slots,
                   allocator.external_fragmentation(0), 0, 0, finished, 0, allocator.units_in_use,
                   0, 0, 0, 0, 0, 0, 0, 0, allocator.never_written)
            rows += pack(*row, 0, 0, allocator.cached_blocks, 0, 0) if caching else pack(*row, 0)
            if snapshots is not None:
                keep_picture(t, allocator.snapshot({}) if allocator.cached_blocks else ())
            if timed:
                gap = keys[ptr] - now
                seconds_col.append(gap)
                now += gap
                t += 1
            else:
                t = now = keys[ptr]
        # 1. arrivals
        while ptr < n and keys[ptr] <= now + tol:
            req = pending[ptr]
            ptr += 1
            reason = allocator.never_fits(req.prompt_len, req.output_len)
            if reason is None and not chunked and req.prompt_len > budget_cap:
                reason = (f"its {req.prompt_len}-token prompt is longer than the step's token budget "
                          f"({budget_cap}) and chunked prefill is off")
            if reason:
                rejected.append({"id": req.id, "reason": reason, "arrival_step": req.arrival_step})
            else:
                waiting.append(_V1Seq(req, keys[ptr - 1]))
        if not running and not waiting:
            continue
        evicted_before = allocator.cache_evictions if caching else 0
        budget = budget_cap
        scheduled: list[tuple[_V1Seq, int]] = []
        preempted = 0
        # 2. the running first, in admission order; the youngest is preempted when blocks run out
        i = 0
        while i < len(running) and budget > 0:
            s = running[i]
            want = s.prompt_len + s.generated - s.computed
            new = want if want < budget else budget
            ok = True
            while not allocate(s.id, s.prompt_len, s.prompt_len + s.generated, s.computed + new,
                               final=s.prompt_len + s.output_len):
                victim = running.pop()
                v1_free(victim.id, keep_keys=True)
                victim.recomputing = victim.computed       # work lost: computed again on return
                victim.computed = 0
                waiting.appendleft(victim)
                preempted += 1
                if victim is s:
                    ok = False
                    break
            if not ok:
                break
            scheduled.append((s, new))
            budget -= new
            i += 1
        # 3. admission (FCFS, no skipping; none in a step that preempted)
        admitted = hit = prompt_in = 0
        if not preempted:
            while waiting and budget > 0 and len(running) < seq_cap:
                s = waiting[0]
                total = s.prompt_len + s.generated
                hits = computed_blocks(s.id, s.prompt_len, total)
                cached = len(hits) * bs
                want = total - cached
                if not chunked and budget < want <= budget_cap:
                    break
                new = want if want < budget else budget
                if not allocate(s.id, s.prompt_len, total, cached + new, hits, final=s.prompt_len + s.output_len):
                    break
                waiting.popleft()
                s.computed = cached
                if s.recomputing:
                    s.recomputing = max(0, s.recomputing - cached)
                if not s.started:
                    s.started = True
                    hit += cached
                    prompt_in += s.prompt_len
                running.append(s)
                scheduled.append((s, new))
                budget -= new
                admitted += 1
        # 4. compute
        prefill = prefill_pairs = decodes = decode_pairs = emitted = recomputed = 0
        done = []
        for s, new in scheduled:
            c = s.computed
            total = s.prompt_len + s.generated
            if s.generated and c == total - 1 and new == 1:
                decodes += 1
                decode_pairs += c + 1
            else:
                prefill += new
                prefill_pairs += new * c + new * (new + 1) // 2
                if s.recomputing:
                    r = new if new < s.recomputing else s.recomputing
                    recomputed += r
                    s.recomputing -= r
            s.computed = c + new
            if s.computed == total:
                s.generated += 1
                emitted += 1
                if s.first_step < 0:
                    s.first_step = t
                if s.generated >= s.output_len:
                    done.append(s)
        batch = len(scheduled)
        held = sum(s.computed for s in running)           # KV tokens held at the end of the step
        # 5. finish
        if done:
            gone = set()
            for s in done:
                v1_free(s.id)
                gone.add(s.id)
                served.append((s.id, s.prompt_len, s.output_len, s.arrival, s.first_step, t))
            running = [s for s in running if s.id not in gone]
            finished += len(done)
        # 6. record
        if waiting:
            head = waiting[0]
            need = -(-(head.prompt_len + head.generated) // bs) * bs
        else:
            need = 0
        row = (t, 1, held - sum(s.computed for s in done), len(running), allocator.shared_saving,
               allocator.allocated_slots, allocator.external_fragmentation(need), batch, len(waiting), finished,
               preempted, allocator.units_in_use, need, 0, recomputed, admitted, prefill, prefill_pairs,
               decode_pairs, sum(s.prompt_len + s.output_len for s in running),   # final: pending = final - logical
               allocator.never_written)
        if caching:
            rows += pack(*row, hit, prompt_in, allocator.cached_blocks, allocator.cache_evictions - evicted_before,
                         emitted)
        else:
            rows += pack(*row, emitted)
        if timed:
            dt = step_seconds(prefill, prefill_pairs, decodes, decode_pairs, 0)
            seconds_col.append(dt)
            now += dt
        if snapshots is not None or check_invariants:
            lengths = {s.id: s.computed for s in running}
            if snapshots is not None and t % pictures.stride == 0:
                keep_picture(t, allocator.snapshot(lengths))
            if check_invariants:
                assert len(running) <= seq_cap, "more running than max_num_seqs"
                assert sum(new for _, new in scheduled) <= budget_cap, "token budget overspent"
                allocator.check_invariants(lengths)
        busy += 1
        if busy > busy_limit:
            raise RuntimeError(f"v1 simulation did not drain within {busy_limit} busy steps ({allocator.label})")
        t += 1
    return _build_result(workload, allocator, names, rows, seconds_col, snapshots,
                         pictures.stride if pictures is not None else 1, rejected, served,
                         clock, caching)


def _add(buckets: dict, step: int, s: _Seq) -> None:
    """Put ``s`` in the bucket of sequences woken at ``step``."""
    bucket = buckets.get(step)
    if bucket is None:
        buckets[step] = [s]
    else:
        bucket.append(s)


def _wake_when_full(grow_at: dict, s: _Seq, step: int) -> None:
    """Wake ``s`` at ``step``, the step its room fills, unless it finishes before then."""
    if step <= s.finish_step:
        s.grow_step = step
        _add(grow_at, step, s)
    else:
        s.grow_step = -1


def _snapshot_bytes(snap) -> int:
    """Approximate memory of one pool picture (a tuple of ints costs a pointer per entry)."""
    return sum(8 * (len(e[-1]) + 3) if isinstance(e[-1], tuple) else 40 for e in snap)
