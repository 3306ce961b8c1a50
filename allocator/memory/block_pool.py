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
* One hash may name **several blocks**, as in vLLM: a block computed again while an identical
  block is cached (a prompt whose last full block is not a cache hit, or two requests prefilling
  the same prefix at once) is registered under the same hash and joins that hash's entry; blocks
  are never de-duplicated, since a block table only grows at its end and never re-points an
  entry. A lookup finds the earliest-registered block still in the entry; evicting one block
  removes only that block, so the hash still finds the others. Sources: vLLM's
  vllm/v1/core/block_pool.py -- ``BlockHashToBlockMap`` (``get_one_block``: any block of the
  entry, the first inserted; ``insert``: joins the entry; ``pop(key, block_id)``: removes that
  block only), ``BlockPool.cache_full_blocks`` (every newly full block gets its hash, no
  de-duplication check: "block tables are append-only") and
  ``BlockPool._maybe_evict_cached_block`` (an evicted block leaves its hash's entry).
* Touching a cached block that waits in the queue takes it out of the queue (a cache hit).
  Invariant: ``free (no hash) + cached (refcount 0, hashed) + in use == num_blocks``.
* One block's state at a moment is a :class:`KVCacheBlock` (``BlockPool.block(block_id)``):
  its id, refcount, hash and whether it is free, cached or in use.

Representation (why the state is lists, not one object per block)
-------------------------------------------------------------------
* Memory grows with the blocks used, not with the pool's size: never-used blocks wait at the
  front of the free queue in id order, unstored (a counter hands out their ids; the per-block
  lists grow as ids are first handed out), so a pool of 2**30 blocks costs what the blocks it used
  cost. A pool built with an explicit ``free_order`` stores its whole queue (small pools).
* The free queue is a list with a head index; a cached block taken out of its middle by a cache
  hit leaves a tombstone that allocation skips, and the list is compacted once half of it is
  consumed entries (amortised O(1) per block). With ``cache_freed=True`` each queued block's
  position in the list is kept, so a hit finds its entry in O(1) (vLLM's
  ``FreeKVCacheBlockQueue`` gets the same from a doubly linked list of its block objects).
* Refcounts are stored only once they can say something: while a pool that forgets freed blocks'
  hashes (``cache_freed=False``) has shared nothing, a block handed out has refcount 1 and any
  other 0, so handing a block out or taking it back writes no refcount (in the engine's paged runs
  without sharing, those writes were a fifth of the run). The first operation that shares a block,
  releases by count or asks one block's refcount stores them all, once (O(blocks handed out)).

The cheap invariants are asserted inside the operations that could break them; the whole state
is checked by :meth:`BlockPool.check_invariants` (after every engine step in tests), whose rules
over plain lists, :func:`check_pool_state`, also check
:class:`allocator.memory.array_pool.ArrayBlockPool`: these rules with numpy state, which the engine's
prefix-caching runs use so a prompt's hundreds of blocks move in a few array operations
(``tests/core/test_block_pool.py`` checks both against one plain-list model and against each
other, block by block). The host (CPU) pool for swapped-out sequences is
:class:`allocator.memory.host_pool.HostPool`.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), sections 4.2-4.4 (block tables, refcounts,
sharing); vLLM's vllm/v1/core/block_pool.py, and the ``KVCacheBlock`` and ``FreeKVCacheBlockQueue``
of vllm/v1/core/kv_cache_utils.py (LRU eviction order, blocks freed in reverse order);
``assets/reference_figures.md`` R8.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from operator import itemgetter

from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.common.validate import whole_number

#: Block states, as :meth:`BlockPool.state` and :attr:`KVCacheBlock.state` report them.
BLOCK_FREE, BLOCK_CACHED, BLOCK_IN_USE = "free", "cached", "in use"

_TOMBSTONE = -1          # a queue entry whose block left the queue early (a cache hit)
_COMPACT_AFTER = 4096    # queue entries consumed before the queue list is trimmed


@dataclass(frozen=True)
class KVCacheBlock:
    """One physical KV-cache block as a pool sees it at one moment (``BlockPool.block(block_id)``).

    vLLM v1 keeps one such object per block and links the free ones into its free queue; here it
    is a read-only snapshot built on request, since the pools keep their state in lists (or numpy
    arrays) that grow with the blocks used (see the module docstring). Two pools that followed the
    same rules give equal snapshots for every block.

    Source: vLLM's ``KVCacheBlock`` (vllm/v1/core/kv_cache_utils.py).
    """

    #: Physical block id, 0 .. num_blocks - 1 (which block of the K/V tensors this is).
    block_id: int
    #: Reference count: block tables pointing at the block (0 while it waits in the free queue).
    ref_cnt: int
    #: The hash the block is found by (prefix caching; bytes, or an int trace key in the array
    #: pool), or None. Set when a full block in use is registered; dropped when the free queue
    #: hands the block out again (an eviction) or, with ``cache_freed=False``, when it is released.
    block_hash: bytes | int | None
    #: :data:`BLOCK_FREE` (refcount 0, no hash), :data:`BLOCK_CACHED` (refcount 0, still found by
    #: its hash) or :data:`BLOCK_IN_USE` (refcount >= 1).
    state: str

    @property
    def is_free(self) -> bool:
        """True while the block waits in the free queue (refcount 0, cached or not)."""
        return self.ref_cnt == 0

    @property
    def is_cached(self) -> bool:
        """True while the block can be found by its hash (in use or waiting in the free queue)."""
        return self.block_hash is not None


def block_state(ref_cnt: int, block_hash) -> str:
    """A block's state from its refcount and hash: in use, else cached (hashed) or free."""
    if ref_cnt > 0:
        return BLOCK_IN_USE
    return BLOCK_CACHED if block_hash is not None else BLOCK_FREE


def lookup_prefix(get, block_hashes, limit: int) -> list:
    """The blocks registered under the leading hashes of ``block_hashes`` (at most ``limit`` of
    them), up to the first hash not found: a prompt's longest cached prefix.

    Args:
        get: the block-hash map's lookup (``dict.get``: a hash -> its block id, or None).
        block_hashes: a sequence or iterable of hashes, in block order.
        limit: the most blocks to look up (<= 0: none).

    Returns:
        the block ids found, shape (k,), k <= max(limit, 0).

    Looks the hashes up in chunks of doubling size (C-level loops, at most twice the run found).
    """
    if not isinstance(block_hashes, list):
        block_hashes = list(islice(block_hashes, max(limit, 0)))
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


def check_pool_state(num_blocks: int, *, refcounts: list, hashes: list, queue: list, block_map: dict,
                     num_free: int, cached_free: list, cache_freed: bool, tables=()) -> None:
    """Assert the rules every block pool keeps, on its state written out as plain lists.

    :meth:`BlockPool.check_invariants` and :meth:`allocator.memory.array_pool.ArrayBlockPool.check_invariants`
    both end here, each after checking what only its own representation has.

    Args:
        num_blocks: blocks in the pool.
        refcounts: refcounts of the blocks handed out so far, shape (k,): blocks 0 .. k - 1
            (every block at or past k was never used and waits, unstored, at the queue's front).
        hashes: each of those blocks' hash or None, shape (k,).
        queue: the released blocks waiting in the free queue, front (least recently used) first.
        block_map: the block-hash map, hash -> the block ids it names (the one a lookup
            finds first; several when an identical block was computed again).
        num_free: the pool's count of free blocks (the free queue's length).
        cached_free: the blocks with refcount 0 and a hash, as the pool lists them.
        cache_freed: whether released blocks keep their hash.
        tables: every block table holding blocks (iterables of block ids); when given, each
            block's refcount must equal the number of tables listing it.

    Raises:
        AssertionError naming the first inconsistency: a block both queued and referenced, a
        block queued twice, refcount != tables pointing at it, free + cached + in use !=
        num_blocks, cached free blocks out of queue order, a stale hash entry, a hashed block
        missing from its hash's entry or listed twice.
    """
    used = len(refcounts)
    assert len(hashes) == used <= num_blocks, "per-block lists do not cover exactly the blocks handed out"
    assert len(set(queue)) == len(queue), "a block is queued twice"
    assert all(0 <= b < used for b in queue), "a never-used block is stored in the queue"
    assert len(queue) + num_blocks - used == num_free, (
        f"{len(queue) + num_blocks - used} queued but {num_free} counted free")
    unreferenced = {b for b in range(used) if refcounts[b] == 0}
    assert set(queue) == unreferenced, "the free queue does not hold exactly the blocks with refcount 0"
    assert all(r >= 0 for r in refcounts), "a negative refcount"
    tables = list(tables)
    if tables:
        pointing = [0] * used
        for table in tables:
            for b in table:
                assert b < used, f"block {b} is in a block table but was never handed out"
                pointing[b] += 1
        for b in range(used):
            assert pointing[b] == refcounts[b], (
                f"block {b}: refcount {refcounts[b]} but {pointing[b]} block tables point at it")
    expect = [b for b in queue if hashes[b] is not None]
    assert list(cached_free) == expect, (
        f"cached free blocks {list(cached_free)[:8]}.. are not the hashed blocks of the queue in its order")
    in_use = used - len(queue)
    assert (num_free - len(expect)) + len(expect) + in_use == num_blocks, (
        f"free {num_free - len(expect)} + cached {len(expect)} + in use {in_use} != {num_blocks} blocks")
    listed = 0
    for h, blocks in block_map.items():
        assert blocks, "an empty entry in the block-hash map"
        for b in blocks:
            assert 0 <= b < used and hashes[b] == h, f"cache entry for block {b} does not match its hash"
        listed += len(blocks)
    assert sum(1 for h in hashes if h is not None) == listed, "stray block hash, or a block listed twice"
    if not cache_freed:
        assert not expect, "a released block kept its hash although cache_freed is False"


class BlockPool:
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
        # each queued block's index in self._queue (-1: not queued); kept only when cache hits
        # can take a block out of the queue's middle (cache_freed=True)
        self._pos = [0] * n if self.cache_freed else None
        if self._pos is not None:
            for i, b in enumerate(order):
                self._pos[b] = i
        self._hash: list[bytes | None] = [None] * n     # each block's hash, or None
        # the block-hash map: hash -> the block a lookup finds (the earliest registered still there),
        # and, for a hash that names several blocks, hash -> the later ones in the order registered
        self._cache: dict[bytes, int] = {}
        self._dups: dict[bytes, list[int]] = {}
        self._num_dups = 0                              # blocks listed in self._dups
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

    # ------------------------------------------------------------------ one block

    def check_block(self, block_id) -> int:
        """Return ``block_id`` as an int in 0 .. num_blocks - 1, else raise FieldError (``block_id``)."""
        return whole_number("block_id", block_id, 0, self.num_blocks - 1)

    def block(self, block_id) -> KVCacheBlock:
        """A read-only snapshot of one block: its id, refcount, hash and state.

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        if b >= self._fresh:                   # never used: free, no hash
            return KVCacheBlock(b, 0, None, BLOCK_FREE)
        ref, h = self._refcounts()[b], self._hash[b]
        return KVCacheBlock(b, ref, h, block_state(ref, h))

    def refcount(self, block_id: int) -> int:
        """Block tables pointing at ``block_id`` (0 when it waits in the free queue).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        ref = self._stored_refcounts()         # a caller may go block by block: store them once
        return ref[b] if b < self._fresh else 0

    def hash_of(self, block_id: int) -> bytes | None:
        """The hash a block can be found by, or None.

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        return self._hash[b] if b < len(self._hash) else None

    @property
    def block_hashes(self) -> list:
        """Each handed-out block's hash or None, shape (k,), k <= num_blocks: block ids 0 .. k - 1
        as in :attr:`refcounts` (every block at or past k has none). The pool's own list: read it,
        never write it (O(1); for a pass over many blocks, where :meth:`hash_of` checks each id)."""
        return self._hash

    def state(self, block_id: int) -> str:
        """:data:`BLOCK_FREE`, :data:`BLOCK_CACHED` (refcount 0 but findable by hash) or
        :data:`BLOCK_IN_USE` (``block(block_id).state``).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        b = self.check_block(block_id)
        if b >= self._fresh:
            return BLOCK_FREE
        return block_state(self._stored_refcounts()[b], self._hash[b])

    # ------------------------------------------------------------------ refcounts

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

    @property
    def stores_refcounts(self) -> bool:
        """Whether refcounts are stored yet (see the module docstring; a pool with
        ``cache_freed=True`` always stores them)."""
        return self._ref is not None

    def store_refcounts(self) -> None:
        """Store the refcounts now rather than at the first share (answers are the same either
        way; tests compare a pool that stores them with one that does not)."""
        self._stored_refcounts()

    def count_refcount(self, blocks, value: int) -> int:
        """How many of ``blocks`` have refcount ``value`` (blocks handed out before)."""
        if not len(blocks):
            return 0
        ref = self._stored_refcounts()
        if len(blocks) > 1:
            return itemgetter(*blocks)(ref).count(value)
        return sum(1 for b in blocks if ref[b] == value)

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

    # ------------------------------------------------------------------ counts and the free queue

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
        """Blocks with a hash (cached), referenced or not: a hash that names several blocks
        counts each of them."""
        return len(self._cache) + self._num_dups

    def free_queue(self, *, never_used: bool = True) -> list[int]:
        """Block ids with refcount 0, in the order allocation takes them (least recently used first:
        never-used blocks in id order, then released ones; ``never_used=False``: the released ones
        only). O(num_free): for small pools and tests."""
        released = [b for b in self._queue[self._head:] if b != _TOMBSTONE]
        return list(range(self._fresh, self.num_blocks)) + released if never_used else released

    def cached_free_queue(self) -> list[int]:
        """Blocks with refcount 0 that are still findable by hash, least recently used first."""
        return list(self._cached_free)

    def cached_free_blocks(self) -> tuple:
        """:meth:`cached_free_queue` as a tuple (a pool picture's entry)."""
        return tuple(self._cached_free)

    # ------------------------------------------------------------------ the block-hash map

    def lookup(self, block_hash: bytes) -> int | None:
        """The block a prefix-cache lookup finds under ``block_hash`` (in use or cached): the
        earliest registered of the blocks that hash names, or None. Source: vLLM's
        ``BlockHashToBlockMap.get_one_block`` (vllm/v1/core/block_pool.py)."""
        return self._cache.get(block_hash)

    def lookup_all(self, block_hash: bytes) -> list[int]:
        """Every block registered under ``block_hash`` (in use or cached), the one :meth:`lookup`
        finds first, then the others in the order they were registered; [] if none."""
        first = self._cache.get(block_hash)
        return [] if first is None else [first, *self._dups.get(block_hash, ())]

    def block_map(self) -> dict:
        """The block-hash map written out: hash -> :meth:`lookup_all` (a new dict, O(cached blocks))."""
        dups = self._dups
        return {h: [b, *dups.get(h, ())] for h, b in self._cache.items()}

    def lookup_run(self, block_hashes, limit: int) -> list[int]:
        """The blocks registered under the leading hashes of ``block_hashes`` (at most ``limit``
        of them), up to the first hash not found: a prompt's longest cached prefix in one call
        (:func:`lookup_prefix`)."""
        return lookup_prefix(self._cache.get, block_hashes, limit)

    # ------------------------------------------------------------------ never-used blocks

    def _take_fresh(self, n: int) -> list[int]:
        """Hand out up to ``n`` never-used blocks (the front of the queue), refcount 1; grows the
        per-block lists to cover them."""
        f = self._fresh
        k = min(n, self.num_blocks - f)
        if k <= 0:
            return []
        self._fresh = f + k
        assert self._fresh <= self.num_blocks
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
        if n > self.num_free:                  # (the check inline: the engine allocates almost every step)
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
        assert self.num_free >= self.num_blocks - self._fresh, "a never-used block was counted as taken"
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
            assert self._pos[b] == h, f"block {b}: recorded queue position {self._pos[b]} != {h}"
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
            FieldError: a block at refcount 0 without a hash, never-used blocks included, or a
                block id outside 0 .. num_blocks - 1 (``block_id``): only a block in use or a
                cached block can be found and reused; nothing is changed.
        """
        ref, hashes = self._stored_refcounts(), self._hash
        try:
            for b in blocks:
                if ref[b] == 0 and hashes[b] is None or b < 0:    # (a negative index would wrap around)
                    raise self._unshareable(b)
        except IndexError:                                  # never handed out: not in the per-block lists
            raise self._unshareable(next(b for b in blocks if b >= self._fresh)) from None
        queue, pos, cached = self._queue, self._pos, self._cached_free
        taken = 0
        for b in blocks:
            if ref[b] == 0:
                at = pos[b]
                assert queue[at] == b, f"cached block {b} is not at its recorded queue position {at}"
                queue[at] = _TOMBSTONE
                pos[b] = -1
                del cached[b]
                taken += 1
            ref[b] += 1
        self._tombstones += taken
        self.num_free -= taken

    def _unshareable(self, block_id) -> FieldError:
        """The refusal of :meth:`touch` for ``block_id`` (FieldError naming ``block_id``: outside
        the pool, or free and not cached)."""
        b = self.check_block(block_id)
        return FieldError("block_id", f" = {b} is free and not cached: it cannot be shared")

    def register(self, block_id: int, block_hash: bytes) -> bool:
        """Give an in-use block its hash and add it to the block-hash map (a newly full block).

        A hash that already names other blocks (an identical block computed again) names this
        one too; :meth:`lookup` still finds the earliest registered. Source: vLLM's
        ``BlockPool.cache_full_blocks`` and ``BlockHashToBlockMap.insert``
        (vllm/v1/core/block_pool.py).

        Returns:
            True if registered; False if this block already has a hash (a block keeps the hash
            it was given until it is evicted; vLLM asserts it has none).
        """
        assert 0 <= block_id < self._fresh, f"block {block_id} was never handed out: it cannot be registered"
        if self._hash[block_id] is not None:
            return False
        self._index(block_id, block_hash)
        return True

    def register_all(self, blocks, block_hashes) -> None:
        """:meth:`register` each block under the hash beside it, in order (one call for a whole
        prompt's blocks: the allocator's fast path). Same rules: a block that has a hash keeps it."""
        cache, hashes = self._cache, self._hash
        for b, h in zip(blocks, block_hashes):
            if hashes[b] is None:
                if h in cache:
                    self._index(b, h)
                else:
                    cache[h] = b
                    hashes[b] = h

    def _index(self, b: int, h) -> None:
        """Give block ``b`` hash ``h`` and add it to that hash's entry (the first, or after the others)."""
        if h in self._cache:
            self._dups.setdefault(h, []).append(b)
            self._num_dups += 1
        else:
            self._cache[h] = b
        self._hash[b] = h

    def _unindex(self, b: int, h) -> None:
        """Take block ``b`` out of hash ``h``'s entry (vLLM's ``BlockHashToBlockMap.pop(h, b)``):
        the hash keeps finding the other blocks it names, the earliest registered first."""
        cache, dups = self._cache, self._dups
        rest = dups.get(h)
        if rest is None:
            assert cache.get(h) == b, f"block {b} is not in the entry of its hash"
            del cache[h]
        else:
            if cache[h] == b:
                cache[h] = rest.pop(0)
            else:
                rest.remove(b)
            self._num_dups -= 1
            if not rest:
                del dups[h]

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
                hashes = self._hash
                for b in freed:
                    h = hashes[b]
                    if h is not None:
                        self._unindex(b, h)
                        hashes[b] = None
        assert self.num_free <= self.num_blocks, "more blocks free than the pool holds"
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
        assert self.num_free <= self.num_blocks, "more blocks free than the pool holds"

    # ------------------------------------------------------------------ internals

    def _evict(self, blocks, evicted: list | None) -> None:
        """Drop the hashes of the blocks just taken from the queue that had one (evictions)."""
        hashes, cache, cached, dups = self._hash, self._cache, self._cached_free, self._dups
        n = 0
        for b in blocks:
            h = hashes[b]
            if h is not None:
                if dups:
                    self._unindex(b, h)
                else:
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
        assert len(live) == self.num_free - (self.num_blocks - self._fresh), "queued blocks miscounted"
        self._queue, self._head, self._tombstones = live, 0, 0
        if self._pos is not None:
            for i, b in enumerate(live):
                self._pos[b] = i

    # ------------------------------------------------------------------ checks

    def check_invariants(self, tables=()) -> None:
        """Assert the pool is consistent and, given every block table (iterables of block ids), that
        refcounts match them: the queue positions it records, then :func:`check_pool_state` (the
        free queue holds exactly the blocks with refcount 0, each once; refcounts equal the block
        tables pointing at each block; free + cached + in use == num_blocks; the block-hash map
        and the blocks' hashes agree). Checking stores nothing (refcounts are derived if unstored).

        Raises:
            AssertionError naming the first inconsistency.
        """
        used = self._fresh
        assert len(self._hash) == used and (self._ref is None or len(self._ref) == used), (
            "per-block lists do not cover exactly the blocks handed out")
        assert self._pos is None or len(self._pos) == used, "queue positions do not cover the blocks handed out"
        assert self._tombstones == self._queue[self._head:].count(_TOMBSTONE), "tombstones miscounted"
        assert set(self._dups) <= set(self._cache) and all(self._dups.values()), "a stray or empty duplicate entry"
        assert self._num_dups == sum(map(len, self._dups.values())), "duplicate blocks miscounted"
        if self._pos is not None:
            for i, b in enumerate(self._queue):
                if b != _TOMBSTONE and i >= self._head:
                    assert self._pos[b] == i, f"block {b}: queue position {self._pos[b]} != {i}"
        check_pool_state(self.num_blocks, refcounts=self._refcounts(), hashes=self._hash,
                         queue=self.free_queue(never_used=False), block_map=self.block_map(),
                         num_free=self.num_free, cached_free=list(self._cached_free),
                         cache_freed=self.cache_freed, tables=tables)
        assert self.num_plain_free + self.num_cached_free + self.num_in_use == self.num_blocks, (
            f"free {self.num_plain_free} + cached {self.num_cached_free} + in use {self.num_in_use} "
            f"!= {self.num_blocks} blocks")
