"""vLLM v1's KV cache manager calls on the paged allocator's block tables.

vLLM v1 (the engine's ``rules=V1Rules(...)`` scheduler, :mod:`allocator.engine.v1`) does not
admit a whole context at once: each step it asks which leading blocks of a sequence are already
cached (``get_computed_blocks``), grows the sequence's block table to hold exactly the tokens
scheduled so far (``allocate_slots``) and frees a finished or preempted sequence's blocks
(``free``). :class:`V1KVCacheMixin` gives :class:`allocator.memory.paged.PagedAllocator` those three
calls (``v1_computed_blocks``, ``v1_allocate``, ``v1_free``) over the same block pool, block
tables and counters; it keeps no state of its own (``PagedAllocator.reset`` sets it all).
Unlike the classroom engine's prefix caching, prompt and generated blocks alike are keyed.

Sources: vLLM's vllm/v1/core/kv_cache_manager.py (``get_computed_blocks``, ``allocate_slots``,
``free``) and vllm/v1/core/block_pool.py; Kwon et al., PagedAttention (SOSP 2023,
arXiv:2309.06180) section 4.4 (sharing) and ``assets/reference_figures.md`` R8 (block hashes).
"""
from __future__ import annotations

from allocator.memory.block_hash import prefix_block_keys


def system_prompt_tokens(n: int) -> list[int]:
    """Token ids of the first ``n`` tokens of the synthetic shared system prompt (a workload's
    ``shared_prefix``), shape (n,): token ``i`` is ``i``. Any fixed ids would do: the engine only
    needs every request's prefix to hash alike. Used by both the classroom engine's admissions
    (:class:`allocator.memory.paged.PagedAllocator`) and the v1 calls here, so both find the same
    blocks."""
    return list(range(n))


class V1KVCacheMixin:
    """vLLM v1's ``get_computed_blocks`` / ``allocate_slots`` / ``free`` for
    :class:`allocator.memory.paged.PagedAllocator` (a base class of it; used on nothing else).

    It reads and writes the allocator's ``pool``, ``block_tables``, ``block_size``,
    ``prefix_caching``, ``prompts``, ``shared_prefix``, ``shared_saving``, ``last_hit_tokens``,
    ``never_written`` and its private per-sequence dicts, all made by ``PagedAllocator.reset``,
    and releases blocks through ``PagedAllocator._release``.
    """

    # Token ids the v1 interface invents where the workload gives none, so that block keys are
    # unique per request and position (they never match another request's tokens by accident):
    # bit 62 marks a generated token, bit 61 a prompt token of a request without known prompt ids.
    _V1_GEN, _V1_PROMPT, _V1_POS_BITS = 1 << 62, 1 << 61, 26

    def _v1_tokens(self, seq_id: int, prompt_len: int, total: int) -> list:
        """Token ids of the sequence's first ``total`` tokens (prompt, then generated): the
        workload's prompt ids when known (else the shared system prompt, then invented unique
        ids), and the generated ids ``prompts.output_tokens(seq_id)`` gives when the workload
        knows them (a later turn of a conversation repeats them), else invented unique ids."""
        base = seq_id << self._V1_POS_BITS
        prompts = self.prompts
        if prompts is not None and seq_id in prompts:
            head = [int(x) for x in prompts.tokens(seq_id)[:prompt_len]]
        else:
            shared = min(self.shared_prefix, prompt_len)
            head = system_prompt_tokens(shared) + [self._V1_PROMPT | base | i for i in range(shared, prompt_len)]
        gen = total - prompt_len
        out = []
        if gen > 0 and prompts is not None and seq_id in prompts and hasattr(prompts, "output_tokens"):
            out = [int(x) for x in prompts.output_tokens(seq_id)[:gen]]
        out += [self._V1_GEN | base | i for i in range(len(out), gen)]
        return head + out

    def _v1_keys(self, seq_id: int, prompt_len: int, total: int) -> list:
        """Chained keys of the sequence's full blocks among its first ``total`` tokens (prompt and
        generated alike, as vLLM v1 hashes them). Key i depends only on tokens up to the end of
        block i, so keys are computed once for a length that doubles as the sequence grows."""
        keys = self._keys.get(seq_id)
        if keys is None or len(keys) < total // self.block_size:
            n = max(total, 2 * len(keys) * self.block_size) if keys else total
            keys = self._keys[seq_id] = prefix_block_keys(self._v1_tokens(seq_id, prompt_len, n),
                                                          self.block_size, as_bytes=True)
        return keys

    def v1_computed_blocks(self, seq_id: int, prompt_len: int, num_tokens: int) -> list[int]:
        """vLLM v1's ``get_computed_blocks``: the cached blocks of the longest run of the
        sequence's leading full blocks (prompt and generated tokens, ``num_tokens`` in all), at
        most (num_tokens - 1) // block_size of them, so at least the last token is computed (its
        logits give the next token). [] without prefix caching. Nothing is taken or touched.

        Source: vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks`` (max cache hit length =
        num_tokens - 1).
        """
        if not self.prefix_caching:
            return []
        limit = (num_tokens - 1) // self.block_size
        if not limit:
            return []
        return self.pool.lookup_run(self._v1_keys(seq_id, prompt_len, num_tokens), limit)

    def v1_allocate(self, seq_id: int, prompt_len: int, num_tokens: int, upto: int, hits=(),
                    final: int | None = None) -> bool:
        """vLLM v1's ``allocate_slots``: make the sequence's block table hold ``upto`` tokens
        (its computed tokens plus this step's scheduled ones) -- ceil(upto / block_size) blocks, no
        block for a token not yet scheduled -- reusing ``hits`` (from :meth:`v1_computed_blocks`)
        at the front of a new table. With prefix caching, every full block among the first
        min(upto, num_tokens) tokens is registered under its chained key (prompt and generated
        blocks alike; the first registration of a key wins).

        ``final`` (tokens: prompt + the whole answer) lets the allocator count the slots of the
        last block the sequence will never write (``never_written``, the internal fragmentation of
        :mod:`allocator.engine.shares`), as :meth:`admit` and :meth:`grow` do.

        Returns:
            True, or False with nothing changed when too few blocks are free (hits taken out of
            the free queue count against it, as in vLLM).
        """
        table = self.block_tables.get(seq_id)
        pool = self.pool
        bs = self.block_size
        # ceil(upto / bs) spelled inline, not mathutils.cdiv: called per sequence per step (hot path)
        need = -(-upto // bs) - (len(table) if table is not None else len(hits))
        if hits:
            cached_free = pool.count_refcount(hits, 0)
            if need > pool.num_free - cached_free:
                return False
            self.shared_saving += (len(hits) - cached_free) * bs
            pool.touch(hits)
        elif need > pool.num_free:
            return False
        if table is None:
            table = self.block_tables[seq_id] = list(hits)
            if self.prefix_caching:
                self.last_hit_tokens = len(hits) * bs
        if need > 0:
            table.extend(pool.allocate(need))
        if final is not None:
            self._final[seq_id] = final
            extra = len(table) * bs - final
            if extra >= 0:                     # its last block: the rest of it is never written
                self.never_written += extra - self._unwritten.get(seq_id, 0)
                self._unwritten[seq_id] = extra
        if self.prefix_caching:
            full = min(upto, num_tokens) // bs
            if full:
                keys = self._v1_keys(seq_id, prompt_len, num_tokens)
                done = self._v1_registered.get(seq_id, 0)
                if full > done:
                    pool.register_all(table[done:full], keys[done:full])
                self._v1_registered[seq_id] = full
        return True

    def v1_free(self, seq_id: int, keep_keys: bool = False) -> None:
        """Release a finished (``keep_keys=False``) or preempted sequence's blocks, last block
        first; cached blocks stay findable until the free queue hands them out again. A
        preempted sequence (v1 preemption is recompute only) keeps its keys for its return."""
        self._release(seq_id)
        self._v1_registered.pop(seq_id, None)
        if not keep_keys:
            self._keys.pop(seq_id, None)
