"""The block pool of a prefix-caching run, kept in numpy arrays so a request's blocks move in bulk.

:class:`ArrayBlockPool` follows exactly the rules of :class:`allocator.memory.block_pool.BlockPool`
(the LRU free block queue, never-used blocks first in id order, release last block first, the
block-hash map where one hash names every block registered under it and a lookup finds the
earliest still there, a cached block evicted when the queue hands it out again);
``tests/core/test_block_pool.py`` runs the same plain-list model against both. What differs is
the representation. A prefix-caching replay of the whole Mooncake trace moves about nine million
blocks, a prompt's 750 blocks at a time (block size 16): here each call touches its blocks with a
few numpy operations instead of a Python statement per block.

* refcounts, "has a hash", the hash itself (an object array) and each queued block's position
  in the queue are arrays over the blocks handed out so far (grown by doubling, so memory still
  follows the blocks used, not the pool's size);
* the free queue is an int64 array with a head; a cached block taken out of the middle by a
  cache hit leaves a tombstone (-1) that allocation skips; when the tail reaches the array's end
  the live entries are moved to its front (the array doubles when they fill half of it). Beside
  it a bool array says which entries are cached blocks (set when a block joins the queue: a
  block's hash cannot change while it waits there, since only blocks in use are registered
  and eviction happens as the queue hands a block out; cleared where a hit leaves a tombstone);
* the block-hash map: int block keys below :data:`TABLE_KEYS` (a trace's dense keys,
  :meth:`allocator.workloads.mooncake.TracePrompts.block_keys`) live in an int32 array indexed by key, so a
  prompt's lookups, registrations and evictions are numpy gathers and scatters (its size follows
  the keys' range, which for dense keys is about the distinct blocks: less than a dict of them);
  other keys (sha256 bytes, the shared system prompt's and vLLM v1's) live in a dict as in the
  list pool. One call's keys are all of one kind (judged by the first). The table and the dict
  hold the block a lookup finds; a hash that names several blocks (an identical block computed
  again, as vLLM's ``BlockHashToBlockMap`` allows) keeps the later ones in a small dict of lists
  beside them; a per-block flag marks the blocks of such a hash, so evictions stay one numpy
  pass and only blocks of a hash naming several go one by one;
* the blocks still findable by hash with refcount 0 are counted; a pool picture lists them
  (:meth:`ArrayBlockPool.cached_free_blocks`) with one numpy compress of the queue by those
  flags, as an array.

It answers every query of :class:`~allocator.memory.block_pool.BlockPool` the same way, one block's
state included (:meth:`ArrayBlockPool.block` gives the same
:class:`~allocator.memory.block_pool.KVCacheBlock`), and checks its state against the same rules
(:func:`allocator.memory.block_pool.check_pool_state`); it shares the list pool's rules, not its code.
The :class:`allocator.memory.paged.PagedAllocator` uses it when prefix caching is on (and the
list-based pool otherwise, whose small calls are cheaper for a few blocks at a time). Blocks in
one call must be distinct (a block table never lists a block twice).

Sources: as :mod:`allocator.memory.block_pool` (Kwon et al., PagedAttention, SOSP 2023, sections
4.2-4.4; vLLM's vllm/v1/core/block_pool.py, whose ``BlockHashToBlockMap`` is this pool's
block-hash map).
"""
from __future__ import annotations

from collections import deque

import numpy as np

from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.common.validate import whole_number
from allocator.memory.block_pool import (BLOCK_FREE, KVCacheBlock, block_state, check_pool_state,
                                         lookup_prefix)

_TOMB = -1               # a queue entry whose block left the queue early (a cache hit)
_MIN_CAP = 1024
_MIN_TABLE = 1024
_FEW = 8                 # allocations of at most this many queued blocks go block by block (measured: bulk
                         # costs ~4 us, one by one ~0.3 us a block, ~0.4 us when it evicts)
#: Runs an iterator to its end in C (a C-level loop over ``map(...)``).
drain = deque(maxlen=0).extend

#: Int keys below this live in an array indexed by key (a trace's dense block keys,
#: :meth:`allocator.workloads.mooncake.TracePrompts.block_keys`); other keys in a dict.
TABLE_KEYS = 1 << 28


def _table_key(key) -> bool:
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool) and 0 <= key < TABLE_KEYS


def _table_keys(keys) -> tuple[np.ndarray, int] | None:
    """``(keys as an int64 array, the largest of them or -1 when there are none)`` when they are
    table keys (judged by the first), else None.

    An int array is table keys when all of them are in [0, TABLE_KEYS): one reduction, the
    largest of them read as unsigned (a negative key reads as 2**63 or more), which is also the
    largest key the caller needs (to know whether the table reaches it)."""
    if isinstance(keys, np.ndarray):
        if keys.dtype.kind not in "iu":
            return None
        keys = keys.astype(np.int64, copy=False)
        top = int(keys.view(np.uint64).max()) if len(keys) else -1
        return (keys, top) if top < TABLE_KEYS else None
    if isinstance(keys, list) and keys and _table_key(keys[0]):
        return _table_keys(np.array(keys))
    return None


def _unsigned(arr: np.ndarray) -> np.ndarray:
    """Int block ids read as unsigned (a negative id reads as 2**63 or more), for one-pass range checks."""
    return arr.view(np.uint64) if arr.dtype == np.int64 else arr.astype(np.int64).view(np.uint64)


def ids(blocks) -> np.ndarray:
    """Block ids as an int64 array (an array is taken as it is)."""
    return blocks if isinstance(blocks, np.ndarray) else np.array(blocks, dtype=np.int64)


class ArrayBlockPool:
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
        # per block handed out (arrays grown by doubling; entries past _fresh are unused)
        self._ref = np.zeros(cap, dtype=np.int32)          # refcounts
        self._hashed = np.zeros(cap, dtype=bool)           # the block has a hash
        self._hkey = np.full(cap, None, dtype=object)     # a block's hash kept in the dict (else None)
        self._ikey = np.full(cap, -1, dtype=np.int32)      # a block's hash kept in the table (else -1)
        self._qpos = np.full(cap, -1, dtype=np.int64)      # a queued block's index in _q (else -1)
        self._several = np.zeros(cap, dtype=bool)          # the block's hash names other blocks too
        # the block-hash map: int keys in a table indexed by key, other keys in a dict
        self._table = np.full(0, -1, dtype=np.int32)       # int key -> block (-1: none; ids < 2**30)
        self._ntable = 0                                    # keys in the table
        self._cache: dict = {}                              # other key -> block
        # a hash naming several blocks: hash (int table key or dict key) -> the blocks after the one
        # the table or dict holds, in the order registered (vLLM's BlockHashToBlockMap entry)
        self._dups: dict = {}
        self._num_dups = 0                                  # blocks listed in _dups
        # the free queue of released blocks (never-used ones lead it, unstored)
        self._q = np.empty(_MIN_CAP, dtype=np.int64)
        self._qcached = np.zeros(_MIN_CAP, dtype=bool)   # entry i of _q is a cached block (not a tombstone)
        self._head = self._tail = 0         # queue entries: _q[_head:_tail], tombstones included
        self._tombstones = 0
        #: Blocks an allocation can take: refcount 0, hashed or not (read it; only the pool changes it).
        self.num_free = self.num_blocks
        #: Blocks with refcount 0 still findable by hash (a plain attribute here: read every step).
        self.num_cached_free = 0
        #: Cached blocks whose hash was dropped because the queue handed them out again.
        self.evictions = 0

    def _state(self) -> tuple:
        used = self._fresh
        return (self.num_blocks, self._fresh, self.num_free, self.num_cached_free, self.evictions, self._cache,
                self._dups, self._ref[:used].tolist(), [self.hash_of(b) for b in range(used)], self.free_queue())

    def __eq__(self, other) -> bool:
        """Equal when every piece of their state is."""
        return type(other) is type(self) and self._state() == other._state()

    __hash__ = None

    # ------------------------------------------------------------------ queries

    def check_block(self, block_id) -> int:
        """Return ``block_id`` as an int in 0 .. num_blocks - 1, else raise FieldError (``block_id``)."""
        return whole_number("block_id", block_id, 0, self.num_blocks - 1)

    def block(self, block_id) -> KVCacheBlock:
        """A read-only snapshot of one block (:meth:`BlockPool.block`; the same snapshot for the
        same history).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        if b >= self._fresh:
            return KVCacheBlock(b, 0, None, BLOCK_FREE)
        ref, h = int(self._ref[b]), self.hash_of(b)
        return KVCacheBlock(b, ref, h, block_state(ref, h))

    def refcount(self, block_id: int) -> int:
        """Block tables pointing at ``block_id`` (0 when it waits in the free queue).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        return int(self._ref[b]) if b < self._fresh else 0

    @property
    def refcounts(self) -> list[int]:
        """Refcounts of the blocks handed out so far, shape (k,) (a new list)."""
        return self._ref[:self._fresh].tolist()

    def all_refcounts(self) -> list[int]:
        """Every block's refcount, shape (num_blocks,) (a new list: O(num_blocks), for small pools)."""
        return self.refcounts + [0] * (self.num_blocks - self._fresh)

    def count_refcount(self, blocks, value: int) -> int:
        """How many of ``blocks`` have refcount ``value``."""
        if not len(blocks):
            return 0
        return int(np.count_nonzero(self._ref[ids(blocks)] == value))

    @property
    def num_plain_free(self) -> int:
        """Blocks with refcount 0 and no hash."""
        return self.num_free - self.num_cached_free

    @property
    def num_in_use(self) -> int:
        """Blocks with refcount >= 1."""
        return self.num_blocks - self.num_free

    @property
    def num_cached(self) -> int:
        """Blocks with a hash (cached), referenced or not (:attr:`BlockPool.num_cached`)."""
        return len(self._cache) + self._ntable + self._num_dups

    def _queued(self) -> np.ndarray:
        q = self._q[self._head:self._tail]
        return q[q != _TOMB] if self._tombstones else q

    def free_queue(self, *, never_used: bool = True) -> list[int]:
        """Block ids with refcount 0, least recently used first (:meth:`BlockPool.free_queue`)."""
        released = self._queued().tolist()
        return list(range(self._fresh, self.num_blocks)) + released if never_used else released

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
        """The hash a block can be found by (an int table key or the dict's key), or None.

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        if b >= self._fresh:
            return None
        k = int(self._ikey[b])
        return k if k >= 0 else self._hkey[b]

    @property
    def block_hashes(self) -> list:
        """Each handed-out block's hash or None, shape (k,) (:attr:`BlockPool.block_hashes`; here
        a new list, O(k))."""
        return [self.hash_of(b) for b in range(self._fresh)]

    def state(self, block_id: int) -> str:
        """``"free"``, ``"cached"`` or ``"in use"`` (:meth:`BlockPool.state`).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        if b >= self._fresh:
            return BLOCK_FREE
        return block_state(int(self._ref[b]), True if self._hashed[b] else None)

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
        self._several = np.concatenate([self._several, np.zeros(grow, dtype=bool)])

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
                assert self._tombstones >= 0, "tombstones miscounted"
                self._head = h + cut
                return win[live[:m]]
            size *= 2

    # ------------------------------------------------------------------ operations

    def _check_free(self, n: int) -> None:
        """Raise OutOfBlocksError (field ``num_blocks``) when fewer than ``n`` blocks are free."""
        if n > self.num_free:
            raise OutOfBlocksError("num_blocks", f"{n} needed, {self.num_free} of "
                                   f"{self.num_blocks} free", needed=n, available=self.num_free)

    def allocate(self, n: int, evicted: list | None = None) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, each with refcount 1
        (:meth:`BlockPool.allocate`: cached ones are evicted, their ids appended to ``evicted``).

        Returns:
            the block ids, in the order they left the queue (shape (n,)).

        Raises:
            OutOfBlocksError: fewer than ``n`` blocks are free (field ``num_blocks``; nothing taken).
        """
        self._check_free(n)
        if n <= 0:
            return []
        fresh = self._take_fresh(n) if self._fresh < self.num_blocks else []
        self.num_free -= n
        m = n - len(fresh)
        if not m:
            return fresh
        out = self._take_few(m, evicted) if m <= _FEW else self._take_many(m, evicted).tolist()
        assert self.num_free >= self.num_blocks - self._fresh, "a never-used block was counted as taken"
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
                    if self._num_dups and self._several.item(b):
                        self._drop_hash(b)
                    elif k >= 0:
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
        """Take one block from the front of the free queue (refcount 1), or None if none is free."""
        if not self.num_free:
            return None
        return self.allocate(1)[0]

    def _evict(self, blocks: np.ndarray, evicted: list | None) -> None:
        """Drop the hashes of the blocks just taken from the queue that had one (evictions)."""
        hit = blocks[self._hashed[blocks]]
        if not len(hit):
            return
        n_hit = len(hit)
        out = hit.tolist() if evicted is not None else None
        if self._num_dups:                  # blocks of a hash naming several: one by one, in queue order
            several = self._several[hit]
            if several.any():
                for b in hit[several].tolist():
                    if self._several[b]:
                        self._drop_hash(b)
                    else:                   # its hash's other blocks were evicted earlier in this call
                        self._drop_last(b)
                self._hashed[hit[several]] = False
                hit = hit[~several]
                if not len(hit):
                    self._count_evicted(n_hit, out, evicted)
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
        self._count_evicted(n_hit, out, evicted)

    def _count_evicted(self, n: int, blocks: list | None, evicted: list | None) -> None:
        """Count ``n`` cached blocks just evicted from the free queue (``blocks``, in queue order,
        appended to ``evicted`` when a list is given)."""
        self.num_cached_free -= n
        assert self.num_cached_free >= 0, "cached free blocks miscounted"
        self.evictions += n
        if evicted is not None:
            evicted.extend(blocks)

    def _drop_last(self, b: int) -> None:
        """Take hashed block ``b``, the only block its hash still names, out of the map: the hash
        finds nothing after it (an eviction of the entry's last block). Clears ``b``'s key, not its
        hash flag (the caller's)."""
        k = self._ikey.item(b)
        if k >= 0:
            self._table[k] = -1
            self._ikey[b] = -1
            self._ntable -= 1
        else:
            del self._cache[self._hkey[b]]
            self._hkey[b] = None

    def _drop_hash(self, b: int) -> None:
        """Take hashed block ``b`` out of its hash's entry, which names several blocks (vLLM's
        ``BlockHashToBlockMap.pop(hash, block_id)``); the hash goes on finding the earliest
        registered of the rest. Clears ``b``'s key, not its hash flag (the caller's)."""
        k = self._ikey.item(b)
        key = k if k >= 0 else self._hkey[b]
        rest = self._dups[key]
        if k >= 0:
            if self._table[k] == b:
                self._table[k] = first = rest.pop(0)
            else:
                rest.remove(b)
                first = int(self._table[k])
            self._ikey[b] = -1
        else:
            if self._cache[key] == b:
                self._cache[key] = first = rest.pop(0)
            else:
                rest.remove(b)
                first = self._cache[key]
            self._hkey[b] = None
        self._several[b] = False
        self._num_dups -= 1
        if not rest:                               # one block left: its hash names only it
            del self._dups[key]
            self._several[first] = False

    def touch(self, blocks) -> None:
        """Add one reference to each block; a block at refcount 0 leaves the free queue first (a
        prefix-cache hit on a cached block).

        Raises:
            FieldError: a block at refcount 0 without a hash, never-used blocks included, or a
                block id outside 0 .. num_blocks - 1 (``block_id``); nothing is changed.
        """
        if not len(blocks):
            return
        arr = ids(blocks)
        if int(_unsigned(arr).max()) >= self._fresh:      # never used, or outside the pool (one pass)
            b = int(arr[(arr < 0) | (arr >= self._fresh)][0])
            self.check_block(b)
            raise FieldError("block_id", f" = {b} is free and not cached: it cannot be shared")
        ref = self._ref
        r = ref[arr]
        zero = r == 0
        if zero.any():
            z = arr[zero]
            if not self._hashed[z].all():
                b = int(z[~self._hashed[z]][0])
                raise FieldError("block_id", f" = {b} is free and not cached: it cannot be shared")
            at = self._qpos[z]
            assert (self._q[at] == z).all(), "a cached block is not at its recorded queue position"
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
            assert self.num_free <= self.num_blocks, "more blocks free than the pool holds"
        return freed

    def release_exclusive(self, blocks) -> None:
        """:meth:`release` (the list pool's fast path for unshared tables; here the same call)."""
        self.release(blocks)

    # ------------------------------------------------------------------ checks

    def check_invariants(self, tables=()) -> None:
        """Assert the pool is consistent: what only this representation has (tombstones, queue
        positions, the queue's cached-block flags, the key table), then the rules every pool keeps,
        :func:`allocator.memory.block_pool.check_pool_state`, on a list copy of its state (the
        free queue holds exactly the blocks with refcount 0; refcounts equal the block tables
        pointing at each block; free + cached + in use == num_blocks; hashes and the map agree),
        and its pool picture's entry.

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
        assert self._num_dups == sum(map(len, self._dups.values())) and all(self._dups.values()), (
            "duplicate blocks miscounted")
        block_map = self.block_map()
        several = sorted(b for blocks in block_map.values() if len(blocks) > 1 for b in blocks)
        assert np.flatnonzero(self._several[:used]).tolist() == several and not self._several[used:].any(), (
            "blocks flagged as sharing their hash differ from the block-hash map")
        refcounts = self._ref[:used].tolist()
        cached_free = self.cached_free_blocks().tolist()
        check_pool_state(self.num_blocks, refcounts=refcounts, hashes=hashes,
                         queue=[b for b in entries if b != _TOMB], block_map=block_map,
                         num_free=self.num_free, cached_free=cached_free, cache_freed=True, tables=tables)
        assert len(cached_free) == self.num_cached_free, "cached free blocks miscounted"
        assert [qpos[b] == -1 for b in range(used)] == [r > 0 for r in refcounts], "queue positions stale"

    # ------------------------------------------------------------------ the block-hash map
    def lookup(self, block_hash) -> int | None:
        """The block a lookup finds under ``block_hash`` (:meth:`BlockPool.lookup`: the earliest
        registered of the blocks it names), or None."""
        if _table_key(block_hash):
            k = int(block_hash)
            b = int(self._table[k]) if k < len(self._table) else -1
            return b if b >= 0 else None
        return self._cache.get(block_hash)

    def lookup_all(self, block_hash) -> list[int]:
        """Every block registered under ``block_hash`` (:meth:`BlockPool.lookup_all`)."""
        first = self.lookup(block_hash)
        if first is None:
            return []
        key = int(block_hash) if _table_key(block_hash) else block_hash
        return [first, *self._dups.get(key, ())]

    def block_map(self) -> dict:
        """The block-hash map written out: hash -> :meth:`lookup_all` (a new dict, O(cached blocks))."""
        in_table = np.flatnonzero(self._table >= 0)
        first = dict(self._cache)
        first.update(zip(in_table.tolist(), self._table[in_table].tolist()))
        return {h: [b, *self._dups.get(h, ())] for h, b in first.items()}

    def lookup_run(self, block_hashes, limit: int) -> list[int]:
        """:meth:`BlockPool.lookup_run`; the hashes are all of one kind (an int64 array or list
        of table keys, found with one numpy gather, or other hashes, found in the dict)."""
        if isinstance(block_hashes, np.ndarray):
            block_hashes = block_hashes[:max(limit, 0)]    # only these are looked up (and checked)
        got = _table_keys(block_hashes)
        if got is None:
            return lookup_prefix(self._cache.get, block_hashes, limit)
        return self._lookup_table(*got, limit).tolist()

    def lookup_run_array(self, block_hashes, limit: int) -> np.ndarray:
        """:meth:`lookup_run` as an int64 array [k] of block ids, k <= max(limit, 0) (the same
        blocks): a prompt's hits go on to the refcounts and its block table without a list.
        Table keys are found with one numpy gather; other hashes in the dict."""
        if isinstance(block_hashes, np.ndarray):
            block_hashes = block_hashes[:max(limit, 0)]    # only these are looked up (and checked)
        got = _table_keys(block_hashes)
        if got is None:
            return np.array(lookup_prefix(self._cache.get, block_hashes, limit), dtype=np.int64)
        return self._lookup_table(*got, limit)

    def _lookup_table(self, keys: np.ndarray, top: int, limit: int) -> np.ndarray:
        """The blocks of the longest registered run of table keys ``keys[:limit]`` (int64 array
        [k]); ``top`` is the largest key (:func:`_table_keys`)."""
        keys = keys[:max(limit, 0)]
        if not len(keys):
            return np.empty(0, dtype=np.int64)
        table = self._table
        if top >= len(table):                       # keys past the table's end are not registered
            found = np.full(len(keys), -1, dtype=np.int64)
            inside = keys < len(table)
            found[inside] = table[keys[inside]]
        else:
            found = table[keys].astype(np.int64)
        first = int(found.argmin())                 # a miss is -1, the least value: its first one
        return found[:first] if found[first] < 0 else found

    def register(self, block_id: int, block_hash) -> bool:
        """Give an in-use block its hash and add it to the block-hash map (:meth:`BlockPool.register`:
        a hash that names other blocks names this one too).

        Returns:
            True if registered; False if this block already has a hash.
        """
        if self._hashed[block_id]:
            return False
        if self.lookup(block_hash) is not None:
            self._add_dup(int(block_id), block_hash)
            return True
        if _table_key(block_hash):
            self._grow_table(int(block_hash))
            self._register_table(np.array([block_id], dtype=np.int64), np.array([int(block_hash)], dtype=np.int64))
            return True
        self._cache[block_hash] = block_id
        self._hashed[block_id] = True
        self._hkey[block_id] = block_hash
        return True

    def _add_dup(self, b: int, key) -> None:
        """Give unhashed block ``b`` the hash ``key``, which already names a block: ``b`` joins
        the end of its entry (vLLM's ``BlockHashToBlockMap.insert``)."""
        if _table_key(key):
            key = int(key)
            self._ikey[b] = key
            first = int(self._table[key])
        else:
            self._hkey[b] = key
            first = self._cache[key]
        self._several[b] = self._several[first] = True
        self._dups.setdefault(key, []).append(b)
        self._num_dups += 1
        self._hashed[b] = True

    def _grow_table(self, top: int) -> None:
        """Make the table hold key ``top`` (doubling it, at least)."""
        if top >= len(self._table):
            grow = max(top + 1, 2 * len(self._table), _MIN_TABLE) - len(self._table)
            self._table = np.concatenate([self._table, np.full(grow, -1, dtype=np.int32)])

    def _register_table(self, arr: np.ndarray, keys: np.ndarray) -> None:
        """Table keys ``keys`` (distinct, none registered, the table already long enough for
        them: :meth:`_grow_table`) for unhashed blocks ``arr``."""
        # int32 values cast in one pass first: a scatter that casts each element costs ~3x
        self._table[keys] = arr.astype(np.int32)
        self._ikey[arr] = keys.astype(np.int32)
        self._hashed[arr] = True
        self._ntable += len(keys)

    def register_all(self, blocks, block_hashes) -> None:
        """Register each block under the hash beside it, in order (:meth:`BlockPool.register_all`:
        a block that has a hash keeps it; a hash that names blocks already gains this one too).
        Keys within one call must be distinct, as a prompt's chained keys are."""
        if not len(blocks):
            return
        arr = ids(blocks)
        if isinstance(block_hashes, np.ndarray):
            block_hashes = block_hashes[:len(arr)]          # only these are registered (and checked)
        got = _table_keys(block_hashes)
        if got is not None:
            tkeys, top = got
            tkeys = tkeys[:len(arr)]
            if not len(tkeys):
                return
            arr = arr[:len(tkeys)]
            # a block already hashed is skipped; a key already registered gains the block (one by one)
            self._grow_table(top)
            taken = self._table[tkeys] >= 0
            taken |= self._hashed[arr]
            if taken.any():
                keep = ~taken
                for b, key in zip(arr[taken].tolist(), tkeys[taken].tolist()):
                    if not self._hashed[b]:
                        self._add_dup(b, key)
                arr, tkeys = arr[keep], tkeys[keep]
                if not len(tkeys):
                    return
            self._register_table(arr, tkeys)
            return
        cache = self._cache
        keys = list(block_hashes)[:len(arr)]
        arr = arr[:len(keys)]
        if any(map(cache.__contains__, keys)) or self._hashed[arr].any():
            keep = []
            for i, (b, h) in enumerate(zip(arr.tolist(), keys)):
                if self._hashed[b]:
                    continue
                if h in cache:
                    self._add_dup(b, h)
                else:
                    keep.append(i)
            arr, keys = arr[keep], [keys[i] for i in keep]
        cache.update(zip(keys, arr.tolist()))
        self._hashed[arr] = True
        hk = np.empty(len(keys), dtype=object)
        hk[:] = keys
        self._hkey[arr] = hk
