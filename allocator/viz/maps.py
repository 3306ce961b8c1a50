"""Memory maps: a pool snapshot as slots, which steps to show, what each map cell holds (numpy, no plotting).

Drawing a run happens here and only here: the engine records pool pictures (the allocators'
``snapshot``) and never imports this module; this module reads a
:class:`~allocator.engine.result.SimulationResult` and turns a picture into per-slot states.

A map cell is one slot when the pool is small enough to draw, otherwise a group of
``slots_per_cell`` consecutive slots shown by the state most of them are in. Pages turn these
arrays into Plotly heatmaps (``allocator/viz/explainer_chart.py``, colours from ``allocator/viz/theme.py``);
nothing here knows about colours.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError

if TYPE_CHECKING:                      # for annotations only: maps reads results, the engine never draws
    from allocator.engine.result import SimulationResult

#: Slot states of a memory map (small integers so a heatmap can colour them): free; holding a
#: token; allocated but holding nothing yet (EMPTY); free but unusable (HOLE: a gap between
#: reservations too small for the queue head, or a pool remainder that forms no block); a token
#: in a block several block tables share (SHARED, refcount > 1); a duplicate copy of a
#: shared-prompt token (DUPLICATE); free, in a block a sliding window released and nobody has taken
#: since (RELEASED: ``allocator.memory.sliding_window``). Their colours: ``allocator.viz.theme.STATE_COLOURS``.
FREE, TOKEN, EMPTY, HOLE, SHARED, DUPLICATE, RELEASED = 0, 1, 2, 3, 4, 5, 6

#: Most cells one map draws (per allocator). 2,048 slots draw one slot per cell.
MAX_CELLS = 2048


def slots_per_cell(total_slots: int, max_cells: int = MAX_CELLS, block_size: int | None = None) -> int:
    """Slots drawn by one cell so that a map has at most ``max_cells`` cells (>= 1).

    With a ``block_size``, cells line up with blocks: a cell is a divisor of a block when blocks
    are bigger than the minimum cell, else a whole number of blocks — so a large pool is drawn
    block by block rather than slot by slot.
    """
    if total_slots <= 0 or max_cells <= 0:
        raise ValueError("total_slots and max_cells must be positive")
    need = max(1, cdiv(total_slots, max_cells))
    if not block_size or need == 1:
        return need
    if block_size >= need:
        return next(d for d in range(need, block_size + 1) if block_size % d == 0)
    return round_up(need, block_size)


def grid_shape(n_cells: int) -> tuple[int, int]:
    """(rows, columns) for ``n_cells`` cells: 64 columns for a full 2,048-cell map, fewer for tiny pools."""
    cols = 64 if n_cells >= 256 else max(1, 2 ** math.ceil(math.log2(max(1, math.isqrt(n_cells * 2)))))
    cols = min(cols, max(1, n_cells))
    return cdiv(n_cells, cols), cols


def frame_steps(results, max_frames: int, include=()) -> np.ndarray:
    """Engine steps to draw as animation frames, shared by results drawn side by side.

    Candidates are the first steps of every record of any of the results (busy steps and the
    start of each idle gap), kept only where every result has a picture (multiples of the
    largest snapshot stride); at most ``max_frames`` of them are taken, evenly spaced *by record*
    rather than by step, so a long idle gap costs one frame, not most of them -- and every idle
    gap gets that one frame (up to a third of the frames), since evenly spaced picks would skip
    the few records that stand for whole stretches. The first and last candidates are included.

    Args:
        results: SimulationResults with snapshots (one or more).
        max_frames: most frames (>= 2).
        include: steps that must be frames as well (steps a text quotes), where they are candidates.

    Returns:
        int64 array of steps, ascending (at most ``max_frames`` plus the included steps).
    """
    results = list(results)
    stride = max(r.snapshot_stride for r in results)
    steps = np.unique(np.concatenate([r.metrics["step"] for r in results] + [np.zeros(1, np.int64)]))
    candidates = steps[steps % stride == 0]
    # Idle gaps are the records evenly spaced picks would skip (there are few of them): each gets
    # a frame at its first step, up to a third of the frames (spread evenly if there are more).
    idle = np.unique(np.concatenate([r.metrics["step"][r.metrics["span"] > 1] for r in results]
                                    + [np.zeros(0, np.int64)]))
    idle = np.intersect1d(idle, candidates)
    room = max(1, int(max_frames) // 3)
    if len(idle) > room:
        idle = idle[np.unique(np.linspace(0, len(idle) - 1, room).round().astype(np.int64))]
    others = np.setdiff1d(candidates, idle)
    k = max(2, min(int(max_frames) - len(idle), len(others)))
    picks = np.unique(np.linspace(0, len(others) - 1, k).round().astype(np.int64)) if len(others) else []
    wanted = np.intersect1d(np.asarray(list(include), dtype=np.int64), candidates)
    return np.union1d(np.union1d(others[picks], wanted), idle).astype(np.int64)


def cell_states(result: "SimulationResult", step: int, per_cell: int) -> tuple[np.ndarray, np.ndarray]:
    """The pool at ``step`` drawn as cells.

    Args:
        result: a simulation with snapshots.
        step: engine step; a step after the run drained shows the empty pool.
        per_cell: slots per cell (see ``slots_per_cell``).

    Returns:
        owner: int32 [n_cells], request id of the cell's majority-state slots (-1 none).
        state: int8 [n_cells], the majority state (FREE, TOKEN, EMPTY, HOLE, SHARED, DUPLICATE,
            RELEASED) of the cell's slots.
    """
    owner, state = slot_states(result, step) if step < result.steps else empty_picture(result)
    if per_cell == 1:
        return owner, state
    n_cells = cdiv(result.total_slots, per_cell)
    pad = n_cells * per_cell - result.total_slots
    owner = np.concatenate([owner, np.full(pad, -1, np.int32)]).reshape(n_cells, per_cell)
    state = np.concatenate([state, np.full(pad, FREE, np.int8)]).reshape(n_cells, per_cell)
    kinds = (FREE, TOKEN, EMPTY, HOLE, SHARED, DUPLICATE, RELEASED)
    counts = np.stack([(state == s).sum(axis=1) for s in kinds], axis=1)
    cell_state = np.array(kinds, dtype=np.int8)[counts.argmax(axis=1)]
    held = np.isin(cell_state, (TOKEN, EMPTY, SHARED, DUPLICATE))
    return np.where(held, owner.max(axis=1), -1).astype(np.int32), cell_state


def slot_states(result: "SimulationResult", step: int) -> tuple[np.ndarray, np.ndarray]:
    """The pool of ``result`` at ``step``, slot by slot (see :func:`slot_picture`).

    Returns:
        owner: int32 [total_slots], the request id holding each slot or -1.
        state: int8 [total_slots], FREE, TOKEN, EMPTY, HOLE, SHARED or DUPLICATE.

    Raises:
        FieldError: snapshots were not recorded (``snapshots``), ``step`` is outside
            0..steps-1, or its picture was thinned away (``step``).
    """
    if result.snapshots is None:
        raise FieldError("snapshots", ": this result was simulated without snapshots")
    r = result.record_index(step)
    start = int(result.metrics["step"][r])
    if start not in result.snapshots:
        raise FieldError("step", f" = {step} was not recorded (pictures every {result.snapshot_stride} steps)")
    return slot_picture(result.snapshots[start], result.total_slots, result.block_size,
                        int(result.metrics["next_need"][r]), result.shared_prefix)


def empty_picture(result: "SimulationResult") -> tuple[np.ndarray, np.ndarray]:
    """The pool of ``result`` with nothing in it (after the run drained): owner all -1, state FREE,
    with the remainder that forms no block drawn as a HOLE."""
    owner = np.full(result.total_slots, -1, dtype=np.int32)
    state = np.full(result.total_slots, FREE, dtype=np.int8)
    if result.block_size:
        state[(result.total_slots // result.block_size) * result.block_size:] = HOLE
    return owner, state


def slot_picture(snapshot, total_slots: int, block_size: int | None, need: int = 0,
                 shared_prefix: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A pool snapshot (see the allocators' ``snapshot``) as per-slot arrays.

    Args:
        snapshot: a reservation snapshot (tuple of (owner, start, reserved, tokens)) when
            ``block_size`` is None, else a paged one (tuple of (owner, tokens, block table), in
            admission order; a sliding-window pool's tables hold -1 for entries released behind the
            window, and an entry ``(-1, 0, blocks)`` lists the released blocks still free).
        total_slots: pool size in slots.
        block_size: slots per block, or None for a reservation pool.
        need: slots the queue head needed at that step (reservations: free runs shorter than
            this are drawn as holes, unless it needed more than all free slots together --
            then no placement could admit it, and free is drawn free).
        shared_prefix: tokens of the system prompt every request starts with (0: none). One copy
            of it is the real thing; every other copy is drawn DUPLICATE: each reservation's own
            copy after the lowest-addressed one, and, paged, the prompt tokens in the partly
            filled block that each sequence after the first (in admission order) holds privately.

    Returns:
        owner: int32 [total_slots], the request id holding each slot or -1 (for a shared block,
            the first sequence in admission order that points at it).
        state: int8 [total_slots], FREE, TOKEN, EMPTY, HOLE, SHARED (a token in a block that
            several block tables point at), DUPLICATE or RELEASED.
    """
    owner = np.full(total_slots, -1, dtype=np.int32)
    state = np.zeros(total_slots, dtype=np.int8)
    if block_size:
        bs = block_size
        nb = total_slots // bs
        block_owner = np.full(nb, -1, dtype=np.int32)
        block_fill = np.zeros(nb, dtype=np.int32)
        refs = np.zeros(nb, dtype=np.int32)
        released = [e[2] for e in snapshot if e[0] == -1]   # id -1: released behind a window, free
        snapshot = tuple(e for e in snapshot if e[0] > 0)   # id 0: blocks held only by a prefix cache (free)
        for sid, tokens, table in reversed(snapshot):     # earliest holder written last: it wins
            idx = np.asarray(table, dtype=np.int64)
            fills = np.full(len(idx), bs, dtype=np.int32)
            fills[-1] = tokens - (len(idx) - 1) * bs
            if len(idx) and idx[0] < 0:                    # entries released behind a window hold nothing
                live = idx >= 0
                idx, fills = idx[live], fills[live]
            block_owner[idx] = sid
            block_fill[idx] = np.maximum(block_fill[idx], fills)
            refs[idx] += 1
        owner[: nb * bs] = np.repeat(block_owner, bs)
        pos = np.tile(np.arange(bs, dtype=np.int32), nb)
        fill = np.repeat(block_fill, bs)
        held = owner[: nb * bs] >= 0
        token = np.where(np.repeat(refs > 1, bs), SHARED, TOKEN)
        state[: nb * bs] = np.where(held, np.where(pos < fill, token, EMPTY), FREE)
        state[nb * bs:] = HOLE
        for blocks in released:
            idx = np.asarray(blocks, dtype=np.int64)
            state[(idx[:, None] * bs + np.arange(bs)).ravel()] = RELEASED
        partial = shared_prefix % bs
        if partial:
            for _, _, table in snapshot[1:]:
                b = table[shared_prefix // bs]
                state[b * bs: b * bs + partial] = DUPLICATE
    else:
        if need > total_slots - sum(e[2] for e in snapshot):
            need = 0                 # more than all free slots together: shortage, not fragmentation
        pos = 0
        for i, (seq_id, start, length, used) in enumerate(snapshot):
            if need and 0 < start - pos < need:
                state[pos:start] = HOLE
            owner[start:start + length] = seq_id
            state[start:start + used] = TOKEN
            state[start + used:start + length] = EMPTY
            if i and shared_prefix:
                state[start:start + min(shared_prefix, used)] = DUPLICATE
            pos = start + length
        if need and 0 < total_slots - pos < need:
            state[pos:] = HOLE
    return owner, state


#: Block states of :func:`block_picture` (heatmap codes, one cell a block): free, and cached (held
#: only by the prefix cache) -- the block pool's "free" and "cached" (``allocator.memory.block_pool``) --
#: and its "in use" split by refcount: private (one block table) or shared (several).
#: Their colours and labels: ``allocator.viz.prefix``. Named ``MAP_`` apart from the block pool's
#: own state names (``allocator.memory.block_pool_queries.BLOCK_FREE`` is the string "free").
MAP_BLOCK_FREE, MAP_BLOCK_CACHED, MAP_BLOCK_PRIVATE, MAP_BLOCK_SHARED = 0, 1, 2, 3


def block_picture(snapshot, num_blocks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A paged snapshot as one cell per block (for pools too large to draw slot by slot).

    Args:
        snapshot: a paged allocator's snapshot (entries (seq_id, tokens, block table); an entry
            with id 0 lists blocks held only by the prefix cache).
        num_blocks: blocks in the pool.

    Returns:
        state: int8 [num_blocks], MAP_BLOCK_FREE, MAP_BLOCK_CACHED, MAP_BLOCK_PRIVATE or MAP_BLOCK_SHARED.
        owner: int32 [num_blocks], the first sequence (admission order) whose table lists the
            block, or -1.
        refs: int32 [num_blocks], block tables listing the block (its refcount).
    """
    state = np.full(num_blocks, MAP_BLOCK_FREE, dtype=np.int8)
    owner = np.full(num_blocks, -1, dtype=np.int32)
    refs = np.zeros(num_blocks, dtype=np.int32)
    for sid, _, table in reversed(snapshot):
        if sid < 0:                     # blocks released behind a sliding window: free
            continue
        idx = np.asarray(table, dtype=np.int64)
        idx = idx[idx >= 0]             # a sliding window's released entries
        if sid == 0:
            state[idx] = MAP_BLOCK_CACHED
            continue
        owner[idx] = sid
        np.add.at(refs, idx, 1)
    state[refs == 1] = MAP_BLOCK_PRIVATE
    state[refs > 1] = MAP_BLOCK_SHARED
    return state, owner, refs
