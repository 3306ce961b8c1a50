"""The block-hash map of :class:`allocator.memory.array_pool.ArrayBlockPool`: int keys in an array.

A trace's block keys (:meth:`allocator.workloads.mooncake.TracePrompts.block_keys`) are dense ints, so the
map from key to block is an int32 array indexed by key: a prompt's hundreds of lookups,
registrations and (in the pool) evictions are one numpy gather or scatter each, not a dict
operation per block. Its size follows the keys' range, which for dense keys is about the number
of distinct blocks (4 bytes each: less than a dict of them). Other keys (sha256 bytes, the
shared system prompt's and vLLM v1's) live in a dict, as in :class:`allocator.memory.block_pool.BlockPool`.
One call's keys are all of one kind (judged by the first). Rules as in BlockPool: the first
registration of a key wins, a block keeps its first hash, a run of lookups stops at the first miss.
"""
from __future__ import annotations

import numpy as np

_MIN_TABLE = 1024

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


def ids(blocks) -> np.ndarray:
    """Block ids as an int64 array (an array is taken as it is)."""
    return blocks if isinstance(blocks, np.ndarray) else np.array(blocks, dtype=np.int64)


class KeyTable:
    """Lookups and registrations of :class:`~allocator.memory.array_pool.ArrayBlockPool` (a mixin: it
    uses the pool's ``_table``, ``_ntable``, ``_cache``, ``_hashed``, ``_ikey`` and ``_hkey``)."""

    @property
    def num_cached(self) -> int:
        return len(self._cache) + self._ntable

    def lookup(self, block_hash) -> int | None:
        if _table_key(block_hash):
            k = int(block_hash)
            b = int(self._table[k]) if k < len(self._table) else -1
            return b if b >= 0 else None
        return self._cache.get(block_hash)

    def lookup_run(self, block_hashes, limit: int) -> list[int]:
        """:meth:`BlockPool.lookup_run`; the hashes are all of one kind (an int64 array or list
        of table keys, found with one numpy gather, or other hashes, found in the dict)."""
        if isinstance(block_hashes, np.ndarray):
            block_hashes = block_hashes[:max(limit, 0)]    # only these are looked up (and checked)
        got = _table_keys(block_hashes)
        if got is None:
            return super().lookup_run(block_hashes, limit)
        return self._lookup_table(*got, limit).tolist()

    def lookup_run_array(self, block_hashes, limit: int) -> np.ndarray:
        """:meth:`lookup_run` as an int64 array [k] of block ids, k <= max(limit, 0) (the same
        blocks): a prompt's hits go on to the refcounts and its block table without a list.
        Table keys are found with one numpy gather; other hashes in the dict."""
        if isinstance(block_hashes, np.ndarray):
            block_hashes = block_hashes[:max(limit, 0)]    # only these are looked up (and checked)
        got = _table_keys(block_hashes)
        if got is None:
            return np.array(super().lookup_run(block_hashes, limit), dtype=np.int64)
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
        if self.lookup(block_hash) is not None or self._hashed[block_id]:
            return False
        if _table_key(block_hash):
            self._grow_table(int(block_hash))
            self._register_table(np.array([block_id], dtype=np.int64), np.array([int(block_hash)], dtype=np.int64))
            return True
        self._cache[block_hash] = block_id
        self._hashed[block_id] = True
        self._hkey[block_id] = block_hash
        return True

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
        """Register each block under the hash beside it (in order; the first registration wins).
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
            # a key already registered, or a block already hashed, is skipped (the first wins)
            self._grow_table(top)
            taken = self._table[tkeys] >= 0
            taken |= self._hashed[arr]
            if taken.any():
                keep = ~taken
                arr, tkeys = arr[keep], tkeys[keep]
                if not len(tkeys):
                    return
            self._register_table(arr, tkeys)
            return
        cache = self._cache
        keys = list(block_hashes)[:len(arr)]
        arr = arr[:len(keys)]
        if any(map(cache.__contains__, keys)) or self._hashed[arr].any():
            keep = [i for i, (b, h) in enumerate(zip(arr.tolist(), keys))
                    if h not in cache and not self._hashed[b]]
            arr, keys = arr[keep], [keys[i] for i in keep]
        cache.update(zip(keys, arr.tolist()))
        self._hashed[arr] = True
        hk = np.empty(len(keys), dtype=object)
        hk[:] = keys
        self._hkey[arr] = hk
