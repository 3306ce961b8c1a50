"""The host (CPU) pool that holds swapped-out sequences' blocks until they come back.

When the paged allocator preempts by swap (:class:`allocator.memory.paged.PagedAllocator` with
``preemption="swap"``, and the Block tables page's :class:`allocator.memory.block_manager.BlockManager`),
a sequence's private GPU blocks are copied to host blocks taken from :class:`HostPool`; they
return to it when the sequence is swapped back in. The pool only counts and names host blocks:
which GPU block a host block mirrors is the caller's record. Its memory grows with the host
blocks used, not with its size, as :mod:`allocator.memory.block_pool`'s does.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), section 4.5 (swapping to a CPU block allocator);
vLLM v0's vllm/core/block_manager.py (swap out / swap in).
"""
from __future__ import annotations

from collections import deque

from allocator.common.errors import OutOfBlocksError
from allocator.common.validate import whole_number


class HostPool:
    """Host (CPU) blocks that hold swapped-out sequences' blocks until they come back.

    Args:
        num_blocks: host blocks (>= 0).

    Raises:
        FieldError: ``num_host_blocks`` not a whole number >= 0.

    Source: PagedAttention (SOSP 2023) section 4.5: swapped blocks go to a CPU block allocator
    and must return to GPU blocks before the sequence runs again.
    """

    def __init__(self, num_blocks: int):
        self.num_blocks = whole_number("num_host_blocks", num_blocks, 0)
        self._fresh = 0                     # never-used host blocks fresh .. num_blocks - 1 come first
        self._free: deque[int] = deque()    # host blocks given back, oldest first

    def __eq__(self, other) -> bool:
        """Equal when both hold the same free host blocks in the same order."""
        return type(other) is type(self) and vars(self) == vars(other)

    __hash__ = None

    @property
    def num_free(self) -> int:
        """Host blocks not holding anything."""
        return self.num_blocks - self._fresh + len(self._free)

    def take(self, n: int) -> list[int]:
        """Take ``n`` host blocks: never-used ones first (in id order), then the oldest given back.
        Memory grows with the host blocks used, not with ``num_blocks``.

        Raises:
            OutOfBlocksError: fewer than ``n`` are free (field ``num_host_blocks``; nothing taken).
        """
        free = self.num_free
        if n > free:
            raise OutOfBlocksError("num_host_blocks", f"{n} needed, {free} "
                                   f"of {self.num_blocks} free", needed=n, available=free)
        f = self._fresh
        k = min(max(n, 0), self.num_blocks - f)
        self._fresh = f + k
        return list(range(f, f + k)) + [self._free.popleft() for _ in range(n - k)]

    def give_back(self, host_blocks) -> None:
        """Return host blocks to the pool (they join the back of its free list)."""
        self._free.extend(host_blocks)

    def check_invariants(self, held: int) -> None:
        """Assert that ``held`` blocks in use plus the free ones make up the pool."""
        assert held + self.num_free == self.num_blocks, "host blocks lost"
        assert len(set(self._free)) == len(self._free), "a host block is free twice"
        assert all(b < self._fresh for b in self._free), "a never-used host block is stored as given back"
