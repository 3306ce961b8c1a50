"""Block tables that fork: several sequences of one request share blocks by refcount.

A request that asks for several output sequences (parallel sampling, beam search) computes its
prompt once; its sequences then share the prompt's blocks, and a beam that another beam was forked
from shares every block it had at the fork. :class:`ForkingPagedAllocator` keeps those block tables
over the project's one :class:`allocator.memory.block_pool.BlockPool` (refcounts, the free block
queue, the release order), counting blocks, not token ids (the Block tables page's
:class:`allocator.memory.block_manager.BlockManager` keeps the token-level picture of the same rules):

* :meth:`ForkingPagedAllocator.allocate` gives a new sequence the blocks of its first ``tokens``
  tokens; :meth:`~ForkingPagedAllocator.fork` starts a child that points at every block of its
  parent (each block's refcount + 1); :meth:`~ForkingPagedAllocator.free` drops a sequence's
  references, last block first.
* :meth:`~ForkingPagedAllocator.append` writes one token at a sequence's end. A full last block
  means a new block; a partly filled last block that other sequences also point at is copied
  first (**copy-on-write**: one new block, one reference fewer on the old one), so the last
  sibling to write keeps the original. Only a last block is ever written, so full blocks stay
  shared for as long as their sequences live.
* Memory saved by sharing at a moment = 1 - physical blocks / logical blocks, where logical
  blocks are the block tables' entries summed (what the sequences would hold each on its own)
  and physical blocks are the distinct blocks in use (:meth:`~ForkingPagedAllocator.saving_fraction`).

The engine's interface (:class:`allocator.memory.allocators.Allocator`) is kept where the loop reads
it (``shared_saving``, ``allocated_slots``, ``units_in_use``, ``never_written``...), so a run of
:mod:`allocator.engine.sampling` records the same per-step metrics as any other run.

Source: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, section 4.4 (parallel sampling: the prompt's blocks shared by
refcount, copy-on-write of the partial last block; beam search: beams share blocks by refcount,
forked and freed step by step) and section 6.3 (Figure 15: memory saved by sharing).
"""
from __future__ import annotations

from allocator.common.errors import FieldError
from allocator.common.limits import MAX_BLOCK_SIZE, MAX_POOL_SLOTS
from allocator.common.mathutils import cdiv
from allocator.common.validate import whole_number
from allocator.memory.block_pool import BlockPool
from allocator.memory.paged import too_long_for_pool

__all__ = ["ForkingPagedAllocator"]


class ForkingPagedAllocator:
    """Paged block tables that share blocks by refcount between sequences of one request.

    Args:
        total_slots: pool size in slots (>= 1); ``total_slots // block_size`` blocks.
        block_size: slots per block (1 .. 4096).

    Raises:
        FieldError: ``total_slots`` or ``block_size`` not a whole number in range, or a block larger
            than the pool.

    Sequence ids are any hashable values (the engine uses (request id, beam) pairs). Preemption is
    recompute only (``preemption == "recompute"``): the engine frees a preempted request's sequences.
    """

    kind = "paged"
    label = "Paged, shared by refcount"
    preemption = "recompute"
    prefix_caching = False
    cached_blocks = 0
    cache_evictions = 0
    swap_traffic = 0
    last_hit_tokens = 0
    hit_tokens = 0
    prompt_tokens = 0

    def __init__(self, total_slots: int, block_size: int):
        self.block_size = whole_number("block_size", block_size, 1, MAX_BLOCK_SIZE)
        self.total_slots = whole_number("total_slots", total_slots, 1, MAX_POOL_SLOTS)
        self.num_blocks = self.total_slots // self.block_size
        if self.num_blocks == 0:
            raise FieldError("block_size", f" = {self.block_size} is larger than the pool "
                                           f"({self.total_slots} slots)")
        self.remainder_slots = self.total_slots - self.num_blocks * self.block_size
        self.reset()

    # ------------------------------------------------------------------ state

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool: no block tables, every block free. ``shared_prefix`` and ``prompts`` are
        accepted for the engine's interface and must be 0 / None (no system prompt, no prefix cache).

        Raises:
            FieldError (``shared_prefix``): a shared system prompt, which this allocator does not model.
        """
        if shared_prefix:
            raise FieldError("shared_prefix", " must be 0 with parallel sampling or beam search here "
                                              "(the sequences of one request share its prompt already)")
        self.pool = BlockPool(self.num_blocks, cache_freed=True)     # refcounts stored: blocks are shared
        self.tables: dict = {}          # seq id -> [block ids], logical order
        self.lengths: dict = {}         # seq id -> tokens written
        self.logical_blocks = 0         # block-table entries summed
        self.cow_copies = 0             # partial last blocks copied before a write
        self.never_written = 0          # slots of the last blocks not yet written (kept by append/free)

    @property
    def physical_blocks(self) -> int:
        """Distinct blocks in use (refcount >= 1)."""
        return self.num_blocks - self.pool.num_free

    @property
    def units_in_use(self) -> int:
        """Blocks in use (the engine's metadata entries)."""
        return self.physical_blocks

    @property
    def allocated_slots(self) -> int:
        """Slots of the blocks in use."""
        return self.physical_blocks * self.block_size

    @property
    def shared_saving(self) -> int:
        """Slots saved by sharing right now: (logical - physical blocks) x block_size."""
        return (self.logical_blocks - self.physical_blocks) * self.block_size

    def saving_fraction(self) -> float:
        """1 - physical blocks / logical blocks right now (0.0 while nothing is held)."""
        return 1.0 - self.physical_blocks / self.logical_blocks if self.logical_blocks else 0.0

    def refcount(self, block_id: int) -> int:
        """Block tables pointing at ``block_id``. Raises FieldError (``block_id``) outside the pool."""
        return self.pool.refcount(block_id)

    def free_blocks(self) -> int:
        """Blocks an allocation can take now."""
        return self.pool.num_free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens on their own: ceil(tokens / block_size)."""
        return cdiv(tokens, self.block_size)

    # ------------------------------------------------------------------ the engine's interface

    def validate_workload(self, workload) -> None:
        """Nothing beyond the workload's own checks (any output length fits a paged pool's rules)."""

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Why one sequence of prompt + output tokens can never fit the pool, or None (as a paged pool's)."""
        return too_long_for_pool(prompt_len + output_len, self.block_size, self.num_blocks)

    def external_fragmentation(self, need: int) -> int:
        """A paged pool's only unusable hole: the slots that cannot form a block."""
        return self.remainder_slots

    def snapshot(self, lengths: dict) -> tuple:
        """((seq id, tokens, block ids), ...) for every sequence in ``lengths`` (a pool picture)."""
        return tuple((sid, lengths[sid], tuple(self.tables[sid])) for sid in lengths)

    # ------------------------------------------------------------------ block-table operations

    def append_need(self, seq_ids) -> int:
        """Blocks that one :meth:`append` to each of ``seq_ids`` (in that order) will take: one per
        full last block, and, for a partly filled last block that k of them share, k - 1 copies (the
        last to write keeps it) -- fewer when other holders outside ``seq_ids`` share it too, none
        of which write here."""
        need, pending = 0, {}
        bs, tables, lengths = self.block_size, self.tables, self.lengths
        for sid in seq_ids:
            if lengths[sid] % bs == 0:
                need += 1
            else:
                b = tables[sid][-1]
                pending[b] = pending.get(b, 0) + 1
        ref = self.pool.refcounts
        for b, writers in pending.items():
            need += writers if ref[b] > writers else writers - 1
        return need

    def allocate(self, seq_id, tokens: int) -> list[int]:
        """Start ``seq_id`` with ceil(tokens / block_size) fresh blocks (its first ``tokens`` tokens).

        Raises:
            FieldError (``seq_id``): the id is already held; (``tokens``): not a whole number >= 1.
            OutOfBlocksError (``num_blocks``): too few free blocks (nothing changes).
        """
        if seq_id in self.tables:
            raise FieldError("seq_id", f": sequence {seq_id!r} already holds blocks")
        tokens = whole_number("tokens", tokens, 1)
        blocks = self.pool.allocate(self.blocks_for(tokens))
        self.tables[seq_id] = blocks
        self.lengths[seq_id] = tokens
        self.logical_blocks += len(blocks)
        self.never_written += len(blocks) * self.block_size - tokens
        return list(blocks)

    def fork(self, parent_id, child_id) -> list[int]:
        """Start ``child_id`` pointing at every block of ``parent_id`` (refcounts + 1); no new block.

        Raises:
            FieldError (``parent_id``): unknown parent; (``child_id``): the id is already held.
        """
        if parent_id not in self.tables:
            raise FieldError("parent_id", f": no sequence {parent_id!r}")
        if child_id in self.tables:
            raise FieldError("child_id", f": sequence {child_id!r} already holds blocks")
        table = self.tables[parent_id]
        self.pool.touch(table)
        self.tables[child_id] = list(table)
        self.lengths[child_id] = self.lengths[parent_id]
        self.logical_blocks += len(table)
        return list(table)

    def refork(self, seq_id, parent_id) -> None:
        """:meth:`free` ``seq_id`` and :meth:`fork` it again from ``parent_id`` (a beam that died and
        a beam forked from ``parent_id`` in its place), in one pass: the leading blocks both tables
        already share keep their refcounts; only the differing tails are touched and released.
        The same refcounts as fork then free, at the cost of the tails.

        Raises:
            FieldError (``seq_id`` / ``parent_id``): an unknown sequence, or the two the same.
        """
        if seq_id not in self.tables:
            raise FieldError("seq_id", f": no sequence {seq_id!r}")
        if parent_id not in self.tables or parent_id == seq_id:
            raise FieldError("parent_id", f": no other sequence {parent_id!r}")
        old, parent = self.tables[seq_id], self.tables[parent_id]
        m, top = 0, min(len(old), len(parent))
        while m < top and old[m] == parent[m]:
            m += 1
        if m < len(old) and self.pool.refcounts[old[-1]] == 1:
            self.never_written -= len(old) * self.block_size - self.lengths[seq_id]
        self.pool.touch(parent[m:])                 # share first, then drop: no block passes through 0
        self.pool.release(old[m:])
        self.logical_blocks += len(parent) - len(old)
        self.tables[seq_id] = list(parent)
        self.lengths[seq_id] = self.lengths[parent_id]

    def append(self, seq_id) -> str | None:
        """Write one token at the end of ``seq_id``: ``"new"`` (its last block was full: one block
        taken), ``"copy"`` (its partly filled last block was shared: copied, then written) or None
        (written in place).

        Raises:
            FieldError (``seq_id``): unknown sequence.
            OutOfBlocksError (``num_blocks``): a block is needed and none is free (nothing changes).
        """
        if seq_id not in self.tables:
            raise FieldError("seq_id", f": no sequence {seq_id!r}")
        table, n, bs = self.tables[seq_id], self.lengths[seq_id], self.block_size
        if n % bs == 0:
            table.extend(self.pool.allocate(1))
            self.logical_blocks += 1
            self.never_written += bs - 1
            what = "new"
        elif self.pool.refcounts[table[-1]] > 1:
            new = self.pool.allocate(1)[0]          # copy first, then drop the shared reference
            old = table[-1]
            table[-1] = new
            self.pool.release([old])
            self.cow_copies += 1
            # the copy's unwritten tail counts as well as the original's, which its other holders keep
            self.never_written += bs - n % bs - 1
            what = "copy"
        else:
            self.never_written -= 1
            what = None
        self.lengths[seq_id] = n + 1
        return what

    def write_in_place(self, seq_ids) -> None:
        """:meth:`append` one token to each of ``seq_ids`` whose last block is partly filled and
        held by it alone (refcount 1): no block is taken, so only the lengths change. The engine's
        fast path for the steps between block boundaries; :meth:`check_invariants` verifies it.

        Raises:
            FieldError (``seq_id``): unknown sequence.
        """
        lengths = self.lengths
        for sid in seq_ids:
            if sid not in lengths:
                raise FieldError("seq_id", f": no sequence {sid!r}")
            lengths[sid] += 1
        self.never_written -= len(seq_ids)

    def free(self, seq_id) -> None:
        """Drop ``seq_id``'s references, last block first; blocks at refcount 0 return to the queue.

        Raises:
            FieldError (``seq_id``): unknown sequence.
        """
        if seq_id not in self.tables:
            raise FieldError("seq_id", f": no sequence {seq_id!r}")
        table = self.tables.pop(seq_id)
        n = self.lengths.pop(seq_id)
        if table and self.pool.refcounts[table[-1]] == 1:
            self.never_written -= len(table) * self.block_size - n
        self.pool.release(table)
        self.logical_blocks -= len(table)

    def check_invariants(self, lengths: dict | None = None) -> None:
        """Assert the bookkeeping: every block's refcount equals the block tables pointing at it,
        the logical count is the tables' length, each table holds its tokens exactly, and the
        unwritten tails sum to ``never_written``."""
        counts: dict = {}
        for table in self.tables.values():
            for b in table:
                counts[b] = counts.get(b, 0) + 1
        for b, c in counts.items():
            assert self.pool.refcount(b) == c, f"block {b}: refcount {self.pool.refcount(b)} != {c} tables"
        assert self.physical_blocks == len(counts), "a block in use is held by no table"
        assert self.logical_blocks == sum(map(len, self.tables.values())), "logical blocks drifted"
        tails = {}
        for sid, table in self.tables.items():
            assert len(table) == self.blocks_for(self.lengths[sid]), f"sequence {sid!r}: table length wrong"
            tails[table[-1]] = len(table) * self.block_size - self.lengths[sid]
        assert self.never_written == sum(tails.values()), "unwritten slots drifted"
        if lengths is not None:
            for sid, n in lengths.items():
                assert self.lengths[sid] == n, f"sequence {sid!r}: {self.lengths[sid]} tokens held, {n} expected"
