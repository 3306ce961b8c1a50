"""What one simulation returns: the per-step metrics (their names and units), the result object
and its summary figures.

The engine's loops (``allocator/engine/classroom.py``, ``allocator/engine/v1.py``) write one row of
raw counters per record (``allocator/engine/loop.py``); :func:`build_result` turns the rows into the
metrics below and a :class:`SimulationResult`, whose ``summary`` :func:`summarize` computes from
those metrics (a :class:`allocator.engine.summary.RunSummary`). So a figure on screen is two
functions away from the counters it comes from, both here. Drawing a result (memory maps, slot
states) is ``allocator/viz/maps.py``'s job: this module knows nothing about pictures beyond
keeping them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from allocator.engine.loop import CACHE_COLUMNS, POOL_COLUMNS, STEP_COLUMNS, PoolRecord, Run, Served, StepRecord
from allocator.engine.shares import memory_shares
from allocator.engine.summary import RunSummary
from allocator.common.errors import FieldError
from allocator.common.validate import real_number
from allocator.workloads.requests import Workload

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
    "admitted",               # sequences admitted this step: each prefilled its context and emitted a token (count;
                              # one swapped back in is not counted: it decodes, its K/V copied back from host)
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
        snapshots: {record start step: pool picture} (see the allocator's ``snapshot``; drawn
            slot by slot by :func:`allocator.viz.maps.slot_states`), or None when snapshots were not
            recorded. Busy steps are kept when ``step % snapshot_stride
            == 0`` (the stride doubles past ``SNAPSHOT_BUDGET_BYTES``); idle gaps always are,
            unless their picture is not empty (blocks held only by the prefix cache) and the
            budget drops it like a busy step's.
        snapshot_stride: the stride (a power of two).
        rejected: list of {"id", "reason", "arrival_step"} for requests that can never fit.
        summary: the run's figures, :class:`allocator.engine.summary.RunSummary` (see :func:`summarize`).
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
        speculation: None, or for a run with speculative decoding (v1 rules,
            ``num_speculative_tokens`` > 0) {"num_speculative_tokens", "acceptance_rate",
            "spec_seed", "draft_tokens": drafts verified, "accepted_draft_tokens": drafts the
            verifier accepted and the answer kept (at its end, past the last token, none are)}
            (counts of tokens over the whole run).
        window: for a sliding-window or hybrid pool, its figures
            (``allocator.memory.sliding_window.WindowedPagedAllocator.window_stats``: the window, the
            groups, the bound and the peak blocks per sequence per windowed group, blocks released);
            None otherwise. Its slot figures then count slots of one KV-cache group.
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
    speculation: dict | None = None
    window: dict | None = None

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

        Source: the metadata-cost objective, ``assets/reference_figures.md`` section R2.
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

        Source: the objective of ``assets/reference_figures.md`` section R2 (allocated + c x
        blocks), divided by the useful tokens so
        allocators that store different amounts compare fairly.
        """
        mask = self.busy_mask() if busy else None
        if mask is not None and not mask.any():
            return None
        used = self.mean(self.metrics["used_slots"], mask)
        if not used:
            return None
        return self.mean(self.total_cost(metadata_cost), mask) / used


def build_result(workload: Workload, allocator, run: Run, clock) -> SimulationResult:
    """Turn a finished run's records into a :class:`SimulationResult` (both schedulers share it),
    with its per-request table (:func:`request_table`) and its summary (:func:`summarize`).

    ``run.chunks`` and ``run.rows`` hold each record's int64 columns packed in ``run.names`` order
    (one ``struct`` pack per record: far cheaper than one list append per column), read back here
    as one array per column (:func:`_columns`, which frees the run's rows as it goes): the scheduler's (:class:`allocator.engine.loop.StepRecord`) and the pool's
    (:class:`allocator.engine.loop.PoolRecord`); ``run.seconds`` the records' durations on the
    seconds clock (None on the step clock). A ``tokens`` column, when named, overrides the
    emitted-token count, which the classroom scheduler takes to be the batch (every running
    sequence emits one token per step); the v1 scheduler records its own, since a prefill chunk
    that does not finish its prompt emits none.
    """
    names, seconds, caching = run.names, run.seconds, run.caching
    snapshots = run.pictures.snapshots if run.pictures is not None else None
    timed = seconds is not None
    arr = _columns(run)                        # {name: int64 [records]}; the run's rows are freed
    # An idle stretch that only led up to arrivals which were all rejected is no part of the run:
    # the run ends with its last piece of work (the rejections keep their arrival steps).
    k = total_records = len(arr["step"])
    running, waiting, span, step = arr["running"], arr["waiting"], arr["span"], arr["step"]
    while k and running[k - 1] == 0 and waiting[k - 1] == 0 and (timed or span[k - 1] > 1):
        if snapshots is not None:
            snapshots.pop(int(step[k - 1]), None)
        k -= 1
    if k < total_records:                      # (rare) one column at a time, each its own array again
        for name in names:
            arr[name] = arr[name][:k].copy()
    steps = StepRecord._make(arr[name] for name in STEP_COLUMNS)    # [records] each, the scheduler's counters
    pool = PoolRecord._make(arr[name] for name in POOL_COLUMNS)     # [records] each, read from the allocator
    if not caching:                            # nothing was found, held or evicted by a cache
        for name in CACHE_COLUMNS:
            arr[name] = np.zeros(k, dtype=np.int64)
    if timed:
        arr["seconds"] = np.asarray(seconds[:k], dtype=np.float64)
    tokens = arr.get("tokens")
    total = allocator.total_slots
    # Every running sequence's prompt starts with the shared prefix (Workload checks it), so with
    # k running, k - 1 of the prefix copies are redundant: distinct tokens = logical - (k-1) x P.
    # Blocks shared through the prefix cache of a trace's prompts save their slots (``saving``);
    # a token equal to another sequence's but stored in an unshared block counts as distinct.
    stored = steps.logical_tokens - pool.saving              # slots holding a token, any copy
    if getattr(allocator, "windowed", False):
        # a sliding window releases the shared prompt's blocks as sequences move past it, so no holder is
        # assumed to keep a copy (its records already count only the tokens still stored): shared blocks
        # save their slots, the rest are distinct (allocator.memory.sliding_window)
        used = steps.logical_tokens - pool.saving
    else:
        used = steps.logical_tokens - np.maximum(np.maximum(steps.holders - 1, 0) * workload.shared_prefix,
                                                 pool.saving)
    allocated, unwritten = pool.allocated_slots, pool.internal_fragmentation
    derived = {
        "used_slots": used, "duplicate_slots": stored - used, "allocated_unshared": allocated + pool.saving,
        "reserved_slots": allocated - stored - unwritten, "free_slots": total - allocated,
        "free_other_slots": total - allocated - pool.external_fragmentation, "utilization": used / float(total),
        "tokens": steps.running.copy() if tokens is None else tokens,
        "pending_tokens": steps.final - steps.logical_tokens,
    }
    # every other metric is recorded under its own name
    metrics = {"step": arr["step"], "span": arr["span"],
               **{name: derived[name] if name in derived else arr[name] for name in METRICS}}
    if timed:
        metrics["seconds"] = arr["seconds"]
    result = SimulationResult(kind=allocator.kind, label=allocator.label, workload=workload.name,
                              total_slots=total, block_size=allocator.block_size, metrics=metrics,
                              snapshots=snapshots, rejected=run.rejected,
                              snapshot_stride=run.pictures.stride if run.pictures is not None else 1,
                              shared_prefix=workload.shared_prefix, preemption=allocator.preemption,
                              requests=request_table(run.served, workload, timed), clock=clock,
                              prefix_caching=allocator.prefix_caching)
    # the columns no metric keeps (holders, final, saving) and the stored-slots temporary are freed
    # before the summary's temporaries are made (a million requests: 116 MB off the peak)
    del arr, steps, pool, stored
    result.summary = summarize(result)
    return result


def _columns(run: Run) -> dict:
    """{name: int64 array [records]} for each of ``run.names``, read from the run's packed records
    (``run.chunks`` then ``run.rows``), which are handed over and freed chunk by chunk as they are
    copied: a run's records are never held twice (a million requests: 3.6 M records, 600 MB).

    The arrays start as ``np.zeros`` (memory the system hands out zeroed and maps only when
    written) and a chunk's stretch of a column is copied only when it is not all zero, so a column
    that stays zero (swapped blocks without swap, waiting when nobody waits) takes no memory.
    """
    chunks = run.chunks + [run.rows] if run.rows else run.chunks
    run.chunks, run.rows = [], bytearray()     # the only references left are this function's
    width = len(run.names)
    n = sum(len(c) for c in chunks) // (8 * width)
    cols = [np.zeros(n, dtype=np.int64) for _ in run.names]
    start = 0
    chunks.reverse()                           # popped from the end: oldest first
    while chunks:
        chunk = chunks.pop()
        table = np.frombuffer(chunk, dtype="<i8").reshape(-1, width)
        end = start + len(table)
        for i, written in enumerate(table.any(axis=0).tolist()):
            if written:                        # (a stretch of zeros is left unwritten)
                cols[i][start:end] = table[:, i]
        start = end
        del table, chunk                       # the chunk is freed here
    return dict(zip(run.names, cols))


def summarize(result: SimulationResult) -> RunSummary:
    """Summary figures of a run (:class:`allocator.engine.summary.RunSummary` gives each field and
    its unit): busy and all-steps means of the per-step metrics, totals and peaks.

    Rounding (part of the CLI's JSON): busy means and utilisations to 6 places, the all-steps
    means of running, tokens and cached blocks to 4.

    With prefix caching, ``prefix_cache_hit_rate`` counts each request at its first admission
    (None if none was admitted); a re-admission after recompute that finds its own blocks still
    cached saves prefill too, which the cost model sees but ``prefill_tokens_saved`` does not count.
    """
    m = result.metrics
    busy = result.busy_mask()
    total = float(result.total_slots)
    has = result.records > 0

    def busy_mean(arr):
        value = result.mean(arr, busy) if busy.any() else None
        return None if value is None else round(value, 6)

    def total_of(name):
        return int((m[name] * m["span"]).sum())

    peak = int(m["logical_tokens"].argmax()) if has else 0
    extra = {}
    if result.prefix_caching:
        hit, prompt = total_of("prefix_hit_tokens"), total_of("prompt_tokens_admitted")
        extra = dict(
            prefix_cache_hit_rate=round(hit / prompt, 6) if prompt else None,
            prefill_tokens_saved=hit, prompt_tokens_admitted=prompt,
            cached_block_evictions=total_of("cached_evictions"),
            peak_cached_blocks=int(m["cached_blocks"].max()) if has else 0,
            mean_cached_blocks=round(result.mean(m["cached_blocks"]), 4) if has else 0.0)
    return RunSummary(
        steps=result.steps,
        peak_running=int(m["running"].max()) if has else 0,
        peak_running_step=int(m["step"][int(m["running"].argmax())]) if has else 0,
        peak_running_steps=int(m["span"][m["running"] == m["running"].max()].sum()) if has else 0,
        mean_running_busy=busy_mean(m["running"]),
        mean_running=round(result.mean(m["running"]), 4) if has else 0.0,
        busy_steps=int((m["span"] * busy).sum()),
        mean_utilization_busy=busy_mean(m["utilization"]),
        mean_utilization=round(result.mean(m["utilization"]), 6) if has else 0.0,
        preemptions=total_of("preemptions"),
        mean_tokens_per_step=round(result.mean(m["tokens"]), 4) if has else 0.0,
        finished=int(m["finished"][-1]) if has else 0,
        rejected=list(result.rejected),
        total_slots=result.total_slots,
        block_size=result.block_size,
        peak_utilization=round(float(m["utilization"].max()), 6) if has else 0.0,
        mean_internal_fragmentation_busy=busy_mean(m["internal_fragmentation"] / total),
        mean_duplicate_fraction_busy=busy_mean(m["duplicate_slots"] / total),
        mean_external_fragmentation_busy=busy_mean(m["external_fragmentation"] / total),
        mean_reservation_busy=busy_mean(m["reserved_slots"] / total),
        memory_shares_busy=memory_shares(result, busy=True),
        memory_shares=memory_shares(result, busy=False),
        shared_prefix=result.shared_prefix,
        peak_logical_tokens=int(m["logical_tokens"][peak]) if has else 0,
        peak_logical_step=int(m["step"][peak]) if has else 0,
        used_slots_at_peak_logical=int(m["used_slots"][peak]) if has else 0,
        peak_used_slots=int(m["used_slots"].max()) if has else 0,
        mean_logical_tokens_busy=busy_mean(m["logical_tokens"]),
        mean_used_slots_busy=busy_mean(m["used_slots"]),
        preemption_mode=result.preemption,
        swapped_blocks=total_of("swapped_blocks"),
        recomputed_tokens=total_of("recomputed_tokens"),
        records=result.records,
        prefix_caching=bool(result.prefix_caching),
        **extra,
    )


def request_table(served: Served, workload: Workload, timed: bool) -> dict:
    """The finished requests as arrays sorted by id (see ``SimulationResult.requests``).

    Args:
        served: one row per finished request, ``(id, prompt_len, output_len, arrival (steps or
            seconds), first_token_step, finish_step)`` (:class:`allocator.engine.loop.Served`).
        workload: the run's workload (for each request's arrival step).
        timed: the run was on the seconds clock (adds ``arrival_s``, float64 seconds).

    Returns:
        {column: int64 array [finished]}: id, prompt_len, output_len (tokens), arrival_step,
        first_token_step, finish_step (engine steps), and ``arrival_s`` when ``timed``. Rows are
        in the order of their (id, prompt_len, output_len, arrival, first, finish) tuples, as
        sorting the tuples would put them.
    """
    rows = served.columns()
    rows = rows[np.lexsort([rows[name] for name in reversed(rows.dtype.names)])]
    ids = np.ascontiguousarray(rows["id"])
    # each finished request's arrival step, looked up by id in the workload (the last request of an id wins)
    req_ids = np.fromiter((r.id for r in workload.requests), dtype=np.int64, count=len(workload.requests))
    req_steps = np.fromiter((r.arrival_step for r in workload.requests), dtype=np.int64,
                            count=len(workload.requests))
    order = np.argsort(req_ids, kind="stable")
    at = np.searchsorted(req_ids[order], ids, side="right") - 1
    table = {
        "id": ids,
        "prompt_len": np.ascontiguousarray(rows["prompt_len"]),
        "output_len": np.ascontiguousarray(rows["output_len"]),
        "arrival_step": req_steps[order[at]] if len(ids) else np.zeros(0, dtype=np.int64),
        "first_token_step": np.ascontiguousarray(rows["first_token_step"]),
        "finish_step": np.ascontiguousarray(rows["finish_step"]),
    }
    if timed:
        table["arrival_s"] = np.ascontiguousarray(rows["arrival"])
    return table
