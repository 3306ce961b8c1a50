"""Pool pictures of the cached free blocks, kept up to date from what changed (issue 24).

A pool picture (``PagedAllocator.snapshot``) lists the blocks with refcount 0 still findable by
hash, in free-queue order. With prefix caching on a long trace that list holds up to a million
blocks and a run takes hundreds of pictures, so it is not rebuilt by a scan of the queue each
time. :class:`CachedFreePicture` keeps the last picture: when little changed since, only the
change is applied (blocks that left the queue, logged as arrays by the operations that took
them, are dropped; the cached blocks that joined its tail are added), so a picture costs
O(blocks that changed); when much changed, one numpy pass over the queue lists them again.
Used by :class:`allocator.array_pool.ArrayBlockPool` (its ``_q``, ``_head``, ``_tail``,
``_hashed`` and ``_in_picture`` arrays).
"""
from __future__ import annotations

from collections import deque
from itertools import repeat

import numpy as np

#: Runs an iterator to its end in C (a C-level loop over ``map(...)``).
drain = deque(maxlen=0).extend

_TOMB = -1               # a queue entry whose block left the queue early (a cache hit)
#: A picture is listed again by a pass over the queue when more than 1/_REBUILD of it changed
#: (a dict update per changed block costs about five times a block of the pass).
_REBUILD = 5


class CachedFreePicture:
    """The cached free blocks in queue order, for pool pictures (a mixin of the array pool)."""

    def _forget_picture(self) -> None:
        """Stop keeping the picture (the next one is a pass over the queue)."""
        self._picture = None                # the last picture: a list or a dict's keys, or None
        self._left: list = []               # arrays of blocks that left the queue since then
        self._left_n = 0                    # their total length
        self._pic_tail = 0                  # the queue's tail at the last picture

    def cached_free_queue(self) -> list[int]:
        return list(self._synced_picture())

    def cached_free_blocks(self) -> tuple:
        """:meth:`cached_free_queue` as a new tuple (a pool picture's entry)."""
        return tuple(self._synced_picture())

    def _synced_picture(self):
        """The cached free blocks in queue order (a list or a dict's keys), brought up to date.

        Kept once asked for. When little changed since the last call, only the change is applied
        to a dict of the last picture: blocks that left the queue (logged, as arrays, by the
        operations that took them) are dropped and the cached blocks that joined its tail are
        added, so pictures taken every step cost O(blocks that changed). When much changed (or
        on the first call), one numpy pass over the queue lists them again (issue 24)."""
        p = self._picture
        changes = self._left_n + self._tail - max(self._pic_tail, self._head)
        if p is None or changes > len(p) // _REBUILD + 64:
            live = self._queued()
            cached = live[self._hashed[live]]
            p = cached.tolist()
            self._in_picture[:] = False
            self._in_picture[cached] = True
        else:
            if type(p) is list:
                p = dict.fromkeys(p)
            if self._left:
                left = np.concatenate(self._left) if len(self._left) > 1 else self._left[0]
                left = left[self._in_picture[left]]
                if len(left):
                    self._in_picture[left] = False
                    drain(map(p.pop, left.tolist(), repeat(None)))   # a block may have left twice
            joined = self._q[max(self._pic_tail, self._head):self._tail]
            joined = joined[joined != _TOMB]
            joined = joined[self._hashed[joined]]
            if len(joined):
                self._in_picture[joined] = True
                drain(map(p.__setitem__, joined.tolist(), repeat(None)))
        self._picture, self._left, self._left_n, self._pic_tail = p, [], 0, self._tail
        return p

    def _log_left(self, blocks: np.ndarray) -> None:
        """Note blocks that left the queue for the next picture; past a fifth of the picture,
        forget it instead (the next picture is one pass over the queue), so the log stays small
        when pictures are rare."""
        self._left.append(blocks)
        self._left_n += len(blocks)
        if self._left_n > len(self._picture) // _REBUILD + 64:
            self._forget_picture()
