"""Preemption in the block manager: swap a sequence's blocks to the host pool and back, or drop
them to recompute the sequence later.

:class:`BlockSwap` is a base class of :class:`allocator.memory.block_manager.BlockManager` and uses its
state and internals (``pool``, ``host``, ``_contents``, ``_host_contents``, ``_take``,
``_release``, ``_seal``, ``free``). Source: Kwon et al., PagedAttention, SOSP 2023, section 4.5
(preemption by swapping and by recomputation; the CPU block allocator).
"""
from __future__ import annotations

from allocator.common.errors import FieldError, OutOfBlocksError

__all__ = ["BlockSwap"]


class BlockSwap:
    """Swap out, swap in and recompute for :class:`allocator.memory.block_manager.BlockManager`."""

    def preempt_recompute(self, seq_id) -> list[int]:
        """Preempt by recomputation: free the sequence's blocks and return its token ids.

        The caller re-admits the sequence later with :meth:`allocate` (its full blocks may still
        be found in the cache then). PagedAttention section 4.5.

        Raises:
            FieldError: unknown or swapped ``seq_id``.
        """
        seq = self._seq(seq_id)
        tokens = list(seq.token_ids)
        self.free(seq_id)
        self.recompute_preemptions += 1
        return tokens

    def swap_out(self, seq_id) -> list[tuple[int, int]]:
        """Preempt by swapping: copy the sequence's blocks to the host pool and release them.

        Every logical block gets its own host block (shared GPU blocks stay on the GPU for their
        other holders). Cached blocks released here stay findable until reused.

        Returns:
            (gpu_block, host_block) pairs, in logical order.

        Raises:
            FieldError: unknown or already swapped ``seq_id``.
            OutOfBlocksError: the host pool has fewer free blocks than the sequence holds (field
                ``num_host_blocks``; nothing moves then).
        """
        seq = self._seq(seq_id)
        need = len(seq.block_table)
        if need > self.host.num_free:
            raise OutOfBlocksError("num_host_blocks", f"sequence {seq_id!r} needs {need} "
                                   f"host blocks but only {self.host.num_free} of {self.num_host_blocks} are free",
                                   needed=need, available=self.host.num_free)
        host_blocks = self.host.take(need)
        for b, h in zip(seq.block_table, host_blocks):
            self._host_contents[h] = list(self._contents[b])
        mapping = list(zip(seq.block_table, host_blocks))
        self._release(seq.block_table)
        seq.host_table, seq.block_table, seq.swapped = host_blocks, [], True
        self.swapped_out_blocks += need
        self.swap_preemptions += 1
        return mapping

    def swap_in(self, seq_id) -> list[tuple[int, int]]:
        """Bring a swapped-out sequence back into any free GPU blocks before it resumes.

        Returns:
            (host_block, gpu_block) pairs, in logical order.

        Raises:
            FieldError: unknown ``seq_id`` or one that is not swapped out.
            OutOfBlocksError: too few GPU blocks can be taken (nothing moves then).
        """
        seq = self._seq(seq_id, running=False)
        if not seq.swapped:
            raise FieldError("seq_id", f": sequence {seq_id!r} is not swapped out")
        need = len(seq.host_table)
        if need > self.pool.num_free:
            raise self._out_of_blocks(need, f"sequence {seq_id!r} needs {need} GPU blocks to swap in but only "
                                            f"{self.pool.num_free} can be taken")
        gpu_blocks = self._take(need, [])
        for h, b in zip(seq.host_table, gpu_blocks):
            self._contents[b] = self._host_contents[h]
            self._host_contents[h] = []
        mapping = list(zip(seq.host_table, gpu_blocks))
        self.host.give_back(seq.host_table)
        seq.block_table, seq.host_table, seq.swapped = gpu_blocks, [], False
        for i in range(len(seq.token_ids) // self.block_size):
            self._seal(seq, i)
        self.swapped_in_blocks += need
        return mapping
