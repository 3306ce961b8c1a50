"""The paged allocator: the pool cut into fixed blocks, a block table per sequence.

:class:`PagedAllocator` keeps its blocks in the project's one block pool
(:class:`allocator.memory.block_pool.BlockPool`, or :class:`allocator.memory.array_pool.ArrayBlockPool` with
prefix caching). A sequence is admitted with the blocks its context needs plus the token prefill
emits, and takes one more block only when its last block is full, so its only waste is the
unfilled end of its last block. Full prompt blocks can be shared between sequences (a common
system prompt) or kept findable after they finish (prefix caching), by refcount and block hash;
a preempted sequence is recomputed later or swapped to a host pool
(:class:`allocator.memory.host_pool.HostPool`). The same block pool, block tables and counters
answer vLLM v1's three allocation calls (``v1_computed_blocks``, ``v1_allocate``, ``v1_free``),
which the engine's v1 scheduler (:mod:`allocator.engine.v1`) uses instead of ``admit``/``grow``:
each step it asks which leading blocks of a sequence are already cached
(``get_computed_blocks``), grows the sequence's block table to hold exactly the tokens scheduled
so far (``allocate_slots``) and frees a finished or preempted sequence's blocks (``free``). Unlike
the classroom engine's prefix caching, prompt and generated blocks alike are keyed there.

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), section 4.2 (block tables), 4.4 (sharing) and
4.5 (preemption: recompute or swap); vLLM's vllm/core/block_manager.py (v0: swap), its
automatic prefix caching design (vllm/v1/core/block_pool.py) and vllm/v1/core/kv_cache_manager.py
(``get_computed_blocks``, ``allocate_slots``, ``free``); ``assets/reference_figures.md``
R3, R7, R8 and R9.
"""
from __future__ import annotations

import numpy as np

from allocator.memory.array_pool import ArrayBlockPool
from allocator.memory.block_hash import prefix_block_keys, prompt_block_hashes
from allocator.memory.block_pool import BlockPool
from allocator.memory.host_pool import HostPool
from allocator.common.mathutils import cdiv
from allocator.common.limits import MAX_BLOCK_SIZE, MAX_POOL_SLOTS
from allocator.common.errors import FieldError
from allocator.common.validate import one_of, whole_number


def _system_prompt_tokens(n: int) -> list[int]:
    """Token ids of the first ``n`` tokens of the synthetic shared system prompt (a workload's
    ``shared_prefix``), shape (n,): token ``i`` is ``i``. Any fixed ids would do: the engine only
    needs every request's prefix to hash alike. Used by the classroom engine's admissions and the v1
    calls alike, so both find the same blocks."""
    return list(range(n))


def too_long_for_pool(tokens: int, block_size: int, num_blocks: int) -> str | None:
    """Why one sequence of ``tokens`` tokens (its longest context) can never fit a paged pool of
    ``num_blocks`` blocks of ``block_size`` slots, or None: it needs ceil(tokens / block_size) blocks."""
    need = cdiv(tokens, block_size)
    if need > num_blocks:
        return (f"needs {need} blocks of {block_size} slots at its longest ({tokens} tokens) but the pool "
                f"has only {num_blocks} blocks")
    return None


class PagedAllocator:
    """The pool cut into fixed blocks, kept in the project's one :class:`BlockPool`.

    Args:
        total_slots: pool size in slots (>= 1). ``total_slots // block_size`` blocks are made;
            the remainder (``total_slots % block_size`` slots) cannot form a block and is
            counted as an unusable hole.
        block_size: slots per block (1 .. 4096).
        preemption: ``"recompute"`` (a preempted sequence's blocks are dropped and its tokens are
            prefilled again later) or ``"swap"`` (its private blocks are copied to a host pool and
            copied back before it resumes; when the host pool is full it falls back to recompute).
            Swap is older vLLM's option (v0); vLLM v1 preempts by recompute only, and the engine's
            v1 rules (``allocator.engine.v1.V1Rules``) refuse a swapping allocator.
        host_blocks: capacity of the host (CPU) swap pool in blocks (default: as many as the GPU pool).
        prefix_caching: keep the full prompt blocks of every sequence findable by their block
            hash after it finishes, until the free block queue hands them out again (vLLM's
            automatic prefix caching); admission reuses the longest cached run of the prompt's
            full blocks, which then needs no prefill.

    Raises:
        FieldError: ``block_size`` or ``total_slots`` not a whole number >= 1 (at most
            :data:`MAX_POOL_SLOTS` slots), a block larger than the pool, an unknown
            ``preemption`` mode or a negative ``host_blocks``.

    A sequence is admitted with ceil((context_len + 1) / block_size) blocks -- room for its
    context and the token prefill emits -- and takes one more block only when its last block is
    full. Blocks come from the front of the free block queue and return to its back, last block
    first, so physical order soon stops matching logical order, as in vLLM. The only waste is
    the unfilled end of each sequence's last block.

    Prefix sharing (``reset(shared_prefix=N)``): every request's prompt starts with the same N
    tokens, so its first N // block_size blocks are full and identical. The first sequence to be
    admitted fills them and registers them in the pool's block-hash map; later ones find them by
    hash, point their block tables at the same physical blocks and raise their refcount. With
    ``cache_freed=False`` the hashes are forgotten when the last holder releases the blocks, so
    sharing lasts while some sequence holds the prompt. Only full blocks are shared and writes
    always land after them, so no copy-on-write is needed here (``allocator.memory.block_manager``
    shows copy-on-write). Source: PagedAttention (SOSP 2023) section 4.4.

    Prefix caching (``prefix_caching=True``, with ``reset(prompts=...)`` giving each request's
    prompt token ids): a sequence's full prompt blocks are keyed by
    :func:`allocator.memory.block_hash.prefix_block_keys` (each key covers the block and every token
    before it), or, when the prompts come from a trace with chained block ids, by the trace's
    own keys (:meth:`allocator.workloads.mooncake.TracePrompts.block_keys`: the same matches, no hashing),
    and registered when it is admitted (the pool is then an
    :class:`~allocator.memory.array_pool.ArrayBlockPool`: the same rules, a prompt's blocks moved in
    bulk). Admission looks the keys up in order and reuses the longest run found -- blocks other
    sequences hold (refcount up) or blocks that finished sequences left in the free queue (taken
    out of it) -- up to the block before the one holding the prompt's last token, which is always
    computed (its logits start the output, as in vLLM). Those tokens need no prefill
    (``last_hit_tokens``). A full prompt block computed again while an identical block is cached
    (a fully cached prompt's last full block) is registered under the same key, which then
    names both blocks and keeps finding one when the other is evicted (vLLM's
    ``BlockHashToBlockMap``: :mod:`allocator.memory.block_pool`). A cached block that the free
    queue hands out again loses its key (an eviction, least recently used first). Only prompt blocks
    are keyed: generated tokens are the model's and no later prompt is known to repeat them.
    Without ``prompts``, the shared system prompt (``shared_prefix``) is the cached prefix.
    Sources: vLLM automatic prefix caching design; Kwon et al. (SOSP 2023) section 4.4.
    """

    kind = "paged"
    label = "Paged"
    PREEMPTION_MODES = ("recompute", "swap")
    #: The pool type ``reset`` builds (called as ``pool_class(num_blocks, cache_freed=...)``); a
    #: subclass may use a BlockPool subclass that also measures something. None: a
    #: :class:`~allocator.memory.array_pool.ArrayBlockPool` with prefix caching (the same rules, numpy
    #: state for a prompt's hundreds of blocks at a time), else a :class:`BlockPool`.
    pool_class = None

    def __init__(self, total_slots: int, block_size: int, preemption: str = "recompute",
                 host_blocks: int | None = None, prefix_caching: bool = False):
        self.block_size = whole_number("block_size", block_size, 1, MAX_BLOCK_SIZE)
        self.total_slots = whole_number("total_slots", total_slots, 1, MAX_POOL_SLOTS)
        self.prefix_caching = bool(prefix_caching)
        self.num_blocks = self.total_slots // self.block_size
        if self.num_blocks == 0:
            raise FieldError("block_size", f" = {self.block_size} is larger than the pool "
                                           f"({self.total_slots} slots)")
        self.preemption = one_of("preemption", preemption, self.PREEMPTION_MODES)
        self.host_blocks = self.num_blocks if host_blocks is None else whole_number("host_blocks", host_blocks, 0)
        self.remainder_slots = self.total_slots - self.num_blocks * self.block_size
        self.reset()

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool: every block free (in block-id order), no block tables, empty host pool.

        Args:
            shared_prefix: tokens at the start of every prompt that are the same system prompt
                (0: no sharing). Its full blocks are shared between sequences.
            prompts: the requests' prompt token ids (an object with ``tokens(request_id)``, e.g.
                :class:`allocator.workloads.mooncake.TracePrompts`), used with prefix caching; requests it
                does not know share only the system prompt.
        """
        pool_class = self.pool_class
        if pool_class is None:      # prefix caching moves a prompt's blocks in bulk: the numpy pool
            pool_class = ArrayBlockPool if self.prefix_caching else BlockPool
        self.pool = pool_class(self.num_blocks, cache_freed=self.prefix_caching)
        # an ArrayBlockPool takes and gives a prompt's blocks as int64 arrays (see admit, _release)
        self._bulk = isinstance(self.pool, ArrayBlockPool)
        self.host = HostPool(self.host_blocks)
        self.block_tables: dict[int, list[int]] = {}
        # seq_id -> its block table at admission, as an int64 array (array pool only): the table's
        # leading blocks, which it never changes (a table only grows at its end)
        self._admitted: dict[int, np.ndarray] = {}
        self._final: dict[int, int] = {}            # seq_id -> tokens it holds when it finishes
        self._unwritten: dict[int, int] = {}        # seq_id -> slots of its last block it will never write
        self.never_written = 0                      # their sum: internal fragmentation
        self.swapped: dict[int, list[int]] = {}     # seq_id -> host blocks it holds
        self._swapped_shared: dict[int, int] = {}   # seq_id -> blocks it shared when swapped out (not copied)
        self.last_lost_tokens = 0                   # context tokens the last swap-in must compute again,
        self.last_lost_start = 0                    # starting at this token (after the blocks still found)
        self.swap_traffic = 0                       # blocks moved out + in, total
        self.shared_saving = 0                      # slots saved by sharing right now
        self.shared_prefix = whole_number("shared_prefix", shared_prefix, 0)
        self.prompts = prompts if self.prefix_caching else None
        self._keys: dict[int, list] = {}            # seq_id -> its prompt's block keys (prefix caching)
        self._v1_registered: dict[int, int] = {}    # v1 scheduler: seq_id -> its leading blocks registered
        # slots a block table may hold past its sequence's tokens: the v1 scheduler's speculative
        # decoding sets it to k, the lookahead slots of draft tokens (allocator.engine.v1.V1Rules)
        self.lookahead_slots = 0
        self.last_hit_tokens = 0                    # prompt tokens the last admission found cached
        self.hit_tokens = 0                         # all admissions: prompt tokens found cached
        self.prompt_tokens = 0                      # all admissions: prompt tokens admitted
        # blocks of the prompt that can ever be shared (a longer prompt than the pool is rejected anyway)
        n_prefix = min(self.shared_prefix // self.block_size, self.num_blocks)
        self._prefix_hashes = (prompt_block_hashes(_system_prompt_tokens(n_prefix * self.block_size),
                                                   self.block_size) if n_prefix else [])
        self._sharing = bool(self._prefix_hashes) or self.prefix_caching

    @property
    def allocated_slots(self) -> int:
        """Distinct slots in blocks that belong to some sequence."""
        return (self.num_blocks - self.pool.num_free) * self.block_size

    @property
    def units_in_use(self) -> int:
        """Distinct blocks held by sequences (block-table entries pointing at them may be more)."""
        return self.num_blocks - self.pool.num_free

    @property
    def refcounts(self) -> list[int]:
        """Refcount of every block, shape (num_blocks,)."""
        return self.pool.all_refcounts()

    def blocks_for(self, tokens: int) -> int:
        """Blocks needed to hold ``tokens`` tokens: ceil(tokens / block_size)."""
        return cdiv(tokens, self.block_size)

    def validate_workload(self, workload) -> None:
        """Nothing to check: a paged sequence grows block by block, whatever its output cap."""

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never finish (its longest context needs more blocks than exist)."""
        return too_long_for_pool(prompt_len + output_len, self.block_size, self.num_blocks)

    def _prompt_keys(self, seq_id, prompt_len: int) -> list:
        """Keys of the prompt's blocks that may be found in the cache (see the class docstring)."""
        if self.prompts is not None and seq_id is not None and seq_id in self.prompts:
            keys = self._keys.get(seq_id)
            if keys is None:
                if hasattr(self.prompts, "block_keys"):       # a trace's own chained block ids: no hashing
                    keys = self.prompts.block_keys(seq_id, self.block_size, as_array=self._bulk)
                else:
                    keys = prefix_block_keys(self.prompts.tokens(seq_id), self.block_size, as_bytes=True)
                self._keys[seq_id] = keys
            return keys
        if self._prefix_hashes and prompt_len >= self.shared_prefix:
            return self._prefix_hashes
        return []

    def _hits(self, seq_id, prompt_len: int) -> tuple:
        """(the prompt's keys, the blocks already cached for its longest run of leading keys): the
        blocks a list, or with an array pool an int64 array [hits]."""
        keys = self._prompt_keys(seq_id, prompt_len)
        if not len(keys):
            return keys, (np.empty(0, dtype=np.int64) if self._bulk else [])
        # with prefix caching the block holding the prompt's last token is always computed
        limit = min(len(keys), (prompt_len - 1) // self.block_size) if self.prefix_caching else len(keys)
        if self._bulk:
            return keys, self.pool.lookup_run_array(keys, limit)
        return keys, self.pool.lookup_run(keys, limit)

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id: int | None = None) -> int:
        """Slots of new blocks needed to admit: ceil((context_len + 1) / block_size) blocks, less
        the prompt blocks found in the pool (shared system prompt or prefix cache), plus any of
        those that sit in the free queue (taking them out leaves fewer free)."""
        bs = self.block_size
        # ceil((context_len + 1) / bs) spelled inline, not mathutils.cdiv: asked for the queue head every step
        if not self._sharing:                          # the common case, kept short
            return -(-(context_len + 1) // bs) * bs
        _, hits = self._hits(seq_id, prompt_len)
        cached_free = self.pool.count_refcount(hits, 0)
        return (-(-(context_len + 1) // bs) - len(hits) + cached_free) * bs

    def admit(self, seq_id: int, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Give the sequence ceil((context_len + 1) / block_size) blocks (pointing at shared or
        cached prompt blocks where it can), or None if too few are free. A sequence coming back
        from the host pool is swapped in here. Returns the room in tokens (blocks x block_size);
        ``last_hit_tokens`` says how many prompt tokens were found in the prefix cache."""
        need = -(-(context_len + 1) // self.block_size)   # ceil, inline rather than cdiv: the hot path
        pool = self.pool
        if not self._sharing and not self.swapped:      # the common case, kept short
            if need > pool.num_free:
                return None
            self.block_tables[seq_id] = pool.allocate(need)
            self._track(seq_id, prompt_len + output_len, need * self.block_size)
            return need * self.block_size
        keys, hits = self._hits(seq_id, prompt_len) if self._sharing else ((), [])
        n_hits = len(hits)
        cached_free = pool.count_refcount(hits, 0)
        if need - n_hits > pool.num_free - cached_free:
            return None
        if n_hits:
            self.shared_saving += (n_hits - cached_free) * self.block_size   # blocks another table holds
            pool.touch(hits)
        if self._bulk:     # the table as an int64 array: registered now, released from it later
            blocks = np.concatenate((hits, pool.allocate_array(need - n_hits)))
            table = blocks.tolist()
            self._admitted[seq_id] = blocks
        else:
            table = blocks = hits + pool.allocate(need - n_hits)
        upto = min(len(keys), prompt_len // self.block_size)
        if upto > n_hits:                              # this sequence fills these prompt blocks
            pool.register_all(blocks[n_hits:upto], keys[n_hits:upto])
        self.block_tables[seq_id] = table
        if self.prefix_caching:
            self.last_hit_tokens = n_hits * self.block_size
            self.hit_tokens += self.last_hit_tokens
            self.prompt_tokens += prompt_len
        host = self.swapped.pop(seq_id, None)
        if host is not None:
            self.host.give_back(host)
            self.swap_traffic += len(host)
            # Only its private blocks went to the host; the shared ones (the leading prompt blocks)
            # stayed with their other holders. Those no longer found must be computed again.
            lost = self._swapped_shared.pop(seq_id) - n_hits
            self.last_lost_start = n_hits * self.block_size
            self.last_lost_tokens = min(context_len - self.last_lost_start, lost * self.block_size) if lost > 0 else 0
        self._track(seq_id, prompt_len + output_len, need * self.block_size)
        return need * self.block_size

    def _track(self, seq_id: int, final: int, room: int) -> None:
        """Remember a newly admitted sequence's final length (tokens) and count the slots of its
        room (tokens) it will never write, if its last block is already allocated."""
        self._final[seq_id] = final
        if room >= final:
            self._unwritten[seq_id] = room - final
            self.never_written += room - final

    def grow(self, seq_id: int) -> int | None:
        """One more block at the end of the sequence's table (its last block is full); the new
        room in tokens, or None if no block is free."""
        b = self.pool.allocate_one()
        if b is None:
            return None
        table = self.block_tables[seq_id]
        table.append(b)
        room = len(table) * self.block_size
        extra = room - self._final[seq_id]
        if extra >= 0:                         # its last block: the rest of it is never written
            self._unwritten[seq_id] = extra
            self.never_written += extra
        return room

    def grow_all(self, seq_ids: list) -> int | None:
        """One more block for each listed sequence, taken from the free queue in the order listed;
        returns block_size (the room each gained), or None -- nothing taken -- if fewer blocks are
        free than sequences listed."""
        pool, n = self.pool, len(seq_ids)
        if n > pool.num_free:
            return None
        tables, final, bs = self.block_tables, self._final, self.block_size
        for seq_id, b in zip(seq_ids, pool.allocate(n)):        # (the engine's every step: kept short)
            table = tables[seq_id]
            table.append(b)
            if len(table) * bs >= final[seq_id]:                  # its last block: the rest is never written
                extra = len(table) * bs - final[seq_id]
                self._unwritten[seq_id] = extra
                self.never_written += extra
        return bs

    def free(self, seq_id: int) -> None:
        """Drop the sequence's block table: its blocks lose one reference each, last block first;
        blocks nobody else holds go to the back of the free queue."""
        self._release(seq_id)
        self._keys.pop(seq_id, None)

    def _release(self, seq_id: int) -> None:
        """Drop the sequence's block table (see :meth:`free`); its prompt keys are kept."""
        table = self.block_tables.pop(seq_id)
        self._final.pop(seq_id, None)
        self.never_written -= self._unwritten.pop(seq_id, 0)
        if self._sharing:
            blocks = self._table_array(table, self._admitted.pop(seq_id, None)) if self._bulk else table
            freed = self.pool.release(blocks)  # the blocks it alone held; the rest stay shared
            self.shared_saving -= (len(table) - len(freed)) * self.block_size
        else:                                  # nothing is ever shared: every block is exclusive
            self.pool.release_exclusive(table)

    @staticmethod
    def _table_array(table: list, admitted: np.ndarray | None) -> np.ndarray:
        """A block table as an int64 array [len(table)]: the array it was admitted with, followed
        by the blocks it grew by since (only those converted); the whole list when it has none
        (a table the v1 calls built)."""
        if admitted is None:
            return np.array(table, dtype=np.int64)
        k = len(admitted)
        if k == len(table):
            return admitted
        return np.concatenate((admitted, np.array(table[k:], dtype=np.int64)))

    def preempt(self, seq_id: int) -> str:
        """Evict a running sequence. Returns "swap" when its private blocks went to the host pool
        (counted in ``swap_traffic``), else "recompute"; either way its GPU blocks are released."""
        mode = "recompute"
        if self.preemption == "swap":
            table = self.block_tables[seq_id]
            # without sharing every block of a table is private (and the pool need not store refcounts)
            private = self.pool.count_refcount(table, 1) if self._sharing else len(table)
            if private <= self.host.num_free:
                self.swapped[seq_id] = self.host.take(private)
                self._swapped_shared[seq_id] = len(table) - private
                self.swap_traffic += private
                mode = "swap"
        self._release(seq_id)
        return mode

    def external_fragmentation(self, need: int) -> int:
        """Free slots that can never serve a request: only the remainder that forms no block."""
        return self.remainder_slots

    def snapshot(self, lengths: dict) -> tuple:
        """The pool's block tables: a tuple of (seq_id, tokens held, block table) per running
        sequence, in admission order. Cheap to take every step (tables are copied, not expanded);
        ``SimulationResult.slot_states`` turns it into a per-slot picture when one is drawn.
        With prefix caching, a last entry ``(0, 0, blocks)`` lists the blocks held only by the
        cache, least recently used first, as a read-only int64 array (up to a million blocks on a
        long trace: one numpy pass, ``ArrayBlockPool.cached_free_blocks``); request ids start at
        1, so id 0 is no request. Every picture holds its own tuples and array (none is shared
        with another picture: a pickled run, as ``tests/tools/engine_digest.py`` hashes it,
        depends on that)."""
        snap = tuple((sid, lengths[sid], tuple(table)) for sid, table in self.block_tables.items())
        if self.prefix_caching and self.pool.num_cached_free:
            snap += ((0, 0, self.pool.cached_free_blocks()),)
        return snap

    @property
    def cached_blocks(self) -> int:
        """Blocks held only by the prefix cache: no sequence holds them, their key still finds them."""
        return self.pool.num_cached_free

    @property
    def cache_evictions(self) -> int:
        """Cached blocks handed out again by the free queue so far (their keys dropped)."""
        return self.pool.evictions

    # ---------------------------------------------------------------- vLLM v1's allocation calls

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
            head = _system_prompt_tokens(shared) + [self._V1_PROMPT | base | i for i in range(shared, prompt_len)]
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
                    final: int | None = None, computed: int = 0) -> bool:
        """vLLM v1's ``allocate_slots``: make the sequence's block table hold ``upto`` tokens
        (its computed tokens plus this step's scheduled ones) -- ceil(upto / block_size) blocks, no
        block for a token not yet scheduled -- reusing ``hits`` (from :meth:`v1_computed_blocks`)
        at the front of a new table. With prefix caching, every full block among the first
        min(upto, num_tokens) tokens is registered under its chained key (prompt and generated
        blocks alike; a block computed again while an identical one is cached gets the key too
        and joins its entry, as in vLLM's ``cache_full_blocks``).

        ``computed`` (tokens with KV before this step) is what a sliding-window pool releases
        behind (``allocator.memory.sliding_window``); every layer here attends to every token, so
        nothing is released and it is unused.

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

    def check_invariants(self, lengths: dict) -> None:
        """Assert the block bookkeeping agrees with the sequences' lengths (tokens).

        Raises:
            AssertionError: a block table not exactly ceil(tokens / block_size) long (with
                ``lookahead_slots`` k > 0: from ceil(tokens / block_size) to ceil((tokens + k) /
                block_size) long, the blocks a speculating sequence's lookahead holds), a block
                listed twice in one table, a private block in two tables, refcounts that differ
                from the tables pointing at them (the pool's own check), a shared saving that does
                not match the refcounts, or a host pool over capacity.
        """
        assert set(self.block_tables) == set(lengths), "block tables and running sequences differ"
        ahead = self.lookahead_slots
        for seq_id, table in self.block_tables.items():
            assert self.blocks_for(lengths[seq_id]) <= len(table) <= self.blocks_for(lengths[seq_id] + ahead), (
                f"seq {seq_id}: {len(table)} blocks for {lengths[seq_id]} tokens"
                + (f" and {ahead} lookahead slots" if ahead else ""))
            assert len(set(table)) == len(table), f"seq {seq_id} lists a block twice"
        for seq_id, blocks in self._admitted.items():
            assert seq_id in self.block_tables and self.block_tables[seq_id][:len(blocks)] == blocks.tolist(), (
                f"seq {seq_id}: its block table no longer starts with the blocks it was admitted with")
        pool = self.pool
        pool.check_invariants(self.block_tables.values())
        saving = 0
        for b, r in enumerate(pool.refcounts):
            if r > 1:       # only a full block found by its hash is ever shared
                assert pool.hash_of(b) is not None, f"private block {b} in several tables"
                saving += (r - 1) * self.block_size
        assert saving == self.shared_saving, f"shared saving {self.shared_saving} != {saving}"
        assert self.hit_tokens <= self.prompt_tokens, "more prompt tokens hit than admitted"
        self.host.check_invariants(sum(len(h) for h in self.swapped.values()))
