"""The block pool of a prefix-caching run, kept in numpy arrays so a request's blocks move in bulk.

:class:`ArrayBlockPool` follows exactly the rules of :class:`allocator.memory.block_pool.BlockPool`
(the LRU free block queue, never-used blocks first in id order, release last block first, the
block-hash map where the first registration wins, a cached block evicted when the queue hands it
out again); ``tests/core/test_block_pool.py`` runs the same plain-list model against both. What
differs is the representation. A prefix-caching replay of the whole Mooncake trace moves about
nine million blocks, a prompt's 750 blocks at a time (block size 16): here each call touches
its blocks with a few numpy operations instead of a Python statement per block.

* refcounts, "has a hash", the hash itself (an object array) and each queued block's position
  in the queue are arrays over the blocks handed out so far (grown by doubling, so memory still
  follows the blocks used, not the pool's size);
* the free queue is an int64 array with a head; a cached block taken out of the middle by a
  cache hit leaves a tombstone (-1) that allocation skips; when the tail reaches the array's end
  the live entries are moved to its front (the array doubles when they fill half of it). Beside
  it a bool array says which entries are cached blocks (set when a block joins the queue: a
  block's hash cannot change while it waits there, since only blocks in use are registered
  and eviction happens as the queue hands a block out; cleared where a hit leaves a tombstone);
* int block keys below :data:`allocator.memory.key_table.TABLE_KEYS` (a trace's dense keys,
  :meth:`allocator.workloads.mooncake.TracePrompts.block_keys`) live in an int32 array indexed by key, so a
  prompt's lookups, registrations and evictions are numpy gathers and scatters (its size follows
  the keys' range, which for dense keys is about the distinct blocks: less than a dict of them);
  other keys (sha256 bytes) live in a dict as in the list pool;
* the blocks still findable by hash with refcount 0 are counted; a pool picture lists them
  (:meth:`ArrayBlockPool.cached_free_blocks`) with one numpy compress of the queue by those
  flags, as an array.

The :class:`allocator.memory.allocators.PagedAllocator` uses it when prefix caching is on (and the
list-based pool otherwise, whose small calls are cheaper for a few blocks at a time). Blocks in
one call must be distinct (a block table never lists a block twice).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from allocator.memory.block_pool_queries import BLOCK_CACHED, BLOCK_FREE, BLOCK_IN_USE
from allocator.memory.block_pool import BlockPool
from allocator.memory.key_table import KeyTable, ids
from allocator.common.errors import FieldError
from allocator.common.validate import whole_number

_TOMB = -1               # a queue entry whose block left the queue early (a cache hit)
_MIN_CAP = 1024
_FEW = 8                 # allocations of at most this many queued blocks go block by block (measured: bulk
                         # costs ~4 us, one by one ~0.3 us a block, ~0.4 us when it evicts)
#: Runs an iterator to its end in C (a C-level loop over ``map(...)``).
drain = deque(maxlen=0).extend


class ArrayBlockPool(KeyTable, BlockPool):
    """:class:`~allocator.memory.block_pool.BlockPool`'s rules with numpy state (prefix caching at scale).

    Args:
        num_blocks: blocks in the pool (>= 1).
        cache_freed: must be True (a released block stays findable by hash until reused).

    Raises:
        FieldError: ``num_blocks`` not a whole number >= 1, or ``cache_freed`` False.

    Each operation costs a few numpy calls plus O(blocks touched) C-level work; a refused
    operation changes nothing. Memory is O(blocks ever handed out).
    """

    def __init__(self, num_blocks: int, *, cache_freed: bool = True):
        self.num_blocks = whole_number("num_blocks", num_blocks, 1)
        if not cache_freed:
            raise FieldError("cache_freed", " must be True: this pool keeps released blocks cached")
        self.cache_freed = True
        self._fresh = 0                     # never-used blocks fresh .. num_blocks - 1 lead the queue
        cap = min(self.num_blocks, _MIN_CAP)
        self._ref = np.zeros(cap, dtype=np.int32)
        self._hashed = np.zeros(cap, dtype=bool)
        self._hkey = np.full(cap, None, dtype=object)     # a block's hash kept in the dict (else None)
        self._ikey = np.full(cap, -1, dtype=np.int32)      # a block's hash kept in the table (else -1)
        self._table = np.full(0, -1, dtype=np.int32)       # int key -> block (-1: none; ids < 2**30)
        self._ntable = 0                                    # keys in the table
        self._qpos = np.full(cap, -1, dtype=np.int64)
        self._q = np.empty(_MIN_CAP, dtype=np.int64)
        self._qcached = np.zeros(_MIN_CAP, dtype=bool)   # entry i of _q is a cached block (not a tombstone)
        self._head = self._tail = 0         # queue entries: _q[_head:_tail], tombstones included
        self._tombstones = 0
        self.num_free = self.num_blocks
        self.num_cached_free = 0
        self._cache: dict = {}
        self.evictions = 0

    def _state(self) -> tuple:
        used = self._fresh
        return (self.num_blocks, self._fresh, self.num_free, self.num_cached_free, self.evictions, self._cache,
                self._ref[:used].tolist(), [self.hash_of(b) for b in range(used)], self.free_queue())

    def __eq__(self, other) -> bool:
        """Equal when every piece of their state is."""
        return type(other) is type(self) and self._state() == other._state()

    __hash__ = None

    # ------------------------------------------------------------------ queries

    def refcount(self, block_id: int) -> int:
        b = self.check_block(block_id)
        return int(self._ref[b]) if b < self._fresh else 0

    @property
    def refcounts(self) -> list[int]:
        """Refcounts of the blocks handed out so far, shape (k,) (a new list)."""
        return self._ref[:self._fresh].tolist()

    def all_refcounts(self) -> list[int]:
        return self.refcounts + [0] * (self.num_blocks - self._fresh)

    def count_refcount(self, blocks, value: int) -> int:
        """How many of ``blocks`` have refcount ``value``."""
        if not len(blocks):
            return 0
        return int(np.count_nonzero(self._ref[ids(blocks)] == value))

    #: Blocks with refcount 0 still findable by hash (a plain attribute here: read every step).
    num_cached_free = 0

    @property
    def num_plain_free(self) -> int:
        return self.num_free - self.num_cached_free

    def _queued(self) -> np.ndarray:
        q = self._q[self._head:self._tail]
        return q[q != _TOMB] if self._tombstones else q

    def free_queue(self) -> list[int]:
        return list(range(self._fresh, self.num_blocks)) + self._queued().tolist()

    def cached_free_blocks(self) -> np.ndarray:
        """The blocks with refcount 0 still findable by hash, least recently used first: a pool
        picture's entry (``PagedAllocator.snapshot``).

        Returns:
            a new read-only int64 array [num_cached_free] of block ids: the free queue compressed
            by its entries' "cached block" flags (one sequential numpy pass, no gather), whatever
            changed since the last picture: a million cached blocks cost about a millisecond.
        """
        h, t = self._head, self._tail
        out = self._q[h:t].compress(self._qcached[h:t])
        out.flags.writeable = False
        return out

    def cached_free_queue(self) -> list[int]:
        """:meth:`cached_free_blocks` as a list."""
        return self.cached_free_blocks().tolist()

    def hash_of(self, block_id: int):
        b = self.check_block(block_id)
        if b >= self._fresh:
            return None
        k = int(self._ikey[b])
        return k if k >= 0 else self._hkey[b]

    def state(self, block_id: int) -> str:
        b = self.check_block(block_id)
        if b >= self._fresh:
            return BLOCK_FREE
        if self._ref[b] > 0:
            return BLOCK_IN_USE
        return BLOCK_CACHED if self._hashed[b] else BLOCK_FREE

    # ------------------------------------------------------------------ storage

    def _grow_blocks(self, need: int) -> None:
        cap = len(self._ref)
        if need <= cap:
            return
        cap = min(self.num_blocks, max(need, 2 * cap))
        grow = cap - len(self._ref)
        self._ref = np.concatenate([self._ref, np.zeros(grow, dtype=np.int32)])
        self._hashed = np.concatenate([self._hashed, np.zeros(grow, dtype=bool)])
        self._hkey = np.concatenate([self._hkey, np.full(grow, None, dtype=object)])
        self._ikey = np.concatenate([self._ikey, np.full(grow, -1, dtype=np.int32)])
        self._qpos = np.concatenate([self._qpos, np.full(grow, -1, dtype=np.int64)])

    def _room(self, k: int) -> None:
        """Make room for ``k`` more entries at the queue's tail (compact, or grow the array)."""
        if self._tail + k <= len(self._q):
            return
        q, cached = self._q[self._head:self._tail], self._qcached[self._head:self._tail]
        if self._tombstones:                  # the live entries and their flags (new arrays)
            keep = q != _TOMB
            live, flags = q[keep], cached[keep]
        else:
            live, flags = q.copy(), cached.copy()
        if 2 * (len(live) + k) > len(self._q):
            self._q = np.empty(max(2 * (len(live) + k), _MIN_CAP), dtype=np.int64)
            self._qcached = np.zeros(len(self._q), dtype=bool)
        self._q[:len(live)] = live
        self._qcached[:len(live)] = flags
        self._qpos[live] = np.arange(len(live), dtype=np.int64)
        self._head, self._tail, self._tombstones = 0, len(live), 0

    def _take_fresh(self, n: int) -> list[int]:
        f = self._fresh
        k = min(n, self.num_blocks - f)
        if k <= 0:
            return []
        self._grow_blocks(f + k)
        self._fresh = f + k
        self._ref[f:f + k] = 1
        return list(range(f, f + k))

    def _take_queued(self, m: int) -> np.ndarray:
        """The first ``m`` live queue entries, taken out of the queue (m <= live entries)."""
        q, h = self._q, self._head
        if not self._tombstones:
            blocks = q[h:h + m].copy()
            self._head = h + m
            return blocks
        size = m + 64
        while True:
            win = q[h:min(h + size, self._tail)]
            live = np.flatnonzero(win != _TOMB)
            if len(live) >= m:
                cut = int(live[m - 1]) + 1 if m else 0
                self._tombstones -= cut - m
                self._head = h + cut
                return win[live[:m]]
            size *= 2

    # ------------------------------------------------------------------ operations

    def allocate(self, n: int, evicted: list | None = None) -> list[int]:
        self._check_free(n)
        if n <= 0:
            return []
        fresh = self._take_fresh(n) if self._fresh < self.num_blocks else []
        self.num_free -= n
        m = n - len(fresh)
        if not m:
            return fresh
        out = self._take_few(m, evicted) if m <= _FEW else self._take_many(m, evicted).tolist()
        return fresh + out if fresh else out

    def allocate_array(self, n: int, evicted: list | None = None) -> np.ndarray:
        """:meth:`allocate` as a new int64 array [n] of block ids (the same blocks in the same
        order): what a prompt's block table is built from, registered and released as, so its
        hundreds of blocks are never a list in between.

        Raises:
            OutOfBlocksError: fewer than ``n`` blocks are free (field ``num_blocks``; nothing taken).
        """
        self._check_free(n)
        if n <= 0:
            return np.empty(0, dtype=np.int64)
        f = self._fresh
        k = min(n, self.num_blocks - f)              # never-used blocks lead the queue, in id order
        self.num_free -= n
        if k:
            self._grow_blocks(f + k)
            self._fresh = f + k
            self._ref[f:f + k] = 1
            fresh = np.arange(f, f + k, dtype=np.int64)
            if k == n:
                return fresh
        m = n - k                                    # the rest from the queue's front
        out = np.array(self._take_few(m, evicted), dtype=np.int64) if m <= _FEW else self._take_many(m, evicted)
        return np.concatenate((fresh, out)) if k else out

    def _take_many(self, m: int, evicted: list | None) -> np.ndarray:
        """:meth:`allocate`'s queue part for many blocks, in bulk: the first ``m`` live queue
        entries (int64 array [m]) get refcount 1 and leave the queue; cached ones are evicted."""
        blocks = self._take_queued(m)
        self._ref[blocks] = 1
        self._qpos[blocks] = -1
        if self.num_cached_free:
            self._evict(blocks, evicted)
        return blocks

    def _take_few(self, m: int, evicted: list | None) -> list[int]:
        """:meth:`allocate`'s queue part for a few blocks (a step's growth), block by block:
        a dozen numpy calls cost more than these few scalar reads and writes."""
        q, h, out = self._q, self._head, []
        while len(out) < m:
            b = q.item(h)
            h += 1
            if b == _TOMB:
                self._tombstones -= 1
            else:
                out.append(b)
        self._head = h
        ref, qpos, hashed = self._ref, self._qpos, self._hashed
        for b in out:
            ref[b] = 1
            qpos[b] = -1
        if self.num_cached_free:
            ikey, n = self._ikey, 0
            for b in out:
                if hashed.item(b):
                    k = ikey.item(b)
                    if k >= 0:
                        self._table[k] = -1
                        ikey[b] = -1
                        self._ntable -= 1
                    else:
                        del self._cache[self._hkey[b]]
                        self._hkey[b] = None
                    hashed[b] = False
                    n += 1
                    if evicted is not None:
                        evicted.append(b)
            self.num_cached_free -= n
            self.evictions += n
        return out

    def allocate_one(self) -> int | None:
        if not self.num_free:
            return None
        return self.allocate(1)[0]

    def _evict(self, blocks: np.ndarray, evicted: list | None) -> None:
        hit = blocks[self._hashed[blocks]]
        if not len(hit):
            return
        ik = self._ikey[hit]
        in_table = ik >= 0
        n_table = int(np.count_nonzero(in_table))
        if n_table:
            self._table[ik[in_table] if n_table < len(hit) else ik] = -1   # (all of them: no mask)
            self._ikey[hit] = -1
            self._ntable -= n_table
        if n_table < len(hit):
            other = hit[~in_table] if n_table else hit
            drain(map(self._cache.__delitem__, self._hkey[other].tolist()))     # C-level loop
            self._hkey[other] = None
        self._hashed[hit] = False
        self.num_cached_free -= len(hit)
        self.evictions += len(hit)
        if evicted is not None:
            evicted.extend(hit.tolist())

    def touch(self, blocks) -> None:
        if not len(blocks):
            return
        arr = ids(blocks)
        ref = self._ref
        r = ref[arr]
        zero = r == 0
        if zero.any():
            z = arr[zero]
            if not self._hashed[z].all():
                b = int(z[~self._hashed[z]][0])
                raise FieldError("block_id", f" = {b} is free and not cached: it cannot be shared")
            at = self._qpos[z]
            self._q[at] = _TOMB
            self._qcached[at] = False
            self._qpos[z] = -1
            k = len(z)
            self._tombstones += k
            self.num_cached_free -= k
            self.num_free -= k
        ref[arr] = r + 1

    def release(self, blocks) -> np.ndarray:
        """:meth:`BlockPool.release`, returning the freed blocks as an int64 array (in the order
        they joined the queue)."""
        if not len(blocks):
            return np.empty(0, dtype=np.int64)
        arr = ids(blocks)[::-1]
        r = self._ref[arr] - 1
        if r.min() < 0:
            b = int(arr[np.flatnonzero(r < 0)[0]])
            raise RuntimeError(f"block {b} released while its refcount is already 0")
        self._ref[arr] = r
        freed = arr[r == 0]
        k = len(freed)
        if k:
            self.num_free += k
            self._room(k)
            t = self._tail
            self._q[t:t + k] = freed
            cached = self._qcached[t:t + k]
            cached[:] = self._hashed[freed]
            self._qpos[freed] = np.arange(t, t + k, dtype=np.int64)
            self._tail = t + k
            self.num_cached_free += int(np.count_nonzero(cached))
        return freed

    def release_exclusive(self, blocks) -> None:
        self.release(blocks)

    # ------------------------------------------------------------------ checks

    def check_invariants(self, tables=()) -> None:
        """Assert the pool is consistent: :meth:`BlockPool.check_invariants` on a list copy of its
        state (queue, refcounts, hashes, tables), plus what only this representation has
        (tombstones, queue positions, the key table) and its pool picture's entry.

        Raises:
            AssertionError naming the first inconsistency.
        """
        used = self._fresh
        entries = self._q[self._head:self._tail].tolist()
        assert entries.count(_TOMB) == self._tombstones, "tombstones miscounted"
        flags = self._qcached[self._head:self._tail].tolist()
        assert flags == [b != _TOMB and bool(self._hashed[b]) for b in entries], (
            "the queue's cached-block flags are not its entries' hash flags")
        qpos = self._qpos[:used].tolist()
        for i, b in enumerate(entries):
            assert b == _TOMB or qpos[b] == self._head + i, f"block {b}: queue position {qpos[b]} != {self._head + i}"
        assert not self._hashed[used:].any() and not self._ref[used:].any(), "state past the blocks handed out"
        hashes = [self.hash_of(b) for b in range(used)]
        assert [h is not None for h in hashes] == self._hashed[:used].tolist(), "hash flags and hashes differ"
        in_table = np.flatnonzero(self._table >= 0)
        assert len(in_table) == self._ntable, "table keys miscounted"
        view = BlockPool(self.num_blocks, cache_freed=True)          # the same state, as lists
        queued = [b for b in entries if b != _TOMB]
        cache = dict(self._cache)
        cache.update(zip(in_table.tolist(), self._table[in_table].tolist()))
        view._fresh, view._ref, view._hash, view._queue = used, self._ref[:used].tolist(), hashes, queued
        view._pos = [-1] * used
        for i, b in enumerate(queued):
            view._pos[b] = i
        view._cache, view.num_free = cache, self.num_free
        view._cached_free = dict.fromkeys(b for b in queued if hashes[b] is not None)
        BlockPool.check_invariants(view, tables)
        assert len(view._cached_free) == self.num_cached_free, "cached free blocks miscounted"
        assert [qpos[b] == -1 for b in range(used)] == [r > 0 for r in view._ref], "queue positions stale"
        assert self.cached_free_blocks().tolist() == list(view._cached_free), (
            "the picture's cached blocks are not the cached free blocks in queue order")
