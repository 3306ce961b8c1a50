"""What a :class:`allocator.memory.block_pool.BlockPool` answers without changing (a mixin): refcounts,
counts of free, cached and in-use blocks, the free block queue, hash lookups and a block's state.

Split from ``block_pool.py`` so each file holds one idea: this one reads the pool's state, that
one changes it (allocate, touch, register, release). The state it reads is described in
:mod:`allocator.memory.block_pool`'s docstring (its "Model"); refcounts may be unstored while nothing is
shared, so every read goes through :meth:`BlockPoolQueries._refcounts` (derived, the pool unchanged)
or :meth:`BlockPoolQueries._stored_refcounts` (stored once, then kept up to date by the operations).

Sources: as :mod:`allocator.memory.block_pool` (the PagedAttention paper, arXiv:2309.06180, section 4.2-4.4;
vLLM's vllm/v1/core/block_pool.py).
"""
from __future__ import annotations

from itertools import islice
from operator import itemgetter

from allocator.common.validate import whole_number

#: Block states reported by :meth:`BlockPoolQueries.state`.
BLOCK_FREE, BLOCK_CACHED, BLOCK_IN_USE = "free", "cached", "in use"

_TOMBSTONE = -1          # a queue entry whose block left the queue early (a cache hit)


class BlockPoolQueries:
    """The read-only half of :class:`allocator.memory.block_pool.BlockPool` (its queries; a mixin that
    reads the pool's ``_ref``, ``_fresh``, ``_queue``, ``_head``, ``_hash``, ``_cache`` and
    ``_cached_free``, which ``BlockPool.__init__`` sets)."""

    def refcount(self, block_id: int) -> int:
        """Block tables pointing at ``block_id`` (0 when it waits in the free queue).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        ref = self._stored_refcounts()         # a caller may go block by block: store them once
        return ref[b] if b < self._fresh else 0

    @property
    def refcounts(self) -> list[int]:
        """Refcounts of the blocks handed out so far, shape (k,), k <= num_blocks: block ids
        0 .. k - 1 (every block at or past k was never used: refcount 0). The pool's own list once
        it stores refcounts, else one derived from the free queue (O(k), the pool unchanged):
        read it, never write it."""
        return self._refcounts()

    def all_refcounts(self) -> list[int]:
        """Every block's refcount, shape (num_blocks,) (a new list: O(num_blocks), for small pools)."""
        return self._refcounts() + [0] * (self.num_blocks - self._fresh)

    def _refcounts(self) -> list[int]:
        """The refcounts of blocks 0 .. k - 1 handed out so far: stored, or derived without storing
        them (every block handed out has refcount 1, except those back in the free queue)."""
        if self._ref is not None:
            return self._ref
        ref = [1] * self._fresh
        for b in self._queue[self._head:]:
            if b != _TOMBSTONE:
                ref[b] = 0
        return ref

    def _stored_refcounts(self) -> list[int]:
        """Store the refcounts (once; see the module docstring) and return the pool's list."""
        if self._ref is None:
            self._ref = self._refcounts()
        return self._ref

    def check_block(self, block_id) -> int:
        """Return ``block_id`` as an int in 0 .. num_blocks - 1, else raise FieldError (``block_id``)."""
        return whole_number("block_id", block_id, 0, self.num_blocks - 1)

    @property
    def num_cached_free(self) -> int:
        """Blocks with refcount 0 that are still findable by hash (cached, unreferenced)."""
        return len(self._cached_free)

    @property
    def num_plain_free(self) -> int:
        """Blocks with refcount 0 and no hash."""
        return self.num_free - len(self._cached_free)

    @property
    def num_in_use(self) -> int:
        """Blocks with refcount >= 1."""
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks findable by hash, referenced or not."""
        return len(self._cache)

    def free_queue(self) -> list[int]:
        """Block ids with refcount 0, in the order allocation takes them (least recently used first:
        never-used blocks in id order, then released ones). O(num_free): for small pools and tests."""
        return list(range(self._fresh, self.num_blocks)) + [b for b in self._queue[self._head:] if b != _TOMBSTONE]

    def cached_free_queue(self) -> list[int]:
        """Blocks with refcount 0 that are still findable by hash, least recently used first."""
        return list(self._cached_free)

    def cached_free_blocks(self) -> tuple:
        """:meth:`cached_free_queue` as a tuple (a pool picture's entry)."""
        return tuple(self._cached_free)

    def hash_of(self, block_id: int) -> bytes | None:
        """The hash a block can be found by, or None."""
        b = self.check_block(block_id)
        return self._hash[b] if b < len(self._hash) else None

    def lookup(self, block_hash: bytes) -> int | None:
        """The block registered under ``block_hash`` (in use or cached), or None."""
        return self._cache.get(block_hash)

    def lookup_run(self, block_hashes, limit: int) -> list[int]:
        """The blocks registered under the leading hashes of ``block_hashes`` (at most ``limit``
        of them), up to the first hash not found: a prompt's longest cached prefix in one call.
        Looks the hashes up in chunks of doubling size (C-level loops, at most twice the run found)."""
        get = self._cache.get
        if not isinstance(block_hashes, list):
            block_hashes = list(islice(block_hashes, limit))
        found: list = []
        start, step = 0, 16
        while start < limit:
            chunk = list(map(get, block_hashes[start:min(limit, start + step)]))
            if not chunk:
                break
            if None in chunk:
                found += chunk[:chunk.index(None)]
                break
            found += chunk
            start += step
            step *= 2
        return found

    def count_refcount(self, blocks, value: int) -> int:
        """How many of ``blocks`` have refcount ``value`` (blocks handed out before)."""
        if not len(blocks):
            return 0
        ref = self._stored_refcounts()
        if len(blocks) > 1:
            return itemgetter(*blocks)(ref).count(value)
        return sum(1 for b in blocks if ref[b] == value)

    def state(self, block_id: int) -> str:
        """``"free"``, ``"cached"`` (refcount 0 but findable by hash) or ``"in use"``."""
        b = self.check_block(block_id)
        ref = self._stored_refcounts()
        if b >= self._fresh:
            return BLOCK_FREE
        if ref[b] > 0:
            return BLOCK_IN_USE
        return BLOCK_CACHED if self._hash[b] is not None else BLOCK_FREE
