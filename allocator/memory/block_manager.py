"""A token-level block manager: refcounted blocks, copy-on-write, prefix caching and swap.

The simulation engine (:mod:`allocator.engine.simulate`) only needs to know *how many* blocks each
sequence holds. This module keeps the finer picture the "Block tables" page draws: which token
ids sit in which physical block, how many block tables point at each block (its refcount), which
full blocks can be found again by their hash, and which sequences wait in host memory. Its
blocks live in the same :class:`allocator.memory.block_pool.BlockPool` as the engine's paged allocator,
so refcounts, the LRU free queue, the block-hash map and the release order are shared code.

Model
-----
* A sequence's *block table* maps logical block ``i`` (its tokens ``i*block_size`` to
  ``(i+1)*block_size - 1``) to a physical block id.
* A fork (parallel sampling) shares every block of the parent; prefix caching shares full blocks
  of a common prompt prefix, found by a chained hash (:mod:`allocator.memory.block_hash`). Full blocks
  are never written again; only a sequence's last, partly filled block receives new tokens, so
  that is the only block copy-on-write ever copies.
* Every block is **free**, **cached** (refcount 0 but findable by hash) or **in use**; see
  :mod:`allocator.memory.block_pool` for the queue and eviction order.
* Preemption: :meth:`BlockManager.swap_out` copies a sequence's blocks to a host pool of
  ``num_host_blocks`` blocks and releases them on the GPU; :meth:`BlockManager.swap_in` copies
  them back into any free GPU blocks. :meth:`BlockManager.preempt_recompute` drops the blocks
  and hands back the token ids to prefill again later.

The manager is three files, one idea each: this one holds the state and the operations that
change block tables (allocate, append a token with copy-on-write, fork, free);
:mod:`allocator.memory.block_queries` what can be asked without changing anything (tables, refcounts,
slot counts, cache lookups, invariants); :mod:`allocator.memory.block_swap` preemption by swap and by
recompute. :mod:`allocator.memory.block_records` holds the result records.

All ids are plain ints: token ids (>= 0) and block ids (0 .. num_blocks - 1, host blocks
0 .. num_host_blocks - 1). Sequence ids are ints or short strings.

Errors
------
Bad input raises :class:`allocator.common.validate.FieldError` with ``.field`` one of ``block_size``,
``num_blocks``, ``num_host_blocks``, ``seq_id``, ``parent_id``, ``child_id``, ``token_ids``,
``token_id``, ``cache_salt``, ``lora``, ``block_id``, ``cow_order``, ``free_order``. Running out of
GPU blocks or host blocks raises its subclass :class:`allocator.common.validate.OutOfBlocksError`
(field ``num_blocks`` / ``num_host_blocks``). A refused operation changes nothing.

Sources
-------
Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023: section 4.2 (block tables), 4.4 (parallel sampling: fork shares
blocks by refcount, copy-on-write at block granularity, shared prefix), 4.5 (preemption by swap
and by recompute, CPU block allocator). vLLM's automatic prefix caching (chained block hashes:
``vllm/v1/core/kv_cache_utils.py``, ``hash_block_tokens``). ``assets/reference_figures.md`` R3
(two requests sharing a prefix) and R8 (chained hashes; the copy-on-write order).
"""
from __future__ import annotations

from allocator.memory.block_hash import (EXTRA_KEY_TAGS, block_hash, check_key, check_token, check_tokens,
                                         extra_keys, prompt_block_hashes)
from allocator.memory.block_pool_queries import BLOCK_CACHED, BLOCK_FREE, BLOCK_IN_USE
from allocator.memory.block_pool import BlockPool
from allocator.memory.host_pool import HostPool
from allocator.memory.block_queries import BlockQueries, leading_hits
from allocator.memory.block_records import Allocation, AppendResult, SeqState, SlotCounts, check_seq_id
from allocator.memory.block_swap import BlockSwap
from allocator.common.mathutils import cdiv
from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.common.validate import one_of, whole_number

__all__ = ["BLOCK_CACHED", "BLOCK_FREE", "BLOCK_IN_USE", "COW_ORDERS", "EXTRA_KEY_TAGS", "Allocation",
           "AppendResult", "BlockManager", "SlotCounts", "block_hash", "extra_keys", "prompt_block_hashes"]

#: Copy-on-write orders accepted by :meth:`BlockManager.append_token` (the second is the wrong
#: order that ``assets/reference_figures.md`` R8 warns of, kept only so a test can show what it
#: breaks).
COW_ORDERS = ("safe", "decrement_after_copy")


class BlockManager(BlockQueries, BlockSwap):
    """Token-level block tables over one :class:`~allocator.memory.block_pool.BlockPool`, with
    copy-on-write, prefix caching and a host swap pool.

    Args:
        num_blocks: GPU blocks in the pool (>= 1).
        block_size: slots (tokens) per block (1 .. 4096).
        num_host_blocks: host (CPU) blocks available to swapped-out sequences (>= 0).
        enable_prefix_caching: find full blocks again by their hash (True) or never (False).
        chain_hashes: True (correct) chains each block hash over every earlier token; False
            hashes a block's own tokens only and looks every block up independently, which
            shares a block whose K/V was computed after different earlier tokens (the bug
            ``assets/reference_figures.md`` R8 describes). :meth:`wrong_shares` lists those.
        free_order: optional permutation of range(num_blocks): the order the free queue starts
            in (default: ascending ids). The page passes a shuffled order so that physical
            order visibly differs from logical order.

    Raises:
        FieldError: naming ``num_blocks``, ``block_size``, ``num_host_blocks`` or ``free_order``.

    Source: PagedAttention (Kwon et al., SOSP 2023) sections 4.4-4.5; vLLM prefix caching design.
    """

    def __init__(self, num_blocks: int, block_size: int, num_host_blocks: int = 0, *,
                 enable_prefix_caching: bool = True, chain_hashes: bool = True,
                 free_order=None):
        self.block_size = whole_number("block_size", block_size, 1, 4096)
        self.pool = BlockPool(num_blocks, free_order=free_order, cache_freed=True)
        self.num_blocks = self.pool.num_blocks
        self.host = HostPool(num_host_blocks)
        self.num_host_blocks = self.host.num_blocks
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.chain_hashes = bool(chain_hashes)
        # Per GPU block: the tokens written into it, and the chained hash (with salt and LoRA)
        # of the sequence that computed it -- the true identity of its K/V, for wrong_shares().
        self._contents: list[list[int]] = [[] for _ in range(self.num_blocks)]
        self._true_hash: list[bytes | None] = [None] * self.num_blocks
        self._host_contents: list[list[int]] = [[] for _ in range(self.num_host_blocks)]
        self._seqs: dict[int | str, SeqState] = {}
        # Counters.
        self.cow_copies = 0
        self.cache_hit_blocks = 0
        self.swapped_out_blocks = 0
        self.swapped_in_blocks = 0
        self.swap_preemptions = 0
        self.recompute_preemptions = 0

    # ---------------------------------------------------------------- internals

    def _take(self, n: int, evicted: list) -> list[int]:
        """``n`` fresh blocks from the pool (empty contents); evicted cached blocks go to ``evicted``."""
        blocks = self.pool.allocate(n, evicted)
        for b in blocks:
            self._contents[b] = []
            self._true_hash[b] = None
        return blocks

    def _release(self, blocks) -> None:
        """Drop one reference to each block, last block first (the pool's one release order);
        a block that becomes plain free (no hash) forgets its contents."""
        for b in self.pool.release(blocks):
            if self.pool.hash_of(b) is None:
                self._contents[b] = []
                self._true_hash[b] = None

    def _seal(self, seq: SeqState, index: int) -> None:
        """Logical block ``index`` of ``seq`` just became full: record its hashes, cache it."""
        bs = self.block_size
        b = seq.block_table[index]
        tokens = seq.token_ids[:(index + 1) * bs]
        truth = prompt_block_hashes(tokens, bs, cache_salt=seq.cache_salt, lora=seq.lora)
        self._true_hash[b] = truth[index]
        if not self.enable_prefix_caching:
            return
        if self.chain_hashes:
            key = truth[index]
        else:
            key = block_hash(None, tokens[index * bs:], extra_keys(index, seq.cache_salt, seq.lora))
        self.pool.register(b, key)

    def _out_of_blocks(self, needed: int, text: str) -> OutOfBlocksError:
        return OutOfBlocksError("num_blocks", text, needed=needed,
                                available=self.pool.num_free)

    # ---------------------------------------------------------------- operations

    def allocate(self, seq_id, token_ids, *, cache_salt: str | None = None,
                 lora: str | None = None) -> Allocation:
        """Admit a new sequence with its prompt: reuse cached full blocks, take the rest fresh.

        Args:
            seq_id: a new sequence id (int or non-blank string).
            token_ids: the prompt, shape (n,), n >= 1, ints >= 0.
            cache_salt: per-tenant salt (only sequences with the same salt share cache).
            lora: adapter name; blocks computed under another adapter never match.

        Returns:
            :class:`Allocation` (cached tokens, reused logical blocks, new block ids, evictions).

        Raises:
            FieldError: ``seq_id`` already exists; bad ``token_ids`` / ``cache_salt`` / ``lora``.
            OutOfBlocksError: the pool cannot supply ceil(n / block_size) blocks (nothing is
                allocated then).
        """
        seq_id = check_seq_id("seq_id", seq_id)
        if seq_id in self._seqs:
            raise FieldError("seq_id", f": sequence {seq_id!r} already exists")
        tokens = check_tokens(token_ids)
        salt = check_key("cache_salt", cache_salt)
        lora = check_key("lora", lora)
        bs = self.block_size
        n_blocks = cdiv(len(tokens), bs)
        hits = self._lookup(tokens, salt, lora)
        hits += [None] * (n_blocks - len(hits))
        hit_blocks = [b for b in hits if b is not None]
        idle_hits = len({b for b in hit_blocks if self.pool.refcount(b) == 0})
        need_new = n_blocks - len(hit_blocks)
        if need_new > self.pool.num_free - idle_hits:
            raise self._out_of_blocks(
                need_new, f"{len(tokens)} tokens need {need_new} new blocks (+{len(hit_blocks)} from cache) "
                          f"but only {self.pool.num_free - idle_hits} of {self.num_blocks} can be taken")
        # Claim the cache hits first so that taking new blocks cannot evict them.
        self.pool.touch(hit_blocks)
        self.cache_hit_blocks += len(hit_blocks)
        evicted: list[int] = []
        new = iter(self._take(need_new, evicted))
        table = [b if b is not None else next(new) for b in hits]
        for i, b in enumerate(table):
            if hits[i] is None:
                self._contents[b] = tokens[i * bs:(i + 1) * bs]
        seq = SeqState(token_ids=tokens, block_table=table, cache_salt=salt, lora=lora)
        self._seqs[seq_id] = seq
        for i in range(len(tokens) // bs):
            if hits[i] is None:
                self._seal(seq, i)
        return Allocation(num_cached_tokens=min(leading_hits(hits) * bs, len(tokens)),
                          reused=tuple(i for i, b in enumerate(hits) if b is not None),
                          new_blocks=tuple(b for i, b in enumerate(table) if hits[i] is None),
                          evicted=tuple(evicted))

    def append_token(self, seq_id, token_id, *, cow_order: str = "safe") -> AppendResult:
        """Write one generated token at the end of a running sequence.

        If the last block is full (or the sequence is empty), a block is taken from the free
        queue. If the last block is partly filled but shared (refcount >= 2, after a fork), the
        sequence first gets its own copy: copy-on-write. The safe order (``cow_order="safe"``,
        PagedAttention section 4.4) is:

        1. check that a free block exists (else refuse, changing nothing);
        2. drop this sequence's reference to the shared block *while the table still names it*
           (refcount - 1: the other holders keep it);
        3. take a new block and copy the shared block's tokens into it;
        4. point the table entry at the copy, then write the token into the copy.

        ``cow_order="decrement_after_copy"`` re-points the table first and releases whatever the
        table names afterwards, which is now the copy. The original keeps a refcount that never
        reaches zero (leaked) and the copy returns to the free queue while in use. It exists only
        so a test can show that bug (``assets/reference_figures.md`` R8).

        Args:
            seq_id: a running sequence.
            token_id: the new token's id (int >= 0).
            cow_order: ``"safe"`` (default) or ``"decrement_after_copy"``.

        Returns:
            :class:`AppendResult`.

        Raises:
            FieldError: unknown or swapped ``seq_id``, bad ``token_id`` or ``cow_order``.
            OutOfBlocksError: a new block or a copy is needed and none is free.
        """
        seq = self._seq(seq_id)
        token = check_token("token_id", token_id)
        one_of("cow_order", cow_order, COW_ORDERS)
        bs = self.block_size
        n = len(seq.token_ids)
        evicted: list[int] = []
        cow_from, new_block = None, False
        if n % bs == 0:
            if not self.pool.num_free:
                raise self._out_of_blocks(1, f"sequence {seq_id!r} needs a new block for token {n} and "
                                             f"none of {self.num_blocks} is free")
            b = self._take(1, evicted)[0]
            seq.block_table.append(b)
            new_block = True
        else:
            index = len(seq.block_table) - 1
            b = seq.block_table[index]
            if self.pool.refcount(b) > 1:
                if not self.pool.num_free:
                    raise self._out_of_blocks(1, f"sequence {seq_id!r} must copy shared block {b} before "
                                                 "writing and no block is free")
                if cow_order == "safe":
                    self._release([b])                     # 2. drop our reference first
                    copy = self._take(1, evicted)[0]       # 3. new block + copy
                    self._contents[copy] = list(self._contents[b])
                    seq.block_table[index] = copy          # 4. re-point
                else:
                    copy = self._take(1, evicted)[0]
                    self._contents[copy] = list(self._contents[b])
                    seq.block_table[index] = copy
                    self.pool.release([seq.block_table[index]])   # the bug: hits the copy
                cow_from, b = b, copy
                self.cow_copies += 1
        self._contents[b].append(token)
        seq.token_ids.append(token)
        if len(seq.token_ids) % bs == 0:
            self._seal(seq, len(seq.block_table) - 1)
        return AppendResult(block_id=b, slot=len(self._contents[b]) - 1, new_block=new_block,
                            cow_from=cow_from, evicted=evicted[0] if evicted else None)

    def fork(self, parent_id, child_id) -> list[int]:
        """Start ``child_id`` as a copy of a running parent that shares every one of its blocks.

        Each block's refcount rises by one; nothing is copied until one of them writes into the
        shared last block (copy-on-write). Used for parallel sampling and beam search
        (PagedAttention section 4.4).

        Returns:
            the child's block table (the parent's block ids).

        Raises:
            FieldError: unknown or swapped ``parent_id``; ``child_id`` already exists or invalid.
        """
        parent = self._seq(parent_id, "parent_id")
        child_id = check_seq_id("child_id", child_id)
        if child_id in self._seqs:
            raise FieldError("child_id", f": sequence {child_id!r} already exists")
        self.pool.touch(parent.block_table)
        self._seqs[child_id] = SeqState(token_ids=list(parent.token_ids), block_table=list(parent.block_table),
                                    cache_salt=parent.cache_salt, lora=parent.lora)
        return list(parent.block_table)

    def free(self, seq_id) -> None:
        """Finish a sequence: drop its references (and host blocks, if swapped out).

        Blocks whose refcount reaches 0 join the back of the free queue, last block first. A
        full block that was cached stays findable by its hash until the queue hands it out.

        Raises:
            FieldError: unknown ``seq_id``.
        """
        seq = self._seq(seq_id, running=False)
        if seq.swapped:
            for h in seq.host_table:
                self._host_contents[h] = []
            self.host.give_back(seq.host_table)
        else:
            self._release(seq.block_table)
        del self._seqs[check_seq_id("seq_id", seq_id)]
