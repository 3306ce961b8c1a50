"""What the block manager can be asked without changing anything: block tables, refcounts,
block states, slot counts, cache lookups, wrong shares and the bookkeeping's invariants.

:class:`BlockQueries` is a base class of :class:`allocator.memory.block_manager.BlockManager` and reads
only the state that class's ``__init__`` sets up (``pool``, ``host``, ``block_size``,
``_seqs``, ``_contents``, ``_host_contents``, ``_true_hash``, ``enable_prefix_caching``,
``chain_hashes``). Source: Kwon et al., PagedAttention, SOSP 2023, sections 4.2 and 4.4; vLLM's
prefix-cache lookup (``vllm/v1/core/kv_cache_utils.py``); ``assets/reference_figures.md`` R3, R8.
"""
from __future__ import annotations

from allocator.memory.block_hash import check_key, check_tokens, prompt_block_hashes
from allocator.memory.block_records import SeqState, SlotCounts, check_seq_id
from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError
from allocator.common.validate import whole_number

__all__ = ["BlockQueries", "leading_hits"]


class BlockQueries:
    """The read-only half of :class:`allocator.memory.block_manager.BlockManager` (see the module docstring)."""

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

        Only full blocks are cached, so the answer is a multiple of block_size: block 16 and a
        100-token prompt whose blocks are all cached -> 96; block 528 and a 552-token prompt ->
        528 (one block), leaving 24 tokens to compute. Nothing changes (a pure lookup).

        vLLM additionally recomputes at least the last prompt token to get its logits; this
        teaching model does not apply that rule.

        Raises:
            FieldError naming ``token_ids``, ``cache_salt`` or ``lora``.
        """
        tokens = check_tokens(token_ids)
        hits = self._lookup(tokens, check_key("cache_salt", cache_salt), check_key("lora", lora))
        return leading_hits(hits) * self.block_size

    def _lookup(self, tokens: list[int], salt, lora) -> list[int | None]:
        """Per full block: the cached block that would serve it, or None."""
        if not self.enable_prefix_caching:
            return [None] * (len(tokens) // self.block_size)
        hashes = prompt_block_hashes(tokens, self.block_size, cache_salt=salt, lora=lora,
                                     chained=self.chain_hashes)
        hits: list[int | None] = []
        for h in hashes:
            b = self.pool.lookup(h)
            if b is None and self.chain_hashes:
                # A chained hash cannot match after a miss: stop, keeping hits a prefix.
                hits.extend([None] * (len(hashes) - len(hits)))
                break
            hits.append(b)
        return hits

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
