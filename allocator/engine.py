"""The discrete-step serving engine every page shares (DESIGN.md, "Simulation semantics").

One call to ``simulate`` runs a workload against one allocator:

1. Arrivals: requests with arrival_step <= t join the waiting queue (FCFS, ties by id).
2. Admission: while the queue's head fits, admit it; stop at the first that does not.
3. Compute: admitted requests prefill and emit their first token; running ones emit one token.
   A sequence whose memory cannot grow preempts the running sequence admitted last (recompute:
   its memory is freed, it returns to the head of the queue, and on re-admission its prompt and
   the tokens it had generated are prefilled again).
4. Finish: a request that has emitted output_len tokens frees its memory.
5. Record: per-step metrics and a snapshot of the pool.

A request that can never fit is rejected on arrival with a reason and never retried.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .allocators import EMPTY, FREE, HOLE, SHARED, TOKEN, PagedAllocator, ReserveMaxAllocator
from .workload import Workload

#: Most memory the pool pictures of one run may take (bytes); past it, every other one is dropped.
SNAPSHOT_BUDGET_BYTES = 64 * 2**20

#: Per-step metric names, all recorded after step 5 (units: slots unless stated).
METRICS = (
    "used_slots",             # distinct slots holding a token (a shared prefix counts once)
    "logical_tokens",         # tokens the running sequences hold, counting a shared prefix per sequence
    "allocated_unshared",     # slots the block tables would need if nothing were shared
    "allocated_slots",        # slots held by some sequence
    "internal_fragmentation", # allocated - used: allocated slots holding no token
    "external_fragmentation", # free slots that cannot serve the next request
    "free_slots",             # total - allocated
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
)


class _Seq:
    __slots__ = ("id", "prompt_len", "output_len", "generated", "context_len")

    def __init__(self, req):
        self.id = req.id
        self.prompt_len = req.prompt_len
        self.output_len = req.output_len
        self.generated = 0
        self.context_len = req.prompt_len


@dataclass
class SimulationResult:
    """What one simulation returns; pages render it, the CLI prints ``summary``.

    Attributes:
        kind: "reserve_max" or "paged".
        label: display name of the allocator.
        workload: name of the workload.
        total_slots: pool size in slots.
        block_size: slots per block (None for reserve-max).
        metrics: per-step arrays, one entry per name in ``METRICS``, each of shape [steps].
        snapshots: {step: pool picture} (see the allocator's ``snapshot``), or None when
            snapshots were not recorded. Every ``snapshot_stride``-th step is kept (1 unless the
            pictures would exceed ``SNAPSHOT_BUDGET_BYTES``; the stride doubles until they fit).
        snapshot_stride: steps between kept snapshots (a power of two).
        rejected: list of {"id", "reason"} for requests that can never fit.
        summary: steps, peak_running, mean_utilization_busy, mean_utilization, preemptions,
            mean_tokens_per_step, finished, rejected (and a few more; see ``summarize``).
    """

    kind: str
    label: str
    workload: str
    total_slots: int
    block_size: int | None
    metrics: dict
    snapshots: list | None
    rejected: list
    summary: dict = field(default_factory=dict)
    snapshot_stride: int = 1
    shared_prefix: int = 0
    preemption: str | None = None

    @property
    def steps(self) -> int:
        """Number of steps simulated (step 0 to the step the last request finished)."""
        return len(self.metrics["used_slots"])

    def busy_mask(self) -> np.ndarray:
        """Boolean [steps]: True on steps whose waiting queue was non-empty after admission."""
        return self.metrics["waiting"] > 0

    def busy_or_all_mask(self) -> np.ndarray:
        """``busy_mask``, or every step when the queue was never non-empty (nothing ever waited)."""
        mask = self.busy_mask()
        return mask if mask.any() else np.ones(self.steps, dtype=bool)

    def total_cost(self, metadata_cost: float) -> np.ndarray:
        """Per-step allocated slots + c x units (blocks or reservations), in slot equivalents [steps].

        Source: the metadata-cost objective of seed 001 (001_b60e659497b44204.txt).
        """
        return self.metrics["allocated_slots"] + float(metadata_cost) * self.metrics["units"]

    def cost_per_token_busy(self, metadata_cost: float) -> float | None:
        """Mean over busy steps (all steps if none) of total cost / tokens stored: slot equivalents
        paid per stored token (1.0 = no waste, no metadata). None when nothing was ever stored.

        Source: seed 001's objective (allocated + c x blocks), divided by the useful tokens so
        allocators that store different amounts compare fairly.
        """
        mask = self.busy_or_all_mask()
        used = self.metrics["used_slots"][mask]
        ok = used > 0
        if not ok.any():
            return None
        return float((self.total_cost(metadata_cost)[mask][ok] / used[ok]).mean())

    def slot_states(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """The pool at ``step``, slot by slot.

        Returns:
            owner: int32 [total_slots], the request id holding each slot or -1.
            state: int8 [total_slots], FREE, TOKEN, EMPTY, HOLE or SHARED (a token in a block
                that several sequences' block tables point at; see ``allocator.allocators``).

        Raises:
            ValueError: snapshots were not recorded, or ``step`` is outside 0..steps-1.
        """
        if self.snapshots is None:
            raise ValueError("this result was simulated without snapshots")
        if not 0 <= step < self.steps:
            raise ValueError(f"step must be in 0..{self.steps - 1}, got {step}")
        if step not in self.snapshots:
            raise ValueError(f"step {step} was not recorded (snapshots every {self.snapshot_stride} steps)")
        owner = np.full(self.total_slots, -1, dtype=np.int32)
        state = np.zeros(self.total_slots, dtype=np.int8)
        snap = self.snapshots[step]
        if self.kind == "paged":
            bs = self.block_size
            block_owner, block_fill, refcount = (np.asarray(a, dtype=np.int32) for a in snap)
            nb = len(block_owner)
            owner[: nb * bs] = np.repeat(block_owner, bs)
            pos = np.tile(np.arange(bs, dtype=np.int32), nb)
            fill = np.repeat(block_fill.astype(np.int32), bs)
            held = owner[: nb * bs] >= 0
            token = np.where(np.repeat(refcount > 1, bs), SHARED, TOKEN)
            state[: nb * bs] = np.where(held, np.where(pos < fill, token, EMPTY), FREE)
            state[nb * bs:] = HOLE
        else:
            need = int(self.metrics["next_need"][step])
            pos = 0
            for seq_id, start, length, used in snap:
                if need and 0 < start - pos < need:
                    state[pos:start] = HOLE
                owner[start:start + length] = seq_id
                state[start:start + used] = TOKEN
                state[start + used:start + length] = EMPTY
                pos = start + length
            if need and 0 < self.total_slots - pos < need:
                state[pos:] = HOLE
        return owner, state


def simulate(workload: Workload, allocator, *, record_snapshots: bool = True,
             check_invariants: bool = False) -> SimulationResult:
    """Run ``workload`` against ``allocator`` step by step until every request finishes or is rejected.

    Args:
        workload: the requests (lengths in tokens, arrivals in steps).
        allocator: a ``ReserveMaxAllocator`` or ``PagedAllocator``; it is reset first, so one
            instance can be reused. A reserve-max allocator must use max_new_tokens >= every
            request's output_len.
        record_snapshots: keep a picture of the pool at every step (needed for memory maps).
        check_invariants: after every step, assert the allocator's bookkeeping (tests use this).

    Returns:
        SimulationResult with per-step metrics, snapshots and summary.

    Raises:
        ValueError: an output_len larger than the reserve-max allocator's max_new_tokens.
        RuntimeError: the loop ran past a bound it can never legitimately reach (a bug guard,
            so a fault shows as an error rather than a hang).
    """
    if isinstance(allocator, ReserveMaxAllocator):
        for r in workload.requests:
            if r.output_len > allocator.max_new_tokens:
                raise ValueError(f"request {r.id}: output_len {r.output_len} exceeds the allocator's "
                                 f"max_new_tokens {allocator.max_new_tokens}")
    allocator.reset(shared_prefix=workload.shared_prefix)
    pending = sorted(workload.requests, key=lambda r: (r.arrival_step, r.id))
    n = len(pending)
    max_steps = (pending[-1].arrival_step + sum(r.output_len for r in pending) + n + 16) * 2
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    lengths: dict[int, int] = {}
    rejected: list[dict] = []
    rec = {name: [] for name in METRICS}
    snapshots = {} if record_snapshots else None
    stride, snap_bytes = 1, 0
    total = allocator.total_slots
    try_admit, grow, free = allocator.try_admit, allocator.grow, allocator.free
    preempt = allocator.preempt
    recompute_pending: set[int] = set()        # preempted by recompute, not yet re-admitted
    need_of = allocator.admission_need
    ptr = finished = 0
    t = 0
    while finished + len(rejected) < n:
        if t >= max_steps:
            raise RuntimeError(f"simulation did not drain within {max_steps} steps ({allocator.label})")
        # 1. arrivals
        while ptr < n and pending[ptr].arrival_step <= t:
            req = pending[ptr]
            ptr += 1
            reason = allocator.never_fits(req.prompt_len, req.output_len)
            if reason:
                rejected.append({"id": req.id, "reason": reason})
            else:
                waiting.append(_Seq(req))
        # 2. admission (FCFS, no skipping)
        n_old = len(running)
        recomputed = 0
        swapped_before = getattr(allocator, "swapped_out", 0) + getattr(allocator, "swapped_in", 0)
        while waiting:
            s = waiting[0]
            if not try_admit(s.id, s.prompt_len, s.context_len):
                break
            waiting.popleft()
            running.append(s)
            if s.id in recompute_pending:
                recompute_pending.discard(s.id)
                recomputed += s.context_len
        # 3. compute: sequences already running grow by one token (oldest first); a sequence
        #    that cannot get memory preempts the youngest running sequence, possibly itself.
        preempted = 0
        i = 0
        while i < n_old and i < len(running):
            s = running[i]
            new_len = s.context_len + 1
            while not grow(s.id, new_len):
                victim = running.pop()
                if preempt(victim.id) == "recompute":
                    recompute_pending.add(victim.id)
                lengths.pop(victim.id, None)
                victim.context_len = victim.prompt_len + victim.generated
                waiting.appendleft(victim)
                preempted += 1
                if victim is s:
                    break
                if len(running) <= n_old:
                    n_old = len(running)
            else:
                s.context_len = new_len
                s.generated += 1
            i += 1
        # newly admitted sequences (those not preempted above) prefill and emit their first token:
        # their admission already made room for context_len + 1 tokens.
        for s in running[n_old:]:
            s.context_len += 1
            s.generated += 1
        tokens = 0
        still = []
        for s in running:
            tokens += 1
            if s.generated >= s.output_len:
                free(s.id)
                lengths.pop(s.id, None)
                finished += 1
            else:
                still.append(s)
                lengths[s.id] = s.context_len
        running = still
        # 5. record
        logical = sum(lengths.values())
        saving = getattr(allocator, "shared_saving", 0)
        used = logical - saving
        allocated = allocator.allocated_slots
        need = need_of(waiting[0].prompt_len, waiting[0].context_len) if waiting else 0
        rec["used_slots"].append(used)
        rec["logical_tokens"].append(logical)
        rec["allocated_unshared"].append(allocated + saving)
        rec["allocated_slots"].append(allocated)
        rec["internal_fragmentation"].append(allocated - used)
        rec["external_fragmentation"].append(allocator.external_fragmentation(need))
        rec["free_slots"].append(total - allocated)
        rec["running"].append(tokens)
        rec["waiting"].append(len(waiting))
        rec["finished"].append(finished)
        rec["tokens"].append(tokens)
        rec["preemptions"].append(preempted)
        rec["units"].append(allocator.units_in_use)
        rec["next_need"].append(need)
        rec["swapped_blocks"].append(getattr(allocator, "swapped_out", 0) + getattr(allocator, "swapped_in", 0)
                                     - swapped_before)
        rec["recomputed_tokens"].append(recomputed)
        if snapshots is not None and t % stride == 0:
            snap = allocator.snapshot(lengths)
            snapshots[t] = snap
            snap_bytes += _nbytes(snap)
            while snap_bytes > SNAPSHOT_BUDGET_BYTES and len(snapshots) > 2:
                stride *= 2
                for k in [k for k in snapshots if k % stride]:
                    snap_bytes -= _nbytes(snapshots.pop(k))
        if check_invariants:
            _check(allocator, lengths, running)
        t += 1
    metrics = {k: np.asarray(v, dtype=np.int64) for k, v in rec.items() if k != "utilization"}
    metrics["utilization"] = metrics["used_slots"] / float(total)
    result = SimulationResult(kind=allocator.kind, label=allocator.label, workload=workload.name,
                              total_slots=total, block_size=allocator.block_size, metrics=metrics,
                              snapshots=snapshots, rejected=rejected, snapshot_stride=stride,
                              shared_prefix=workload.shared_prefix,
                              preemption=getattr(allocator, "preemption", None))
    result.summary = summarize(result)
    return result


def _nbytes(snap) -> int:
    """Approximate memory of one pool picture (a list of ints costs a pointer per entry)."""
    if isinstance(snap, tuple):
        return sum(8 * len(a) for a in snap)
    return snap.nbytes


def _check(allocator, lengths: dict, running: list) -> None:
    """Invariants after a step (used by tests through ``check_invariants=True``)."""
    assert set(lengths) == {s.id for s in running}
    if isinstance(allocator, PagedAllocator):
        allocator.check_invariants(lengths)
    else:
        pos = 0
        held = 0
        for start, length, seq_id in allocator._starts:
            assert start >= pos, f"reservations overlap at slot {start}"
            assert lengths[seq_id] <= length, f"seq {seq_id} holds more tokens than it reserved"
            pos = start + length
            held += length
        assert pos <= allocator.total_slots
        assert held == allocator.allocated_slots
        assert len(allocator._starts) == len(lengths)


def summarize(result: SimulationResult) -> dict:
    """Summary figures of a run (JSON-ready).

    Keys: steps, peak_running, mean_utilization_busy (mean of used/total over steps whose
    waiting queue was non-empty; None if there were none), mean_utilization (all steps),
    preemptions (total), mean_tokens_per_step, finished, rejected (list of {id, reason}),
    total_slots, block_size, peak_utilization, mean_internal_fragmentation_busy and
    mean_external_fragmentation_busy (fractions of the pool over busy steps; None if none),
    shared_prefix (tokens), peak_logical_tokens with its step (peak_logical_step) and the distinct
    physical slots holding them at that same step (used_slots_at_peak_logical: they differ only
    when a prefix is shared), peak_used_slots (the peak of distinct slots, at its own step), the
    busy means of logical tokens and used slots,
    preemption_mode, swapped_blocks (moved out + in) and recomputed_tokens (prefilled again).
    """
    m = result.metrics
    busy = result.busy_mask()
    total = float(result.total_slots)

    def busy_mean(arr):
        return round(float(arr[busy].mean()), 6) if busy.any() else None

    return {
        "steps": result.steps,
        "peak_running": int(m["running"].max()) if result.steps else 0,
        "mean_utilization_busy": busy_mean(m["utilization"]),
        "mean_utilization": round(float(m["utilization"].mean()), 6) if result.steps else 0.0,
        "preemptions": int(m["preemptions"].sum()),
        "mean_tokens_per_step": round(float(m["tokens"].mean()), 4) if result.steps else 0.0,
        "finished": int(m["finished"][-1]) if result.steps else 0,
        "rejected": list(result.rejected),
        "total_slots": result.total_slots,
        "block_size": result.block_size,
        "peak_utilization": round(float(m["utilization"].max()), 6) if result.steps else 0.0,
        "mean_internal_fragmentation_busy": busy_mean(m["internal_fragmentation"] / total),
        "mean_external_fragmentation_busy": busy_mean(m["external_fragmentation"] / total),
        "shared_prefix": result.shared_prefix,
        "peak_logical_tokens": int(m["logical_tokens"].max()) if result.steps else 0,
        "peak_logical_step": int(m["logical_tokens"].argmax()) if result.steps else 0,
        "used_slots_at_peak_logical": int(m["used_slots"][m["logical_tokens"].argmax()]) if result.steps else 0,
        "peak_used_slots": int(m["used_slots"].max()) if result.steps else 0,
        "mean_logical_tokens_busy": busy_mean(m["logical_tokens"].astype(float)),
        "mean_used_slots_busy": busy_mean(m["used_slots"].astype(float)),
        "preemption_mode": result.preemption,
        "swapped_blocks": int(m["swapped_blocks"].sum()),
        "recomputed_tokens": int(m["recomputed_tokens"].sum()),
    }
