"""What both schedulers' loops share: the clock, the arrivals, the idle-gap skip and the records.

:func:`drive` is the engine's one loop (``allocator/engine/simulate.py`` describes a step). A scheduler
(:class:`allocator.engine.classroom.ClassroomScheduler` or
:class:`allocator.engine.v1.V1Scheduler`) decides only what happens *inside* a busy step -- whom
to serve, whom to admit, what they compute, who finishes -- and hands its counters to
:meth:`Run.record`; everything around the step is written here, once:

* the **clock**: steps, or seconds from a cost model (a busy step lasts what the model says for
  its work; an idle gap lasts until the next arrival);
* **arrivals**: requests join the waiting queue in order of arrival (ties by id), or are rejected
  with a reason when they can never fit;
* the **idle-gap skip**: when nothing runs or waits, the whole stretch to the next arrival is one
  record (span >= 1 on the step clock; span 1 lasting the gap on the seconds clock);
* the **records**: one row of int64 counters per record -- the scheduler's (:class:`StepRecord`,
  written by name through :meth:`Run.record`), then the pool's, read from the allocator after the
  step (:class:`PoolRecord`) -- and the pool pictures kept within a memory budget.
"""
from __future__ import annotations

import math
import mmap
import struct
import threading
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np

from allocator.memory.paged import PagedAllocator
from allocator.common.errors import FieldError
from allocator.common.validate import real_number
from allocator.workloads.requests import Workload

#: Most memory the pool pictures of one run may take (bytes, as :func:`_snapshot_bytes` counts
#: them); past it, every other busy step's picture is dropped (the stride doubles) until they fit.
SNAPSHOT_BUDGET_BYTES = 64 * 2**20

#: Arrivals on the seconds clock count as due within this many seconds of the clock (1 ns), so the
#: request an idle gap was skipped to is due whatever the rounding of the gap's length.
ARRIVAL_TOLERANCE_S = 1e-9

class StepRecord(NamedTuple):
    """What a scheduler counts in one record: a record's first columns, in this order.

    A scheduler writes them by keyword through :meth:`Run.record` (its keyword parameters are these
    fields); :func:`allocator.engine.result.build_result` reads them back as one int64 array per
    field. Each is the per-step metric of the same name (``allocator.engine.result.METRICS``, with
    its unit), except ``holders`` and ``final``, inputs the result derives others from. Counts are
    of sequences, sizes in tokens; every value holds for each of the record's ``span`` steps.
    """

    step: int                 # the record's first engine step
    span: int                 # steps it covers (1 for a busy step; an idle gap on the step clock: >= 1)
    logical_tokens: int       # tokens the holders hold at the end of the step, each its own prompt copy
    holders: int              # sequences holding memory at the end of the step (the finished ones left)
    running: int              # the step's batch: sequences that computed this step
    waiting: int              # arrived, not admitted, after admission
    finished: int             # finished so far
    preemptions: int          # sequences preempted this step
    next_need: int            # slots the queue head needs (0: nobody waits); decides external fragmentation
    recomputed_tokens: int    # tokens prefilled again for sequences preempted by recompute
    admitted: int             # sequences admitted this step
    prefill_tokens: int       # tokens prefilled this step
    prefill_pairs: int        # causal query-key pairs of those prefills
    decode_pairs: int         # query-key pairs of this step's decodes (= KV tokens read)
    final: int                # the holders' prompt + output lengths summed (pending = final - logical_tokens)


class PoolRecord(NamedTuple):
    """What :meth:`Run.record` reads from the allocator after the step: the columns after the
    scheduler's (slots unless stated). Each is the per-step metric of the same name but ``saving``."""

    saving: int                    # slots saved by sharing (blocks several block tables hold)
    allocated_slots: int           # slots held by some sequence
    external_fragmentation: int    # free slots the queue head cannot use although all free together could
    units: int                     # blocks (paged) or reservations in use (count)
    internal_fragmentation: int    # allocated slots the holder will never write
    swapped_blocks: int            # blocks moved to or from host memory in this record (count)


#: The scheduler's counters per record (:class:`StepRecord`'s fields).
STEP_COLUMNS = StepRecord._fields
#: With prefix caching, the scheduler's two cache counters follow (keywords of :meth:`Run.record`).
CACHE_STEP_COLUMNS = ("prefix_hit_tokens", "prompt_tokens_admitted")
#: Read from the allocator after the step (:class:`PoolRecord`'s fields).
POOL_COLUMNS = PoolRecord._fields
#: With prefix caching, also read from the allocator.
CACHE_POOL_COLUMNS = ("cached_blocks", "cached_evictions")
#: Every prefix-cache column (all zero in a run without a prefix cache).
CACHE_COLUMNS = CACHE_STEP_COLUMNS + CACHE_POOL_COLUMNS
_STEP_PACK = struct.Struct(f"<{len(STEP_COLUMNS)}q")     # a record's step columns (_quiet_stretch)
_POOL_BYTES = 8 * len(POOL_COLUMNS)                       # a record's pool columns, packed


def arrival_times(workload: Workload, clock, seconds_per_step) -> tuple[dict, float]:
    """({request id: arrival on the run's clock}, the tolerance an arrival is due within).

    On the step clock (``clock`` None) arrivals are ``arrival_step``; on the seconds clock,
    ``arrival_s``, or ``arrival_step x seconds_per_step`` for a request without one.

    Raises:
        FieldError (``seconds_per_step``): on the seconds clock, a request without ``arrival_s``
            while ``seconds_per_step`` is None, or a ``seconds_per_step`` that is not a number > 0.
    """
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


class Pictures:
    """The pool pictures (snapshots) of one run, kept within ``SNAPSHOT_BUDGET_BYTES``: past it,
    every other non-empty picture is dropped and the stride between kept steps doubles.

    Each picture's size (:func:`_snapshot_bytes`) is counted once, when it comes, and remembered
    for when it is dropped; :meth:`take` sizes a picture before building it, so a picture the
    thinning would drop at once is never built.

    Attributes:
        snapshots: {step: pool picture}, in step order; stride: the steps kept are its multiples
            (a power of two), plus every empty picture.
    """

    __slots__ = ("snapshots", "stride", "_bytes", "_sizes")

    def __init__(self) -> None:
        self.snapshots: dict[int, tuple] = {}
        self.stride = 1
        self._bytes = 0
        self._sizes: dict[int, int] = {}       # {step: bytes} of the kept non-empty pictures

    def keep(self, step: int, snap: tuple) -> None:
        """Keep step's picture, thinning the kept ones while they pass the budget."""
        self.take(step, _snapshot_bytes(snap), lambda: snap)

    def take(self, step: int, size: int, build) -> None:
        """Count a picture of ``size`` bytes at ``step`` (later than every kept one; 0: an empty
        picture, never dropped), thin the kept ones while they pass the budget, and keep
        ``build()`` unless the thinning dropped this step too (then ``build`` is not called)."""
        snapshots, sizes = self.snapshots, self._sizes
        if size:
            sizes[step] = size
        self._bytes += size
        held = len(snapshots) + 1              # the pictures kept, this one counted
        while self._bytes > SNAPSHOT_BUDGET_BYTES and held > 2:
            self.stride *= 2
            for k in [k for k in sizes if k % self.stride]:
                self._bytes -= sizes.pop(k)
                held -= 1
                if k != step:
                    del snapshots[k]
        if not size or step in sizes:
            snapshots[step] = build()


def _snapshot_bytes(snap) -> int:
    """Memory one pool picture is counted as taking (bytes): 8 per block id in a block table or a
    cached-free entry, plus 24 per entry; 40 per entry of a reservation picture.

    The count is a tuple's (a pointer an element, headers roughly): what the pictures held when
    the budget was set, kept unchanged so that a run keeps the same steps. A cached-free entry is
    a read-only int64 array now (``ArrayBlockPool.cached_free_blocks``): 8 bytes an id, as
    counted, where the tuple it replaced held besides each pointer an int object (28 bytes) per
    id above 256; so the memory pictures actually use is less than the budget says (a million
    cached blocks: 8 MB, not 36 MB).
    """
    return sum(8 * (len(e[-1]) + 3) if hasattr(e[-1], "__len__") else 40 for e in snap)


def _paged_snapshot_bytes(allocator: PagedAllocator) -> int:
    """:func:`_snapshot_bytes` of ``allocator.snapshot(...)``, from the block tables' lengths and
    the cached block count, without building the picture (``PagedAllocator.snapshot``)."""
    tables = allocator.block_tables
    size = 8 * (sum(map(len, tables.values())) + 3 * len(tables))
    cached = allocator.pool.num_cached_free if allocator.prefix_caching else 0
    return size + 8 * (cached + 3) if cached else size


class Served:
    """The finished requests of one run, one row each: ``append((id, prompt_len, output_len,
    arrival, first step, finish step))`` -- arrival in steps, or seconds on the seconds clock.

    Rows are appended as tuples (a list append: the engine's finish path stays as cheap as it
    was) and packed every :data:`PROGRESS_EVERY` busy steps (:meth:`pack`, called by
    :meth:`Run.roll`) into 48 bytes each -- arrival a float64, the rest int64 -- instead of a
    tuple of Python ints (a million requests took 130 MB as tuples). :meth:`columns` reads
    them back.
    """

    __slots__ = ("buf", "rows", "append")
    ROW = struct.Struct("<qqqdqq")
    DTYPE = np.dtype([("id", "<i8"), ("prompt_len", "<i8"), ("output_len", "<i8"), ("arrival", "<f8"),
                      ("first_token_step", "<i8"), ("finish_step", "<i8")])

    def __init__(self) -> None:
        self.buf = bytearray()                 # the packed rows
        self.rows: list[tuple] = []            # rows appended since the last pack
        self.append = self.rows.append

    def pack(self) -> None:
        """Pack the rows appended since the last call into ``buf``."""
        if self.rows:
            pack = self.ROW.pack
            self.buf += b"".join([pack(*row) for row in self.rows])
            self.rows.clear()

    def __len__(self) -> int:
        return len(self.buf) // self.ROW.size + len(self.rows)

    def columns(self) -> np.ndarray:
        """Every row as a structured array [finished] (fields as :data:`DTYPE` names them), in
        the order they finished."""
        self.pack()
        return np.frombuffer(self.buf, dtype=self.DTYPE)


class Run:
    """One run's clock, arrival queue, outcome lists and records (see the module's docstring).

    The clock itself (the step t, and ``now``: the step, or seconds on the seconds clock) lives in
    :func:`drive`, which passes it to the methods that need it.

    Attributes:
        pending: the requests sorted by (arrival, id); keys: their arrivals on the run's clock;
            next: index of the first request not yet arrived.
        rejected: [{"id", "reason", "arrival_step"}]; served: (id, prompt_len, output_len,
            arrival, first step, finish step) per finished request (:class:`Served`); finished:
            len(served).
        names: the record's columns, in order; rows: the latest records, int64 columns packed;
            chunks: the earlier records, in the same format, one memory map per stretch of about
            :data:`PROGRESS_EVERY` busy steps (:meth:`roll`), so that
            :func:`allocator.engine.result.build_result` can free them one by one as it copies them
            into columns (a million requests: 3.6 M records, 600 MB, never held twice).
        seconds: each record's duration (seconds clock) or None (step clock).
        pictures: the kept pool pictures, or None when not recorded.
    """

    __slots__ = ("allocator", "timed", "tol", "step_seconds", "pending", "keys", "n", "next", "rejected", "served",
                 "finished", "caching", "names", "rows", "chunks", "seconds", "pictures", "_pack",
                 "_tokens", "_fast", "_bare", "_pool", "_num_blocks", "_bs", "_remainder", "_swaps", "_swap_total",
                 "_evicted_total", "swapped", "_plain", "_windowed", "plain")

    def __init__(self, workload: Workload, allocator, *, clock, seconds_per_step, record_snapshots: bool,
                 tokens_column: bool) -> None:
        """Raises FieldError as :func:`arrival_times`; resets ``allocator`` for ``workload``."""
        self.allocator = allocator
        self.timed = clock is not None
        arrival_of, self.tol = arrival_times(workload, clock, seconds_per_step)
        # a bound cost model hands the loop one plain function (the same floats as its step_seconds)
        pricer = getattr(clock, "pricer", None)
        self.step_seconds = None if clock is None else pricer() if pricer is not None else clock.step_seconds
        allocator.reset(shared_prefix=workload.shared_prefix, prompts=workload.prompts)
        self.pending = sorted(workload.requests, key=lambda r: (arrival_of[r.id], r.id))
        self.keys = [arrival_of[r.id] for r in self.pending]
        self.n = len(self.pending)
        self.next = self.finished = 0
        self.rejected: list[dict] = []
        self.served = Served()
        self.caching = caching = bool(allocator.prefix_caching)
        step_names = STEP_COLUMNS + (CACHE_STEP_COLUMNS if caching else ()) + (("tokens",) if tokens_column else ())
        self.names = step_names + POOL_COLUMNS + (CACHE_POOL_COLUMNS if caching else ())
        self._pack = struct.Struct(f"<{len(self.names)}q").pack
        self._tokens = tokens_column
        self.rows = bytearray()                # one record: its int64 columns packed, in `names` order
        self.chunks: list[mmap.mmap] = []      # earlier rows, oldest first (roll)
        self.seconds: list[float] | None = [] if self.timed else None
        self.pictures = Pictures() if record_snapshots else None
        # The paged allocator's counters are read straight from its pool (the figures its properties
        # give: blocks in use = blocks - free; its external fragmentation is the fixed remainder).
        self._fast = type(allocator) is PagedAllocator
        if self._fast:
            self._pool, self._num_blocks, self._bs, self._remainder = (allocator.pool, allocator.num_blocks,
                                                                       allocator.block_size, allocator.remainder_slots)
        # a sliding-window pool stores fewer tokens than the sequences hold (allocator.memory.sliding_window):
        # its records count the slots holding a token, read from it (stored_counts)
        self._windowed = bool(getattr(allocator, "windowed", False))
        self._swaps = allocator.preemption == "swap"   # no other allocator ever moves a block to the host
        # records with no swap, prefix-cache or tokens column are written the shortest way (_plain: the paged's)
        self._bare = not self._swaps and not caching and not tokens_column
        self._plain = self._fast and self._bare and not self._windowed
        self.plain = self._plain                # a busy step's record may be written by record_plain
        self._swap_total = self._evicted_total = 0   # the allocator's running totals at the last record
        self.swapped = 0                       # blocks swapped in the last recorded step

    def roll(self) -> None:
        """Move the records written so far to ``chunks`` and start ``rows`` afresh, and pack the
        requests finished since the last roll (:meth:`Served.pack`); :func:`drive` calls it every
        :data:`PROGRESS_EVERY` busy steps. A chunk is copied into its own
        anonymous memory map, which the system takes back the moment it is freed (a freed
        bytearray of a few MB stays in the process's heap for reuse, so freeing the records chunk
        by chunk would not lower the run's peak memory)."""
        self.served.pack()
        if self.rows:
            chunk = mmap.mmap(-1, len(self.rows))
            chunk[:] = self.rows
            self.chunks.append(chunk)
            self.rows = bytearray()

    def take_arrivals(self, now, waiting, make_seq, reject_reason=None) -> float:
        """Queue the requests due by ``now`` (``make_seq(request, arrival)``); reject those the pool
        can never hold (``allocator.never_fits``) or, if given, for which ``reject_reason(request)``
        names a reason. Returns the next arrival still to come (infinity: none)."""
        keys, pending, n, due = self.keys, self.pending, self.n, now + self.tol
        never_fits = self.allocator.never_fits
        while self.next < n and keys[self.next] <= due:
            req = pending[self.next]
            self.next += 1
            reason = never_fits(req.prompt_len, req.output_len)
            if reason is None and reject_reason is not None:
                reason = reject_reason(req)
            if reason:
                self.rejected.append({"id": req.id, "reason": reason, "arrival_step": req.arrival_step})
            else:
                waiting.append(make_seq(req, keys[self.next - 1]))
        return keys[self.next] if self.next < n else math.inf

    def skip_idle_gap(self, t, now) -> tuple:
        """Nothing runs or waits at step ``t`` (clock ``now``) and the next request arrives later:
        record the stretch up to it as one record, picture the pool as the last step left it (only
        blocks the prefix cache keeps can be in it) and return the clock at the arrival: (t, now)."""
        arrival, allocator = self.keys[self.next], self.allocator
        self.record(step=t, span=1 if self.timed else arrival - t, logical_tokens=0, holders=0, running=0,
                    waiting=0, finished=self.finished, preemptions=0, next_need=0, recomputed_tokens=0,
                    admitted=0, prefill_tokens=0, prefill_pairs=0, decode_pairs=0, final=0)
        if self.pictures is not None:
            self.pictures.keep(t, allocator.snapshot({}) if allocator.cached_blocks else ())
        if self.timed:
            self.seconds.append(arrival - now)
            return t + 1, now + (arrival - now)
        return arrival, arrival

    def record(self, *, step: int, span: int, logical_tokens: int, holders: int, running: int, waiting: int,
               finished: int, preemptions: int, next_need: int, recomputed_tokens: int, admitted: int,
               prefill_tokens: int, prefill_pairs: int, decode_pairs: int, final: int,
               prefix_hit_tokens: int = 0, prompt_tokens_admitted: int = 0, tokens: int = 0) -> None:
        """Write one record: the scheduler's counters, by name -- :class:`StepRecord`'s fields, then
        the cache counters (:data:`CACHE_STEP_COLUMNS`, written only in a run with prefix caching)
        and ``tokens`` (tokens emitted; written only where ``names`` has the column: the v1
        scheduler's) -- then the pool as the step left it (:class:`PoolRecord`; ``next_need``
        decides what counts as external fragmentation). Blocks swapped and cached blocks evicted
        are counted since the last record: in this step (a gap moves none). A sliding-window pool
        (``allocator.memory.sliding_window``) stores fewer tokens than its sequences hold: its
        ``logical_tokens`` and ``final`` are replaced by the slots that hold a token and will
        (``stored_counts``), so the pool's shares still partition it.

        Keywords, not a :class:`StepRecord`: a record is written every busy step, and building the
        named tuple first cost about 1 us a step (15 % of a 10,000-request Azure run); a keyword
        call costs what a positional tuple did. ``tests/core/test_engine.py`` holds these keywords
        to :data:`STEP_COLUMNS` and the packing order below to them.
        """
        a = self.allocator
        if self._windowed:
            logical_tokens, final = a.stored_counts(logical_tokens, final)
        if self._plain:                        # the paged allocator without swap or prefix cache: most runs
            units = self._num_blocks - self._pool.num_free
            self.rows += self._pack(step, span, logical_tokens, holders, running, waiting, finished, preemptions,
                                    next_need, recomputed_tokens, admitted, prefill_tokens, prefill_pairs,
                                    decode_pairs, final,
                                    a.shared_saving, units * self._bs, self._remainder, units, a.never_written, 0)
            return
        if self._fast:
            units = self._num_blocks - self._pool.num_free
            allocated, ext = units * self._bs, self._remainder
        else:
            units, allocated, ext = a.units_in_use, a.allocated_slots, a.external_fragmentation(next_need)
        if self._bare:                         # another allocator (reservations) without swap: the same columns
            self.rows += self._pack(step, span, logical_tokens, holders, running, waiting, finished, preemptions,
                                    next_need, recomputed_tokens, admitted, prefill_tokens, prefill_pairs,
                                    decode_pairs, final,
                                    a.shared_saving, allocated, ext, units, a.never_written, 0)
            return
        counters = (step, span, logical_tokens, holders, running, waiting, finished, preemptions, next_need,
                    recomputed_tokens, admitted, prefill_tokens, prefill_pairs, decode_pairs, final)
        if self.caching:
            counters += (prefix_hit_tokens, prompt_tokens_admitted)
        if self._tokens:
            counters += (tokens,)
        if self._swaps:
            total = a.swap_traffic
            self.swapped = swapped = total - self._swap_total
            self._swap_total = total
        else:
            swapped = 0
        if self.caching:
            evicted, self._evicted_total = a.cache_evictions - self._evicted_total, a.cache_evictions
            self.rows += self._pack(*counters, a.shared_saving, allocated, ext, units, a.never_written, swapped,
                                    a.cached_blocks, evicted)
        else:
            self.rows += self._pack(*counters, a.shared_saving, allocated, ext, units, a.never_written, swapped)

    def record_plain(self, step: int, logical_tokens: int, holders: int, running: int, waiting: int, finished: int,
                     preemptions: int, next_need: int, recomputed_tokens: int, admitted: int, prefill_tokens: int,
                     prefill_pairs: int, decode_pairs: int, final: int) -> None:
        """:meth:`record` of a busy step (span 1) in a run whose records are ``plain`` (the paged
        allocator without swap, prefix cache, tokens column or sliding window: most runs), its
        counters positional in :class:`StepRecord`'s order without ``span``. The same bytes as
        :meth:`record` (``tests/core/test_engine.py`` holds them equal); a keyword call of 15
        counters cost about 0.5 us a step, a tenth of a 96,830-request Azure run."""
        units = self._num_blocks - self._pool.num_free
        a = self.allocator
        self.rows += self._pack(step, 1, logical_tokens, holders, running, waiting, finished, preemptions, next_need,
                                recomputed_tokens, admitted, prefill_tokens, prefill_pairs, decode_pairs, final,
                                a.shared_saving, units * self._bs, self._remainder, units, a.never_written, 0)

    def picture_and_check(self, t: int, scheduler, check_invariants: bool) -> None:
        """Keep the pool's picture at busy step ``t`` (every ``stride`` steps) and, if asked, check
        the scheduler's and the allocator's bookkeeping (tests run with this)."""
        allocator, pictures = self.allocator, self.pictures
        take = pictures is not None and t % pictures.stride == 0
        if not (take or check_invariants):
            return                             # lengths are built only for a step that uses them
        lengths = scheduler.lengths(t) if check_invariants else None
        if take:
            if getattr(type(allocator), "snapshot", None) is PagedAllocator.snapshot:   # sized before built
                size = _paged_snapshot_bytes(allocator)
                pictures.take(t, size, lambda: allocator.snapshot(lengths if lengths is not None
                                                                  else scheduler.lengths(t)))
                if check_invariants and t in pictures.snapshots:
                    assert _snapshot_bytes(pictures.snapshots[t]) == size, "a picture's size was miscounted"
            else:
                pictures.keep(t, allocator.snapshot(lengths if lengths is not None else scheduler.lengths(t)))
        if check_invariants:
            scheduler.check_invariants(lengths, t)
            allocator.check_invariants(lengths)


#: Busy steps between two calls of a progress report (:func:`progress_reports`), and between two
#: chunks of records (:meth:`Run.roll`).
PROGRESS_EVERY = 20_000
_progress = threading.local()


@contextmanager
def progress_reports(report):
    """Within the block, every run of this thread's engine loop calls ``report(finished, total, step)``
    about every :data:`PROGRESS_EVERY` busy steps (requests finished or rejected so far, requests in
    the workload, the engine step reached), so a long run can say it is alive (the CLI's progress line
    on stderr). Reports change nothing the run computes."""
    before = getattr(_progress, "report", None)
    _progress.report = report
    try:
        yield
    finally:
        _progress.report = before


def drive(run: Run, scheduler, *, stop_s: float | None = None, check_invariants: bool = False) -> Run:
    """The engine's loop, for either scheduler: until every request has finished or been rejected
    (or, on the seconds clock, the clock has reached ``stop_s``), skip an idle gap, queue the
    arrivals, and run one busy step (``scheduler.step``: serve, admit, compute, finish, record)."""
    waiting, running, step = scheduler.waiting, scheduler.running, scheduler.step
    keys, n, tol, timed, rejected = run.keys, run.n, run.tol, run.timed, run.rejected
    look = run.pictures is not None or check_invariants
    price, seconds = run.step_seconds, run.seconds
    grow_at, finish_at = getattr(scheduler, "grow_at", None), getattr(scheduler, "finish_at", None)
    # stretches of decode-only steps are written out (_quiet_stretch) where a record holds nothing else
    # (the v1 scheduler's records add a tokens column, and it says when its next step is decodes alone)
    quiet = (getattr(scheduler, "quiet_stretches", False) and not look and not run._swaps and not run._windowed
             and not run.caching and len(run.names) == len(STEP_COLUMNS) + len(POOL_COLUMNS) + run._tokens)
    quiet_ok = getattr(scheduler, "quiet_ok", None)
    busy, busy_limit = 0, scheduler.busy_limit
    report = getattr(_progress, "report", None)
    next_report = PROGRESS_EVERY               # report (if asked) and start a new chunk of records
    t, now = 0, 0.0 if timed else 0           # the step, and the clock (the step, or seconds)
    arrival = keys[0] if n else math.inf      # the next arrival
    while run.finished + len(rejected) < n:
        if stop_s is not None and timed and now >= stop_s:
            break
        if not timed:
            now = t
        if not running and not waiting and arrival > now + tol:
            t, now = run.skip_idle_gap(t, now)
        if arrival <= now + tol:
            arrival = run.take_arrivals(now, waiting, scheduler.new_seq, scheduler.reject_reason)
        if not running and not waiting:
            continue                           # every arrival was rejected: nothing happens at t
        work = step(t)                         # serve, admit, compute, finish, record
        if timed:                              # the step's seconds (written out here: it runs every step)
            dt = price(*work, run.swapped)
            seconds.append(dt)
            now += dt
        if look:
            run.picture_and_check(t, scheduler, check_invariants)
        busy += 1
        if busy >= next_report:                # a long run says it is alive (progress_reports)
            if report is not None:
                report(run.finished + len(rejected), n, t)
            run.roll()
            next_report = busy + PROGRESS_EVERY
        if busy > busy_limit:                  # a bug guard: a fault shows as an error, not a hang
            raise RuntimeError(f"{scheduler.name} did not drain within {busy_limit} busy steps "
                               f"({run.allocator.label})")
        t += 1
        if quiet and not waiting and running and t not in finish_at and t not in grow_at \
                and (quiet_ok is None or quiet_ok()):
            end = min(finish_at) if finish_at else t
            if grow_at:
                end = min(end, min(grow_at))
            if end > t + 1:                    # at least two quiet steps: worth the set-up
                t, now, busy = _quiet_stretch(run, scheduler, t, end, now, arrival, stop_s, busy)
    return run


def _quiet_stretch(run: Run, scheduler, t: int, end: int, now, arrival, stop_s, busy: int) -> tuple:
    """Steps ``t`` .. ``end - 1`` of a stretch in which nothing but decoding happens: no sequence
    waits, none grows or finishes before ``end`` (the scheduler's next event), so every step records
    the same pool and the same counters but three (the step, the tokens held, the decode pairs),
    written out here without the scheduler's ``step`` (the classroom's, or the v1 scheduler's when its
    ``quiet_ok`` says every running sequence decodes within the budget; its tokens column is the batch). Stops early, as the loop would, at a
    step an arrival is due or the clock has reached ``stop_s``; returns (t, now, busy) for the loop.
    Only for runs whose records carry nothing else (no swap, no prefix cache, no pictures, no
    checks: :func:`drive` decides); ``tests/core/test_engine_digests.py`` holds every record to the
    step-by-step loop's."""
    timed, tol, price, seconds, pack = run.timed, run.tol, run.step_seconds, run.seconds, _STEP_PACK.pack
    rows = run.rows                            # (empty just after a roll: the last record ends the last chunk)
    pool = bytes((rows or run.chunks[-1])[-_POOL_BYTES:])   # the pool as the last busy step left it (need 0)
    if run._tokens:                            # the v1 scheduler's tokens column: every decode emits one
        pool = struct.pack("<q", len(scheduler.running)) + pool
    batch, base_sum = len(scheduler.running), scheduler.base_sum
    # Every step of the stretch records these counters (StepRecord's, by the same names), but for its
    # step and the tokens held (= decode pairs). Packed in StepRecord's order, as Run.record packs them:
    # building a StepRecord per stretch cost 5 % of a reservation run, whose stretches are ~2 steps.
    holders = running = batch
    finished, final = run.finished, scheduler.final_sum
    span, waiting, preemptions, next_need, recomputed_tokens, admitted, prefill_tokens, prefill_pairs = (
        1, 0, 0, 0, 0, 0, 0, 0)
    if busy + (end - t) > scheduler.busy_limit:
        end = t + max(0, scheduler.busy_limit - busy)      # the loop's own guard then names the fault
    while t < end:
        if stop_s is not None and timed and now >= stop_s:
            break
        if not timed:
            now = t
        if arrival <= now + tol:
            break
        logical_tokens = decode_pairs = base_sum + batch * t   # each decode attends to all it holds
        rows += pack(t, span, logical_tokens, holders, running, waiting, finished, preemptions, next_need,
                     recomputed_tokens, admitted, prefill_tokens, prefill_pairs, decode_pairs, final)
        rows += pool
        if timed:
            dt = price(0, 0, batch, decode_pairs, 0)
            seconds.append(dt)
            now += dt
        busy += 1
        t += 1
    return t, now, busy
