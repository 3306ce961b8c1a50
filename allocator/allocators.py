"""The two KV-cache allocators the lesson compares.

Both manage one pool of ``total_slots`` slots (a slot holds one token's K and V for every
layer). The engine (``allocator.engine.simulate``) drives them through a common interface:

* ``never_fits(prompt_len, output_len) -> str | None`` — why a request can never be served.
* ``admission_need(prompt_len, context_len) -> int`` — slots the queue head needs to be admitted.
* ``try_admit(seq_id, prompt_len, context_len) -> bool`` — allocate for admission, or refuse.
* ``grow(seq_id, new_len) -> bool`` — make room for a sequence that now holds ``new_len`` tokens.
* ``free(seq_id)`` — return everything the sequence holds (finish).
* ``preempt(seq_id) -> "recompute" | "swap"`` — evict a running sequence to make room.
* ``allocated_slots``, ``units_in_use`` (reservations or blocks), ``external_fragmentation(need)``.
* ``snapshot(lengths)`` — a compact picture of the pool for the memory map.

Sources: reserve-max is how pre-2023 engines such as FasterTransformer and Orca held the cache
(Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, section 3); the paged allocator follows the same paper's block
manager and vLLM's free-block queue (freed blocks go to the back, allocation takes the front).
"""
from __future__ import annotations

from bisect import insort
from collections import deque

import numpy as np

from .workload import _check_int

#: Slot states used by memory maps (small integers so a heatmap can colour them).
FREE, TOKEN, EMPTY, HOLE, SHARED = 0, 1, 2, 3, 4
STATE_NAMES = {FREE: "free", TOKEN: "holds a token", EMPTY: "allocated, empty", HOLE: "unusable hole",
               SHARED: "shared prefix token (refcount > 1)"}


class ReserveMaxAllocator:
    """Contiguous reservation of prompt_len + max_new_tokens slots per request, first fit.

    Args:
        total_slots: pool size in slots (>= 1).
        max_new_tokens: the server's cap on generated tokens (>= 1); every reservation is
            prompt_len + max_new_tokens slots, taken at admission and held until the request ends.

    Raises:
        ValueError: total_slots or max_new_tokens not a positive whole number.

    The allocator never needs to grow a reservation, so it never preempts. Its waste is the
    unreached tail of each reservation (internal fragmentation) and the free runs between
    reservations that are too short for the next reservation (external fragmentation).
    """

    kind = "reserve_max"
    label = "Reserve-max"

    def __init__(self, total_slots: int, max_new_tokens: int):
        self.total_slots = _check_int("total_slots", total_slots, 1)
        self.max_new_tokens = _check_int("max_new_tokens", max_new_tokens, 1)
        self.block_size = None
        self.reset()

    def reset(self, shared_prefix: int = 0) -> None:
        """Forget every reservation (an empty pool). Contiguous runs cannot share blocks, so a
        shared prefix changes nothing here: each reservation stores its own copy."""
        self._starts: list[tuple[int, int, int]] = []   # sorted (start, length, seq_id)
        self._by_seq: dict[int, tuple[int, int]] = {}    # seq_id -> (start, length)
        self.allocated_slots = 0

    @property
    def units_in_use(self) -> int:
        """Number of reservations held (one metadata entry each)."""
        return len(self._by_seq)

    def reservation(self, prompt_len: int) -> int:
        """Slots reserved for a request with this prompt: prompt_len + max_new_tokens."""
        return prompt_len + self.max_new_tokens

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never be admitted (its reservation exceeds the pool), else None."""
        need = self.reservation(prompt_len)
        if need > self.total_slots:
            return (f"needs a contiguous reservation of {need} slots (prompt {prompt_len} + "
                    f"max_new_tokens {self.max_new_tokens}) but the pool has only {self.total_slots} slots")
        return None

    def admission_need(self, prompt_len: int, context_len: int) -> int:
        """Contiguous slots the request needs to be admitted."""
        return self.reservation(prompt_len)

    def _gaps(self):
        """Yield (start, length) of every free run, in address order."""
        pos = 0
        for start, length, _ in self._starts:
            if start > pos:
                yield pos, start - pos
            pos = start + length
        if pos < self.total_slots:
            yield pos, self.total_slots - pos

    def try_admit(self, seq_id: int, prompt_len: int, context_len: int) -> bool:
        """Reserve the first (lowest-address) free run long enough; False if there is none."""
        need = self.reservation(prompt_len)
        for start, length in self._gaps():
            if length >= need:
                insort(self._starts, (start, need, seq_id))
                self._by_seq[seq_id] = (start, need)
                self.allocated_slots += need
                return True
        return False

    def grow(self, seq_id: int, new_len: int) -> bool:
        """Growth always lands inside the reservation (output_len <= max_new_tokens): True."""
        return True

    def free(self, seq_id: int) -> None:
        """Release the sequence's reservation."""
        start, length = self._by_seq.pop(seq_id)
        self._starts.remove((start, length, seq_id))
        self.allocated_slots -= length

    def preempt(self, seq_id: int) -> str:
        """Release the sequence's reservation for recompute (never needed: reservations never grow)."""
        self.free(seq_id)
        return "recompute"

    def external_fragmentation(self, need: int) -> int:
        """Free slots lying in runs shorter than ``need`` slots (0 when nothing is waiting)."""
        if need <= 0:
            return 0
        return sum(length for _, length in self._gaps() if length < need)

    def snapshot(self, lengths: dict) -> np.ndarray:
        """Reservations as an int32 array [k, 4]: owner id, start slot, reserved slots, tokens held."""
        rows = [(seq_id, start, length, lengths[seq_id]) for start, length, seq_id in self._starts]
        return np.array(rows, dtype=np.int32).reshape(-1, 4)

    def holes(self, need: int) -> list[tuple[int, int]]:
        """Free runs (start, length) shorter than ``need`` slots: the holes the map marks."""
        if need <= 0:
            return []
        return [(s, n) for s, n in self._gaps() if n < need]


class PagedAllocator:
    """The pool cut into fixed blocks; each sequence maps logical blocks to physical ones.

    Args:
        total_slots: pool size in slots (>= 1). ``total_slots // block_size`` blocks are made;
            the remainder (``total_slots % block_size`` slots) cannot form a block and is
            counted as an unusable hole.
        block_size: slots per block (1..4096).
        preemption: "recompute" (a preempted sequence's blocks are dropped and its tokens are
            prefilled again later) or "swap" (its private blocks are copied to a host pool and
            copied back before it resumes; when the host pool is full it falls back to recompute).
        host_blocks: capacity of the host (CPU) swap pool in blocks (default: as many as the GPU pool).

    Raises:
        ValueError: block_size or total_slots not a positive whole number, a block larger than
            the pool, an unknown preemption mode or a negative host pool.

    A sequence is admitted with ceil((context_len + 1) / block_size) blocks — room for its
    context and the token prefill emits — and takes one more block only when its last block is
    full. Blocks come from the front of a free-block queue and return to its back, so physical
    order soon stops matching logical order, as in vLLM. The only waste is the unfilled end of
    each sequence's last block.

    Prefix sharing (``reset(shared_prefix=N)``): every request's prompt starts with the same N
    tokens, so its first N // block_size blocks are full and identical. The first sequence to be
    admitted fills them; later ones point their block tables at the same physical blocks and
    raise their refcount, and the blocks return to the free queue when the refcount reaches 0.
    Only full blocks are shared and writes always land after them, so no copy-on-write is needed
    here (``allocator.block_manager`` shows copy-on-write). Source: PagedAttention (SOSP 2023) §4.4.
    """

    kind = "paged"
    label = "Paged"
    PREEMPTION_MODES = ("recompute", "swap")

    def __init__(self, total_slots: int, block_size: int, preemption: str = "recompute",
                 host_blocks: int | None = None):
        self.total_slots = _check_int("total_slots", total_slots, 1)
        self.block_size = _check_int("block_size", block_size, 1)
        if self.block_size > 4096:
            raise ValueError(f"block_size must be at most 4096, got {self.block_size}")
        self.num_blocks = self.total_slots // self.block_size
        if self.num_blocks == 0:
            raise ValueError(f"block_size {self.block_size} is larger than the pool ({self.total_slots} slots)")
        if preemption not in self.PREEMPTION_MODES:
            raise ValueError(f"preemption must be one of {self.PREEMPTION_MODES}, got {preemption!r}")
        self.preemption = preemption
        self.host_blocks = self.num_blocks if host_blocks is None else _check_int("host_blocks", host_blocks, 0)
        self.remainder_slots = self.total_slots - self.num_blocks * self.block_size
        self.reset()

    def reset(self, shared_prefix: int = 0) -> None:
        """Empty the pool: every block free (in block-id order), no block tables, empty host pool.

        Args:
            shared_prefix: tokens at the start of every prompt that are the same system prompt
                (0: no sharing). Its full blocks are shared between sequences.
        """
        self.free_blocks: deque[int] = deque(range(self.num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self.block_owner: list[int] = [-1] * self.num_blocks
        self.block_fill: list[int] = [0] * self.num_blocks
        self.refcount: list[int] = [0] * self.num_blocks
        self.shared_prefix = _check_int("shared_prefix", shared_prefix, 0)
        self.prefix_blocks: list[int] = []          # physical ids of the shared prefix blocks
        self.n_prefix = self.shared_prefix // self.block_size
        self.host_used = 0                          # blocks held in the host pool
        self.swapped: dict[int, int] = {}           # seq_id -> private blocks it has on the host
        self.swapped_out = self.swapped_in = 0      # blocks moved, totals
        self.shared_saving = 0                      # slots saved by sharing right now

    @property
    def allocated_slots(self) -> int:
        """Distinct slots in blocks that belong to some sequence."""
        return (self.num_blocks - len(self.free_blocks)) * self.block_size

    @property
    def units_in_use(self) -> int:
        """Distinct blocks held by sequences (block-table entries pointing at them may be more)."""
        return self.num_blocks - len(self.free_blocks)

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens: ceil(tokens / block_size)."""
        return -(-tokens // self.block_size)

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never finish (its longest context needs more blocks than exist)."""
        need = self.blocks_for(prompt_len + output_len)
        if need > self.num_blocks:
            return (f"needs {need} blocks of {self.block_size} slots at its longest "
                    f"({prompt_len + output_len} tokens) but the pool has only {self.num_blocks} blocks")
        return None

    def _shares(self, prompt_len: int) -> int:
        """Prefix blocks this request can share (0 when sharing is off or its prompt is shorter)."""
        return self.n_prefix if self.n_prefix and prompt_len >= self.shared_prefix else 0

    def admission_need(self, prompt_len: int, context_len: int) -> int:
        """Slots of new blocks needed to admit: ceil((context_len + 1) / block_size) blocks, less
        the shared prefix blocks already in the pool."""
        need = self.blocks_for(context_len + 1)
        if self.prefix_blocks and self._shares(prompt_len):
            need -= len(self.prefix_blocks)
        return need * self.block_size

    def try_admit(self, seq_id: int, prompt_len: int, context_len: int) -> bool:
        """Give the sequence ceil((context_len + 1) / block_size) blocks (pointing at the shared
        prefix blocks where it can), or refuse if too few are free. A sequence coming back from
        the host pool is swapped in here."""
        tokens = context_len + 1
        need = self.blocks_for(tokens)
        share = self._shares(prompt_len)
        reuse = self.prefix_blocks if (share and self.prefix_blocks) else []
        if need - len(reuse) > len(self.free_blocks):
            return False
        bs = self.block_size
        pop = self.free_blocks.popleft
        table = list(reuse) + [pop() for _ in range(need - len(reuse))]
        owner, fill, ref = self.block_owner, self.block_fill, self.refcount
        for b in table[len(reuse):]:
            owner[b] = seq_id
            fill[b] = bs
        for b in table:
            ref[b] += 1
        fill[table[-1]] = tokens - (need - 1) * bs
        if share and not reuse:
            self.prefix_blocks = table[:share]
        if reuse:
            self.shared_saving += len(reuse) * bs
        self.block_tables[seq_id] = table
        if seq_id in self.swapped:
            n = self.swapped.pop(seq_id)
            self.host_used -= n
            self.swapped_in += n
        return True

    def grow(self, seq_id: int, new_len: int) -> bool:
        """Record one more token; take a new block if the last one is full. False if none is free."""
        table = self.block_tables[seq_id]
        last = table[-1]
        if self.block_fill[last] < self.block_size:
            self.block_fill[last] += 1
            return True
        if not self.free_blocks:
            return False
        b = self.free_blocks.popleft()
        table.append(b)
        self.block_owner[b] = seq_id
        self.block_fill[b] = 1
        self.refcount[b] = 1
        return True

    def free(self, seq_id: int) -> None:
        """Drop the sequence's block table: private blocks go to the back of the free queue,
        shared prefix blocks lose one reference (and are freed with their last one)."""
        table = self.block_tables.pop(seq_id)
        ref, freed = self.refcount, []
        for b in table:
            ref[b] -= 1
            if ref[b] == 0:
                self.block_owner[b] = -1
                self.block_fill[b] = 0
                freed.append(b)
            elif b in self.prefix_blocks:
                self.shared_saving -= self.block_size
                if self.block_owner[b] == seq_id:     # hand the drawing to a remaining holder
                    self.block_owner[b] = next(s for s, t in self.block_tables.items() if b in t)
        if self.prefix_blocks and ref[self.prefix_blocks[0]] == 0:
            self.prefix_blocks = []
        self.free_blocks.extend(freed)

    def preempt(self, seq_id: int) -> str:
        """Evict a running sequence. Returns "swap" when its private blocks went to the host pool
        (counted in ``swapped_out``), else "recompute"; either way its GPU blocks are released."""
        mode = "recompute"
        if self.preemption == "swap":
            private = sum(1 for b in self.block_tables[seq_id] if self.refcount[b] == 1)
            if self.host_used + private <= self.host_blocks:
                self.host_used += private
                self.swapped[seq_id] = private
                self.swapped_out += private
                mode = "swap"
        self.free(seq_id)
        return mode

    def external_fragmentation(self, need: int) -> int:
        """Free slots that can never serve a request: only the remainder that forms no block."""
        return self.remainder_slots

    def snapshot(self, lengths: dict) -> tuple[list, list, list]:
        """Per-block owner (-1 free; for a shared block, one of its holders), tokens held and
        refcount, each a list of num_blocks ints. Plain list copies: taken every step, they cost a
        fraction of a numpy conversion; ``SimulationResult.slot_states`` converts them when drawn."""
        return (self.block_owner.copy(), self.block_fill.copy(), self.refcount.copy())

    def check_invariants(self, lengths: dict) -> None:
        """Assert the block bookkeeping is consistent with the sequences' lengths (tokens).

        Raises:
            AssertionError: a block's refcount differing from the number of block tables that
                point at it, a private block in two tables, a block both free and held,
                allocated + free != total, a block table not exactly ceil(tokens / block_size)
                long, or a host pool over capacity.
        """
        pointing = [0] * self.num_blocks
        for seq_id, table in self.block_tables.items():
            assert len(table) == self.blocks_for(lengths[seq_id]), (
                f"seq {seq_id}: {len(table)} blocks for {lengths[seq_id]} tokens")
            assert len(set(table)) == len(table), f"seq {seq_id} lists a block twice"
            for b in table:
                pointing[b] += 1
        for b in range(self.num_blocks):
            assert pointing[b] == self.refcount[b], f"block {b}: refcount {self.refcount[b]}, {pointing[b]} tables"
            assert pointing[b] <= 1 or b in self.prefix_blocks, f"private block {b} in {pointing[b]} tables"
        free = set(self.free_blocks)
        held = {b for b in range(self.num_blocks) if pointing[b]}
        assert len(free) == len(self.free_blocks), "a block is queued as free twice"
        assert not (free & held), "a block is both free and held"
        assert len(held) + len(free) == self.num_blocks, "allocated + free != total blocks"
        saving = sum((self.refcount[b] - 1) * self.block_size for b in self.prefix_blocks if self.refcount[b])
        assert saving == self.shared_saving, f"shared saving {self.shared_saving} != {saving}"
        assert 0 <= self.host_used <= self.host_blocks, "host pool over capacity"
        assert self.host_used == sum(self.swapped.values())
