"""The one pool of KV-cache blocks that every paged model in the project uses.

Both the step engine's paged allocator (:class:`allocator.memory.paged.PagedAllocator`) and the
token-level block manager of the Block tables page (:class:`allocator.memory.block_manager.BlockManager`)
keep their blocks here, so refcounts, the free block queue, the block-hash map and the order in
which a finished sequence's blocks are released are the same code for both.

Model
-----
* ``num_blocks`` physical blocks, ids ``0 .. num_blocks - 1``. A block's *refcount* is the
  number of block tables that point at it.
* Every block with refcount 0 waits in one **free block queue**, least recently used at the
  front. Allocation takes blocks from the front; released blocks join the back. A sequence's
  blocks are released **last block first**, so the tail of a prompt is reused (and, with prefix
  caching, evicted) before its head -- a later request with the same prefix finds the head.
* The **block-hash map** finds a full block again by its hash (see :mod:`allocator.memory.block_hash`).
  A block in use can be registered under a hash; with ``cache_freed=True`` it stays findable
  after its refcount falls to 0, until the queue hands it out again (that *evicts* its hash);
  with ``cache_freed=False`` its hash is dropped the moment it is released.
* Touching a cached block that waits in the queue takes it out of the queue (a cache hit).
  Invariant: ``free (no hash) + cached (refcount 0, hashed) + in use == num_blocks``.
* Memory grows with the blocks used, not with the pool's size: never-used blocks wait at the
  front of the free queue in id order, unstored (a counter hands out their ids; the per-block
  lists grow as ids are first handed out), so a pool of 2**30 blocks costs what the blocks it used
  cost. A pool built with an explicit ``free_order`` stores its whole queue (small pools).
* Refcounts are stored only once they can say something: while a pool that forgets freed blocks'
  hashes (``cache_freed=False``) has shared nothing, a block handed out has refcount 1 and any
  other 0, so handing a block out or taking it back writes no refcount (in the engine's paged runs
  without sharing, those writes were a fifth of the run). The first operation that shares a block,
  releases by count or asks one block's refcount stores them all, once (O(blocks handed out)).

Its read-only queries (refcounts, counts, the free queue, lookups, a block's state) are in
:mod:`allocator.memory.block_pool_queries`. The pool's invariants are checked by
:mod:`allocator.memory.block_pool_checks`; the host (CPU) pool
for swapped-out sequences is :class:`allocator.memory.host_pool.HostPool`. The engine's prefix-caching
runs use :class:`allocator.memory.array_pool.ArrayBlockPool`: these rules with numpy state, so a prompt's
hundreds of blocks move in a few array operations (``tests/core/test_block_pool.py`` checks both
against one plain-list model).

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), sections 4.2-4.4 (block tables, refcounts,
sharing); vLLM's vllm/v1/core/block_pool.py and the ``FreeKVCacheBlockQueue`` of
vllm/v1/core/kv_cache_utils.py (LRU eviction order, blocks freed in reverse order);
``assets/reference_figures.md`` R8.
"""
from __future__ import annotations

import copy

# the block states are re-exported (``from allocator.memory.block_pool import BLOCK_FREE``)
from allocator.memory.block_pool_queries import _TOMBSTONE, BlockPoolQueries
from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.common.validate import whole_number

_COMPACT_AFTER = 4096    # queue entries consumed before the queue list is trimmed


class BlockPool(BlockPoolQueries):
    """Refcounted GPU blocks, an LRU free block queue and a block-hash map.

    Args:
        num_blocks: blocks in the pool (>= 1).
        free_order: optional permutation of ``range(num_blocks)``: the order the free queue
            starts in (default ascending ids). The Block tables page passes a shuffled order so
            that physical order visibly differs from logical order.
        cache_freed: keep a released block findable by its hash until it is reused (prefix
            caching, True) or forget its hash on release (False: blocks are shared only while
            some sequence holds them).

    Raises:
        FieldError: ``num_blocks`` not a whole number >= 1, or ``free_order`` not a permutation.

    All operations are O(blocks touched); a refused operation changes nothing. Memory is
    O(blocks ever handed out), not O(num_blocks) (see the module docstring).
    """

    def __init__(self, num_blocks: int, *, free_order=None, cache_freed: bool = True):
        self.num_blocks = whole_number("num_blocks", num_blocks, 1)
        self.cache_freed = bool(cache_freed)
        if free_order is None:
            # never-used blocks fresh .. num_blocks - 1 wait at the front of the queue, unstored
            self._fresh = 0
            order = []
        else:
            order = [int(b) for b in free_order]
            if sorted(order) != list(range(self.num_blocks)):
                raise FieldError("free_order", f" must be a permutation of 0..{self.num_blocks - 1}")
            self._fresh = self.num_blocks
        n = self._fresh                     # the per-block lists hold blocks 0 .. len - 1
        # refcounts, or None while every block handed out has refcount 1 (see the module docstring)
        self._ref: list[int] | None = [0] * n if self.cache_freed else None
        self._queue = order                 # live entries: self._queue[self._head:], minus tombstones
        self._head = 0
        self._tombstones = 0
        #: Blocks an allocation can take: refcount 0, hashed or not (the free queue's length).
        #: Read it; only the pool's own operations change it.
        self.num_free = self.num_blocks
        self._pos = [0] * n if self.cache_freed else None
        if self._pos is not None:
            for i, b in enumerate(order):
                self._pos[b] = i
        self._hash: list[bytes | None] = [None] * n
        self._cache: dict[bytes, int] = {}
        # blocks with refcount 0 that still have a hash, in free-queue order (a dict keeps the order;
        # a snapshot lists them without scanning the whole queue)
        self._cached_free: dict[int, None] = {}
        #: Cached blocks whose hash was dropped because the queue handed them out again.
        self.evictions = 0

    def __eq__(self, other) -> bool:
        """Two pools are equal when every piece of their state is (tests compare before and
        after a refused operation), refcounts compared by value whether stored or not."""
        if type(other) is not type(self):
            return False
        mine, theirs = dict(vars(self)), dict(vars(other))
        mine["_ref"], theirs["_ref"] = self._refcounts(), other._refcounts()
        return mine == theirs

    __hash__ = None

    # ------------------------------------------------------------------ never-used blocks

    def _take_fresh(self, n: int) -> list[int]:
        """Hand out up to ``n`` never-used blocks (the front of the queue), refcount 1; grows the
        per-block lists to cover them."""
        f = self._fresh
        k = min(n, self.num_blocks - f)
        if k <= 0:
            return []
        self._fresh = f + k
        if self._ref is not None:
            self._ref.extend([1] * k)
        self._hash.extend([None] * k)
        if self._pos is not None:
            self._pos.extend([-1] * k)
        return list(range(f, f + k))

    # ------------------------------------------------------------------ operations

    def _check_free(self, n: int) -> None:
        """Raise OutOfBlocksError (field ``num_blocks``) when fewer than ``n`` blocks are free."""
        if n > self.num_free:
            raise OutOfBlocksError("num_blocks", f"{n} needed, {self.num_free} of "
                                   f"{self.num_blocks} free", needed=n, available=self.num_free)

    def allocate(self, n: int, evicted: list | None = None) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, each with refcount 1.

        A taken block that was still findable by hash loses its hash (an eviction); its id is
        appended to ``evicted`` when a list is given.

        Returns:
            the block ids, in the order they left the queue (shape (n,)).

        Raises:
            OutOfBlocksError: fewer than ``n`` blocks are free (field ``num_blocks``; nothing taken).
        """
        self._check_free(n)
        if n <= 0:
            return []
        if self._fresh < self.num_blocks:      # never-used blocks wait at the front of the queue
            fresh = self._take_fresh(n)
            self.num_free -= len(fresh)
            return fresh + self.allocate(n - len(fresh), evicted) if n > len(fresh) else fresh
        # Released blocks, front of the queue first (the engine takes a few almost every step): while
        # nothing is shared no refcount to write, and without caching no queue position or hash to drop.
        self.num_free -= n
        q, h = self._queue, self._head
        if not self._tombstones:
            blocks = q[h:h + n]
            h += n
        else:
            blocks = []
            while len(blocks) < n:
                b = q[h]
                h += 1
                if b == _TOMBSTONE:
                    self._tombstones -= 1
                else:
                    blocks.append(b)
        self._head = h
        ref = self._ref
        if ref is not None:                    # (none stored: every block handed out has refcount 1)
            for b in blocks:
                ref[b] = 1
        pos = self._pos
        if pos is not None:
            for b in blocks:
                pos[b] = -1
            if self._cached_free:              # only a pool that caches freed blocks has them
                self._evict(blocks, evicted)
        if h >= _COMPACT_AFTER and 2 * h >= len(q):
            self._compact()
        return blocks

    def allocate_one(self) -> int | None:
        """Take one block from the front of the free queue (refcount 1), or None if none is free.

        The engine's fast path for a sequence whose last block filled; same rules as :meth:`allocate`.
        """
        if not self.num_free:
            return None
        if self._fresh < self.num_blocks:
            self.num_free -= 1
            return self._take_fresh(1)[0]
        q, h = self._queue, self._head
        b = q[h]
        while b == _TOMBSTONE:
            self._tombstones -= 1
            h += 1
            b = q[h]
        self._head = h + 1
        self.num_free -= 1
        if self._ref is not None:
            self._ref[b] = 1
        if self._pos is not None:
            self._pos[b] = -1
        if self._cached_free and self._hash[b] is not None:
            self._evict((b,), None)
        if h >= _COMPACT_AFTER and 2 * h >= len(q):
            self._compact()
        return b

    def touch(self, blocks) -> None:
        """Add one reference to each block (sharing it); a block at refcount 0 leaves the free
        queue first (a prefix-cache hit on a cached block).

        Raises:
            FieldError: a block at refcount 0 without a hash (``block_id``): only a cached block
                can be found and reused; nothing is changed.
        """
        ref, hashes = self._stored_refcounts(), self._hash
        for b in blocks:
            if ref[b] == 0 and hashes[b] is None:
                raise FieldError("block_id", f" = {b} is free and not cached: it cannot be shared")
        queue, pos, cached = self._queue, self._pos, self._cached_free
        taken = 0
        for b in blocks:
            if ref[b] == 0:
                queue[pos[b]] = _TOMBSTONE
                pos[b] = -1
                del cached[b]
                taken += 1
            ref[b] += 1
        self._tombstones += taken
        self.num_free -= taken

    def register(self, block_id: int, block_hash: bytes) -> bool:
        """Make an in-use block findable under ``block_hash``.

        Returns:
            True if registered; False if the hash already names another block or this block
            already has a hash (the first registration wins, as in vLLM).
        """
        if block_hash in self._cache or self._hash[block_id] is not None:
            return False
        self._cache[block_hash] = block_id
        self._hash[block_id] = block_hash
        return True

    def register_all(self, blocks, block_hashes) -> None:
        """:meth:`register` each block under the hash beside it, in order (one call for a whole
        prompt's blocks: the allocator's fast path). Same rules: the first registration wins."""
        cache, hashes = self._cache, self._hash
        for b, h in zip(blocks, block_hashes):
            if h not in cache and hashes[b] is None:
                cache[h] = b
                hashes[b] = h

    def release(self, blocks) -> list[int]:
        """Drop one reference to each block, the **last block first**.

        Blocks whose refcount reaches 0 join the back of the free queue in that order; with
        ``cache_freed=False`` their hashes are forgotten.

        Args:
            blocks: a block table (logical order), shape (k,).

        Returns:
            the blocks that reached refcount 0, in the order they joined the queue.

        Raises:
            RuntimeError: a block already at refcount 0 (a bookkeeping bug such as the wrong
                copy-on-write order); nothing is changed.
        """
        ref = self._stored_refcounts()
        freed = []
        for b in reversed(blocks):
            r = ref[b] - 1
            if r < 0:
                for undo in reversed(blocks):      # roll back what this call did so far
                    if undo == b:
                        break
                    ref[undo] += 1
                raise RuntimeError(f"block {b} released while its refcount is already 0")
            ref[b] = r
            if not r:
                freed.append(b)
        if not freed:
            return freed
        self.num_free += len(freed)
        q = self._queue
        if self._pos is not None:
            pos, hashes, cached = self._pos, self._hash, self._cached_free
            for b in freed:
                pos[b] = len(q)
                q.append(b)
                if hashes[b] is not None:
                    cached[b] = None
        else:
            q.extend(freed)
            if self._cache:
                hashes, cache = self._hash, self._cache
                for b in freed:
                    h = hashes[b]
                    if h is not None:
                        del cache[h]
                        hashes[b] = None
        return freed

    def release_exclusive(self, blocks) -> None:
        """:meth:`release` for a table whose every block has refcount 1 and no hash (a sequence
        that shares nothing): the same order and the same queue, without per-block checks.
        The engine's fast path; :meth:`check_invariants` verifies what it assumes."""
        ref = self._ref
        if ref is not None:                    # (none stored: a block in the free queue has refcount 0)
            for b in blocks:
                ref[b] = 0
        self.num_free += len(blocks)
        if self._pos is None:
            self._queue.extend(reversed(blocks))
        else:
            q, pos = self._queue, self._pos
            for b in reversed(blocks):
                pos[b] = len(q)
                q.append(b)

    # ------------------------------------------------------------------ internals

    def _evict(self, blocks, evicted: list | None) -> None:
        hashes, cache, cached = self._hash, self._cache, self._cached_free
        n = 0
        for b in blocks:
            h = hashes[b]
            if h is not None:
                if cache.get(h) == b:
                    del cache[h]
                hashes[b] = None
                del cached[b]
                n += 1
                if evicted is not None:
                    evicted.append(b)
        self.evictions += n

    def _compact(self) -> None:
        """Drop consumed entries and tombstones from the queue list (amortised O(1) per entry)."""
        live = self._queue[self._head:]
        if self._tombstones:
            live = [b for b in live if b != _TOMBSTONE]
        self._queue, self._head, self._tombstones = live, 0, 0
        if self._pos is not None:
            for i, b in enumerate(live):
                self._pos[b] = i

    # ------------------------------------------------------------------ checks

    def check_invariants(self, tables=()) -> None:
        """Assert the pool is consistent and, given every block table (iterables of block ids), that
        refcounts match them; AssertionError names the first inconsistency (``block_pool_checks``)."""
        from allocator.memory.block_pool_checks import check_block_pool    # imported here: it imports this module
        view = self
        if self._ref is None:                  # check derived refcounts; checking stores nothing
            view = copy.copy(self)
            view._ref = self._refcounts()
        check_block_pool(view, tables)
