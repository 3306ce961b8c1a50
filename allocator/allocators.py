"""The two KV-cache allocators the lesson compares.

Both manage one pool of ``total_slots`` slots (a slot holds one token's K and V for every
layer). The engine (``allocator.engine.simulate``) drives them through a common interface:

* ``never_fits(prompt_len, output_len) -> str | None`` — why a request can never be served.
* ``admission_need(prompt_len, context_len) -> int`` — slots the queue head needs to be admitted.
* ``try_admit(seq_id, prompt_len, context_len) -> bool`` — allocate for admission, or refuse.
* ``grow(seq_id, new_len) -> bool`` — make room for a sequence that now holds ``new_len`` tokens.
* ``free(seq_id)`` — return everything the sequence holds (finish or preemption).
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
FREE, TOKEN, EMPTY, HOLE = 0, 1, 2, 3
STATE_NAMES = {FREE: "free", TOKEN: "holds a token", EMPTY: "allocated, empty", HOLE: "unusable hole"}


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

    def reset(self) -> None:
        """Forget every reservation (an empty pool)."""
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

    Raises:
        ValueError: block_size or total_slots not a positive whole number, or a block larger
            than the pool.

    A sequence is admitted with ceil((context_len + 1) / block_size) blocks — room for its
    context and the token prefill emits — and takes one more block only when its last block is
    full. Blocks come from the front of a free-block queue and return to its back, so physical
    order soon stops matching logical order, as in vLLM. The only waste is the unfilled end of
    each sequence's last block.
    """

    kind = "paged"
    label = "Paged"

    def __init__(self, total_slots: int, block_size: int):
        self.total_slots = _check_int("total_slots", total_slots, 1)
        self.block_size = _check_int("block_size", block_size, 1)
        if self.block_size > 4096:
            raise ValueError(f"block_size must be at most 4096, got {self.block_size}")
        self.num_blocks = self.total_slots // self.block_size
        if self.num_blocks == 0:
            raise ValueError(f"block_size {self.block_size} is larger than the pool ({self.total_slots} slots)")
        self.remainder_slots = self.total_slots - self.num_blocks * self.block_size
        self.reset()

    def reset(self) -> None:
        """Return every block to the free queue (in block-id order) and drop every block table."""
        self.free_blocks: deque[int] = deque(range(self.num_blocks))
        self.block_tables: dict[int, list[int]] = {}
        self.block_owner: list[int] = [-1] * self.num_blocks
        self.block_fill: list[int] = [0] * self.num_blocks

    @property
    def allocated_slots(self) -> int:
        """Slots in blocks that belong to some sequence."""
        return (self.num_blocks - len(self.free_blocks)) * self.block_size

    @property
    def units_in_use(self) -> int:
        """Blocks held by sequences (one block-table entry each)."""
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

    def admission_need(self, prompt_len: int, context_len: int) -> int:
        """Slots (whole blocks) needed to admit: ceil((context_len + 1) / block_size) x block_size."""
        return self.blocks_for(context_len + 1) * self.block_size

    def try_admit(self, seq_id: int, prompt_len: int, context_len: int) -> bool:
        """Give the sequence ceil((context_len + 1) / block_size) blocks, or refuse if too few are free."""
        tokens = context_len + 1
        need = self.blocks_for(tokens)
        if need > len(self.free_blocks):
            return False
        bs = self.block_size
        pop = self.free_blocks.popleft
        table = [pop() for _ in range(need)]
        owner, fill = self.block_owner, self.block_fill
        for b in table:
            owner[b] = seq_id
            fill[b] = bs
        fill[table[-1]] = tokens - (need - 1) * bs
        self.block_tables[seq_id] = table
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
        return True

    def free(self, seq_id: int) -> None:
        """Return all of the sequence's blocks to the back of the free queue."""
        table = self.block_tables.pop(seq_id)
        for b in table:
            self.block_owner[b] = -1
            self.block_fill[b] = 0
        self.free_blocks.extend(table)

    def external_fragmentation(self, need: int) -> int:
        """Free slots that can never serve a request: only the remainder that forms no block."""
        return self.remainder_slots

    def snapshot(self, lengths: dict) -> tuple[np.ndarray, np.ndarray]:
        """Per-block owner (int32 [num_blocks], -1 free) and tokens held (int16 [num_blocks])."""
        return (np.array(self.block_owner, dtype=np.int32), np.array(self.block_fill, dtype=np.int16))

    def check_invariants(self, lengths: dict) -> None:
        """Assert the block bookkeeping is consistent with the sequences' lengths (tokens).

        Raises:
            AssertionError: a block owned twice, free and owned at once, allocated + free != total,
                or a block table not exactly ceil(tokens / block_size) long.
        """
        seen = set()
        for seq_id, table in self.block_tables.items():
            assert len(table) == self.blocks_for(lengths[seq_id]), (
                f"seq {seq_id}: {len(table)} blocks for {lengths[seq_id]} tokens")
            for b in table:
                assert b not in seen, f"block {b} owned twice"
                assert self.block_owner[b] == seq_id
                seen.add(b)
        free = set(self.free_blocks)
        assert len(free) == len(self.free_blocks), "a block is queued as free twice"
        assert not (free & seen), "a block is both free and owned"
        assert len(seen) + len(free) == self.num_blocks, "allocated + free != total blocks"
        assert self.allocated_slots + len(free) * self.block_size == self.num_blocks * self.block_size
