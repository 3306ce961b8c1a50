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
* Prefix caching follows vLLM v1: a prompt's cache hit stops before its last token, which is
  always computed (its logits give the first output token), so at most (n - 1) // block_size
  leading blocks of an n-token prompt are hits -- a fully cached 32-token prompt at block size 16
  reuses 16 tokens, a 16-token prompt none (vllm/v1/core/kv_cache_manager.py,
  ``get_computed_blocks``: ``max_cache_hit_length = request.num_tokens - 1``). Every block that
  becomes full gets its hash, also when an identical block is already cached (the last block of
  such a prompt is computed again): the hash then names both blocks and finds the other once one
  is evicted (vllm/v1/core/block_pool.py, ``cache_full_blocks`` and ``BlockHashToBlockMap``;
  :mod:`allocator.memory.block_pool`).
* Every block is **free**, **cached** (refcount 0 but findable by hash) or **in use**; see
  :mod:`allocator.memory.block_pool` for the queue and eviction order.
* Preemption: :meth:`BlockManager.swap_out` copies a sequence's blocks to a host pool of
  ``num_host_blocks`` blocks and releases them on the GPU; :meth:`BlockManager.swap_in` copies
  them back into any free GPU blocks. :meth:`BlockManager.preempt_recompute` drops the blocks
  and hands back the token ids to prefill again later.

The class reads top to bottom as a serving engine's block manager: its state, what can be asked
without changing anything (tables, refcounts, slot counts, cache lookups), the operations that
change block tables (allocate, append a token with copy-on-write, fork, free), preemption by swap
and by recompute, and the bookkeeping's invariants. :mod:`allocator.memory.block_records` holds
the per-sequence record and the operations' result records.

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

from allocator.memory.block_hash import (block_hash, check_key, check_token, check_tokens,
                                         extra_keys, prompt_block_hashes)
from allocator.memory.block_pool import BlockPool, KVCacheBlock
from allocator.memory.host_pool import HostPool
from allocator.memory.block_records import Allocation, AppendResult, SeqState, SlotCounts, check_seq_id
from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.common.validate import one_of, whole_number

__all__ = ["COW_ORDERS", "BlockManager", "leading_hits"]

#: Copy-on-write orders accepted by :meth:`BlockManager.append_token` (the second is the wrong
#: order that ``assets/reference_figures.md`` R8 warns of, kept only so a test can show what it
#: breaks).
COW_ORDERS = ("safe", "decrement_after_copy")


class BlockManager:
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

    # ---------------------------------------------------------------- queries

    def _seq(self, seq_id, name: str = "seq_id", running: bool = True) -> SeqState:
        seq_id = check_seq_id(name, seq_id)
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise FieldError(name, f": no sequence {seq_id!r} (known: {sorted(map(str, self._seqs))})")
        if running and seq.swapped:
            raise FieldError(name, f": sequence {seq_id!r} is swapped out to host memory; swap it in first")
        return seq

    def _check_host_block(self, host_block_id) -> int:
        return whole_number("block_id", host_block_id, 0, self.num_host_blocks - 1)

    @property
    def evictions(self) -> int:
        """Cached blocks whose hash was dropped because the free queue handed them out again."""
        return self.pool.evictions

    def sequences(self) -> list:
        """Ids of every known sequence (running and swapped), in the order they were added."""
        return list(self._seqs)

    def is_swapped(self, seq_id) -> bool:
        """True if the sequence currently lives in host memory. Raises FieldError (``seq_id``)."""
        return self._seq(seq_id, running=False).swapped

    def block_table(self, seq_id) -> list[int]:
        """Physical block ids of the sequence's logical blocks 0, 1, ... (empty while swapped).

        Raises:
            FieldError: unknown ``seq_id``.
        """
        return list(self._seq(seq_id, running=False).block_table)

    def host_table(self, seq_id) -> list[int]:
        """Host block ids holding a swapped-out sequence (empty while it runs on the GPU).

        Raises:
            FieldError: unknown ``seq_id``.
        """
        return list(self._seq(seq_id, running=False).host_table)

    def token_ids(self, seq_id) -> list[int]:
        """The sequence's token ids, shape (n,). Raises FieldError (``seq_id``) if unknown."""
        return list(self._seq(seq_id, running=False).token_ids)

    def refcount(self, block_id) -> int:
        """Block tables of running sequences that point at this GPU block (0 when unreferenced).

        Raises:
            FieldError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        return self.pool.refcount(block_id)

    def block_tokens(self, block_id) -> list[int]:
        """Token ids written into a GPU block, shape (k,), k <= block_size (empty when free).

        A cached-but-unreferenced block keeps its tokens until it is reused.
        """
        return list(self._contents[self.pool.check_block(block_id)])

    def host_block_tokens(self, host_block_id) -> list[int]:
        """Token ids held by a host block (empty when free). Raises FieldError (``block_id``)."""
        return list(self._host_contents[self._check_host_block(host_block_id)])

    def block_hash_of(self, block_id) -> bytes | None:
        """The hash under which a GPU block can be found, or None if it is not cached."""
        return self.pool.hash_of(block_id)

    def block(self, block_id) -> KVCacheBlock:
        """A read-only snapshot of one GPU block: id, refcount, hash and state
        (:meth:`BlockPool.block`). Raises FieldError (``block_id``) outside the pool."""
        return self.pool.block(block_id)

    def block_state(self, block_id) -> str:
        """``"free"``, ``"cached"`` (unreferenced but findable) or ``"in use"`` (refcount >= 1)."""
        return self.pool.state(block_id)

    def holders(self, block_id) -> list:
        """Running sequences whose block table points at this block (a sequence may repeat)."""
        b = self.pool.check_block(block_id)
        return [sid for sid, s in self._seqs.items() for x in s.block_table if x == b]

    @property
    def num_free_blocks(self) -> int:
        """Unreferenced blocks holding no cached content (refcount 0, no hash)."""
        return self.pool.num_plain_free

    @property
    def num_cached_free_blocks(self) -> int:
        """Unreferenced blocks that are still findable by hash (cached-but-unreferenced)."""
        return self.pool.num_cached_free

    @property
    def num_in_use_blocks(self) -> int:
        """Blocks with refcount >= 1."""
        return self.pool.num_in_use

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by hash, referenced or not."""
        return self.pool.num_cached

    @property
    def num_host_free_blocks(self) -> int:
        """Host blocks not holding a swapped-out block."""
        return self.host.num_free

    def free_queue(self) -> list[int]:
        """Unreferenced block ids in eviction order (least recently used first)."""
        return self.pool.free_queue()

    def slot_counts(self) -> SlotCounts:
        """Logical tokens, slots without sharing and distinct physical slots of running sequences.

        Agrees with :func:`allocator.accounting.prefix_sharing` when two sequences share a
        prefix: lengths 20 and 23 with an 8-token common prefix at block size 4 give 43 logical
        tokens, 44 slots unshared and 36 physical slots (``assets/reference_figures.md`` R3).
        """
        bs = self.block_size
        running = [s for s in self._seqs.values() if not s.swapped]
        logical = sum(len(s.token_ids) for s in running)
        unshared = sum(round_up(len(s.token_ids), bs) for s in running)
        in_use = self.num_in_use_blocks
        shared = sum(1 for b in range(self.num_blocks) if self.pool.refcount(b) >= 2)
        return SlotCounts(logical_tokens=logical, slots_unshared=unshared,
                          physical_slots=in_use * bs, blocks_in_use=in_use,
                          shared_blocks=shared, saved_slots=unshared - in_use * bs)

    def num_cached_tokens(self, token_ids, *, cache_salt: str | None = None,
                          lora: str | None = None) -> int:
        """Leading tokens of a prompt that the cache would serve right now (tokens).

        Only full blocks are cached, and the prompt's last token is always computed (its logits
        give the first output token), so the answer is a multiple of block_size, at most
        (n - 1) // block_size blocks of an n-token prompt: block 16 and a 100-token prompt whose
        blocks are all cached -> 96; a fully cached 32-token prompt -> 16; a 16-token one -> 0;
        block 528 and a 552-token prompt -> 528 (one block), leaving 24 tokens to compute.
        Nothing changes (a pure lookup).

        Source: vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks`` (``max_cache_hit_length
        = request.num_tokens - 1``).

        Raises:
            FieldError naming ``token_ids``, ``cache_salt`` or ``lora``.
        """
        tokens = check_tokens(token_ids)
        hits = self._lookup(tokens, check_key("cache_salt", cache_salt), check_key("lora", lora))
        return leading_hits(hits) * self.block_size

    def _lookup(self, tokens: list[int], salt, lora) -> list[int | None]:
        """Per full block: the cached block that would serve it, or None. Only the first
        (n - 1) // block_size blocks of an n-token prompt are looked up: the block holding its
        last token is always computed (vLLM's ``max_cache_hit_length = num_tokens - 1``)."""
        if not self.enable_prefix_caching:
            return [None] * (len(tokens) // self.block_size)
        hashes = prompt_block_hashes(tokens, self.block_size, cache_salt=salt, lora=lora,
                                     chained=self.chain_hashes)
        limit = max(len(tokens) - 1, 0) // self.block_size
        hits: list[int | None] = []
        for h in hashes[:limit]:
            b = self.pool.lookup(h)
            if b is None and self.chain_hashes:
                # A chained hash cannot match after a miss: stop, keeping hits a prefix.
                hits.extend([None] * (len(hashes) - len(hits)))
                break
            hits.append(b)
        return hits + [None] * (len(hashes) - len(hits))

    def wrong_shares(self) -> list[tuple]:
        """Blocks a running sequence uses whose K/V was computed after *other* earlier tokens.

        Each full block remembers the chained hash (with salt and LoRA) of the sequence that
        computed it. With ``chain_hashes=True`` this list is always empty; with the unchained
        scheme a block whose own tokens match but whose earlier tokens (or tenant) differ is
        shared anyway, and shows up here as ``(seq_id, logical_index, block_id)``.
        """
        out = []
        for sid, s in self._seqs.items():
            if s.swapped:
                continue
            truth = prompt_block_hashes(s.token_ids, self.block_size, cache_salt=s.cache_salt,
                                        lora=s.lora, chained=True)
            for i, h in enumerate(truth):
                b = s.block_table[i]
                if self._true_hash[b] is not None and self._true_hash[b] != h:
                    out.append((sid, i, b))
        return out

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

        The reused blocks stop before the block holding the prompt's last token (see
        :meth:`num_cached_tokens`); every other full block is computed and gets its hash, also
        when an identical block is cached (its hash then names both).

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

    # ---------------------------------------------------------------- preemption

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

    # ---------------------------------------------------------------- checks

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent.

        Checks (besides the pool's own, :meth:`BlockPool.check_invariants`): every refcount
        equals the number of running block tables pointing at the block; every cached block is
        full; each sequence's blocks hold its tokens in order (ceil(n / block_size) of them);
        host blocks in use + free == num_host_blocks.

        Raises:
            AssertionError naming the first inconsistency.
        """
        for sid, s in self._seqs.items():
            if s.swapped:
                assert not s.block_table, f"swapped sequence {sid!r} still has GPU blocks"
        self.pool.check_invariants([s.block_table for s in self._seqs.values()])
        for b in range(self.num_blocks):
            if self.pool.hash_of(b) is not None:
                assert len(self._contents[b]) == self.block_size, f"cached block {b} is not full"
        bs = self.block_size
        used_host = 0
        for sid, s in self._seqs.items():
            table = s.host_table if s.swapped else s.block_table
            contents = self._host_contents if s.swapped else self._contents
            used_host += len(s.host_table)
            assert len(table) == cdiv(len(s.token_ids), bs), (
                f"sequence {sid!r}: {len(table)} blocks for {len(s.token_ids)} tokens")
            for i, b in enumerate(table):
                want = s.token_ids[i * bs:(i + 1) * bs]
                assert contents[b] == want, f"sequence {sid!r}: block {b} does not hold tokens of block {i}"
        self.host.check_invariants(used_host)


def leading_hits(hits: list) -> int:
    """How many entries at the start of ``hits`` are not None."""
    n = 0
    while n < len(hits) and hits[n] is not None:
        n += 1
    return n
