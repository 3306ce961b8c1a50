"""Sliding-window and hybrid paging: blocks that fall behind a layer's window go back to the pool.

A **sliding-window** layer attends only to the last ``window`` tokens: the token at position p
(0-based) reads the keys and values of positions p - window + 1 .. p. Once a sequence has computed
``c`` tokens, the next token it computes (position ``c``) no longer needs the first
``c - window + 1`` tokens, so every block lying wholly among them can be released. The rule, as
vLLM v1's sliding-window manager states it (vllm/v1/core/single_type_kv_cache_manager.py,
``SlidingWindowManager.get_num_skipped_tokens`` and ``remove_skipped_blocks``):

* skipped tokens = max(0, computed - window + 1) (:func:`skipped_tokens`);
* skipped blocks = skipped tokens // block_size, at most the blocks the table has
  (:func:`skipped_blocks`);
* the skipped entries of the block table are replaced by the **null block** (here ``-1``: a
  table keeps its length, so logical block i still covers tokens i x block_size ..), walking
  from the last skipped entry back to the first and stopping at one already null, and the
  blocks taken out go to the back of the free block queue;
* it happens at the start of every allocation for the sequence (vLLM's
  ``KVCacheManager.allocate_slots`` calls ``remove_skipped_blocks`` with the request's computed
  tokens before it counts the new blocks, and keeps the release even when it then cannot
  schedule the request), i.e. in every step that schedules the sequence.

So a decoding sequence holds at most ceil(window / block_size) + 1 blocks per windowed layer group
(:func:`window_block_bound`): after the release, its table covers tokens from the block holding
position c - window + 1 to the block of the token being computed. A step that schedules ``k`` new
tokens (a prefill chunk) allocates for all of them first and releases only in the sequence's next
step, so it may hold up to ceil((window - 1 + k) / block_size) + 1 blocks in that step
(:func:`chunk_block_bound`), as vLLM does.

A **hybrid** model mixes full-attention and sliding-window layers (gpt-oss: they alternate, window
128; Gemma 3: five windowed layers to one full). vLLM's hybrid KV-cache manager
(vllm/v1/core/kv_cache_coordinator.py, ``HybridKVCacheCoordinator``; the grouping in
vllm/v1/core/kv_cache_utils.py, ``_get_kv_cache_groups_uniform_page_size``) splits the layers into
**KV-cache groups of equally many layers**, every group of one attention type, and keeps **one
block pool** for all of them: each group has its own manager and its own block table per
request, and every block of every group comes from the same free block queue. Its page-size
rule: one block of any group holds ``block_size`` tokens of that group's layers, and because
every group has the same number of layers (and, here, the same K/V shape), every block has the
same page size in bytes, so a freed block of one group can serve any other (vLLM makes page sizes
equal, ``unify_kv_cache_spec_page_size``, by scaling a group's block size when its per-token
bytes differ; this lab's groups share one shape, so one block size serves all). A request then
holds ceil(tokens / block_size) blocks in each full-attention group and at most the window's
bound in each windowed one.

Units of a hybrid pool: a **slot** is one token in one group's layers (the Capacity page's unit,
:mod:`allocator.accounting.kv_configs`), so memory that holds ``S`` slots of the whole model holds
``groups x S`` such slots, ``groups x S // block_size`` blocks. With one group (every layer
windowed) a slot is the usual one.

Prefix caching, per group as vLLM keys it (a block's chained hash together with its group): a
block released behind the window keeps its hash and waits at the back of the free queue as a
cached block, findable until the queue hands it out again. A new request's cache hit is the
hybrid coordinator's (vllm/v1/core/kv_cache_coordinator.py, ``HybridKVCacheCoordinator.
find_longest_cache_hit``): a full-attention group needs every leading block cached, a windowed
group only the ceil((window - 1) / block_size) blocks before the hit's end, searched from the
right (``SlidingWindowManager.find_longest_cache_hit``); the hit is the longest all groups agree
on, and the windowed groups' blocks before the window are null from the start.
"""
from __future__ import annotations

from allocator.common.errors import FieldError
from allocator.common.limits import MAX_TOKENS
from allocator.common.mathutils import cdiv
from allocator.common.validate import whole_number
from allocator.memory.block_pool import BlockPool
from allocator.memory.paged import PagedAllocator

#: The null block of a block table: an entry released behind the window (vLLM's ``null_block``).
NULL_BLOCK = -1
#: Most KV-cache groups of one kind (gpt-oss: 1 full + 1 windowed; Gemma 3: 1 + 5).
MAX_GROUPS = 16


def skipped_tokens(computed: int, window: int | None) -> int:
    """Leading tokens the next computed token no longer attends to: max(0, computed - window + 1);
    0 for full attention (``window`` None). Tokens.

    Source: vllm/v1/core/single_type_kv_cache_manager.py, ``SlidingWindowManager.get_num_skipped_tokens``.
    """
    if window is None:
        return 0
    return max(0, computed - window + 1)


def skipped_blocks(computed: int, window: int | None, block_size: int) -> int:
    """Leading blocks wholly among the skipped tokens: skipped_tokens // block_size (blocks)."""
    return skipped_tokens(computed, window) // block_size


def window_block_bound(window: int, block_size: int) -> int:
    """Most blocks a decoding sequence holds in one windowed group: ceil(window / block_size) + 1.

    Why: after the release, the table starts at the block holding token c - window + 1 and ends at
    the block of token c; those ``window`` tokens straddle at most ceil(window / block_size) + 1
    blocks. Raises FieldError for a window or block size that is not a whole number >= 1."""
    whole_number("sliding_window", window, 1)
    whole_number("block_size", block_size, 1)
    return cdiv(window, block_size) + 1


def chunk_block_bound(window: int, block_size: int, new_tokens: int) -> int:
    """Most blocks a sequence holds in one windowed group in a step that schedules ``new_tokens``
    tokens (>= 1): ceil((window - 1 + new_tokens) / block_size) + 1; ``window_block_bound`` for a
    decode (one token)."""
    whole_number("new_tokens", new_tokens, 1)
    return cdiv(whole_number("sliding_window", window, 1) - 1 + new_tokens, block_size) + 1


def layer_groups(sliding_window: int, full_groups: int = 0, window_groups: int = 1) -> tuple:
    """The KV-cache groups of a model: ``full_groups`` of full attention (None) then
    ``window_groups`` windowed ones (the window, tokens), e.g. gpt-oss-120b (18 full and 18
    windowed layers, window 128) is ``layer_groups(128, 1, 1)`` = (None, 128).

    Raises:
        FieldError: ``sliding_window`` not a whole number from 1 to 10,000,000 tokens,
            ``full_groups`` not 0..16, ``window_groups`` not 1..16.
    """
    window = whole_number("sliding_window", sliding_window, 1, MAX_TOKENS)
    full = whole_number("full_groups", full_groups, 0, MAX_GROUPS)
    windowed = whole_number("window_groups", window_groups, 1, MAX_GROUPS)
    return (None,) * full + (window,) * windowed


def kv_cache_groups(full_layers: int, window_layers: int) -> tuple[int, int]:
    """(full-attention groups, windowed groups) vLLM makes of a model's layers: every group holds
    the same number of layers, the smaller kind's count -- or the larger's when it is under 1.5
    times the smaller -- and each kind fills ceil(its layers / group size) groups (padded with
    empty layers). gpt-oss-120b (18 + 18 layers): (1, 1); Gemma-3-style 10 full + 52 windowed: (1, 6).
    A model of one kind is one group. Source: vllm/v1/core/kv_cache_utils.py,
    ``_get_kv_cache_groups_uniform_page_size``.

    Raises:
        FieldError: a count that is not a whole number >= 0, or no layers at all.
    """
    full = whole_number("full_layers", full_layers, 0)
    windowed = whole_number("window_layers", window_layers, 0)
    counts = [n for n in (full, windowed) if n]
    if not counts:
        raise FieldError("window_layers", ": a model needs at least one attention layer")
    size = min(counts)
    if max(counts) < 1.5 * size:
        size = max(counts)
    return (cdiv(full, size) if full else 0, cdiv(windowed, size) if windowed else 0)


class WindowedPagedAllocator(PagedAllocator):
    """Paged KV cache of a sliding-window or hybrid model: one block pool, one block table per
    request per KV-cache group, blocks behind the window released (module docstring: the rule,
    the page-size rule and the vLLM files they come from).

    Args:
        total_slots: the memory, in slots of the whole model (one token in every layer). The pool
            is cut into ``groups x total_slots // block_size`` blocks, each ``block_size`` tokens
            of one group's layers; ``self.total_slots`` counts group slots (``groups x
            total_slots``), the unit every recorded slot figure of a run then uses.
        block_size: tokens per block, the same in every group (1 .. 4096).
        sliding_window: the window of the windowed layers, tokens (1 .. 10,000,000).
        full_groups: KV-cache groups of full-attention layers (0 .. 16; 0: every layer windowed).
        window_groups: KV-cache groups of windowed layers (1 .. 16).
        preemption: "recompute" only (these rules are vLLM v1's).
        prefix_caching: vLLM v1's prefix caching, per group: each group's full blocks are
            registered under (group, chained block hash); a block released behind the window keeps
            its hash and waits in the free queue as a cached block; a new request's hit is the
            hybrid coordinator's (:meth:`v1_computed_blocks`).

    Driven only through vLLM v1's calls (``v1_computed_blocks``, ``v1_allocate``, ``v1_free``):
    ``allocator.engine.simulate.simulate`` refuses it without v1 rules. A run's records then count
    what the pool stores (:meth:`stored_counts`): ``logical_tokens`` is the group slots holding a
    token, so a token whose block was released behind the window no longer counts.

    Attributes:
        groups: the window per group (None: full attention), shape (groups,).
        peak_window_blocks: most blocks one sequence held in one windowed group at any step.
        peak_decode_window_blocks: the same over the steps in which it decoded one token (never
            above :func:`window_block_bound`).
        released_blocks: blocks released behind a window so far (count).

    Raises:
        FieldError: any argument out of range, or ``preemption`` "swap".
    """

    kind = "paged"
    label = "Paged"
    needs_v1_rules = True
    windowed = True
    pool_class = BlockPool          # one block pool with a hash index, with or without prefix caching

    def __init__(self, total_slots: int, block_size: int, *, sliding_window: int, full_groups: int = 0,
                 window_groups: int = 1, preemption: str = "recompute", prefix_caching: bool = False):
        self.groups = layer_groups(sliding_window, full_groups, window_groups)
        self.sliding_window = self.groups[-1]
        if preemption != "recompute":
            raise FieldError("preemption", f" = {preemption!r}: a sliding-window pool follows vLLM v1, which "
                             "preempts by recompute only")
        model_slots = whole_number("total_slots", total_slots, 1)
        self.model_slots = model_slots
        super().__init__(len(self.groups) * model_slots, block_size, preemption="recompute",
                         prefix_caching=prefix_caching)
        if len(self.groups) > 1:
            self.label = "Paged (hybrid)"

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool and forget every table (see :meth:`PagedAllocator.reset`)."""
        super().reset(shared_prefix=shared_prefix, prompts=prompts)
        self.group_tables: dict[int, list[list[int]]] = {}
        self._nulls: dict[int, int] = {}        # seq_id -> null entries in each windowed table
        self.null_entries = 0                   # null entries over every table (each windowed group)
        self._released: set[int] = set()        # blocks released behind a window, not yet handed out again
        self.released_blocks = 0
        self.peak_window_blocks = 0
        self.peak_decode_window_blocks = 0
        self._last_new: dict[int, int] = {}     # seq_id -> tokens scheduled by its last allocation

    # --------------------------------------------------------------- what the engine reads

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason a request can never run: its whole context, prefilled at once (a recompute can
        be), needs more blocks in all groups together than the pool has."""
        need = len(self.groups) * self.blocks_for(prompt_len + output_len)
        if need > self.num_blocks:
            return (f"needs {need} blocks of {self.block_size} slots ({len(self.groups)} KV-cache groups x "
                    f"{prompt_len + output_len} tokens) but the pool has only {self.num_blocks} blocks")
        return None

    def stored_counts(self, tokens: int, final: int) -> tuple[int, int]:
        """(slots holding a token, slots they will hold when finished) for the running sequences
        that hold ``tokens`` tokens and will hold ``final``: each group stores every computed
        token but those in released blocks, so groups x tokens - block_size x null entries, and
        the tokens still to come land in every group."""
        stored = len(self.groups) * tokens - self.block_size * self.null_entries
        return stored, stored + len(self.groups) * (final - tokens)

    def window_gap(self, seq_id: int, computed: int) -> int:
        """Tokens a decoder may still compute from ``computed`` before its next step releases a
        block behind the window (0: the next step does). The v1 scheduler wakes it then."""
        nulls = self._nulls.get(seq_id, 0)
        # the first computed count c' >= computed with (c' - window + 1) // block_size > nulls
        return max(0, (nulls + 1) * self.block_size + self.sliding_window - 1 - computed)

    def window_stats(self) -> dict:
        """The run's window figures: the rule's bound beside the peaks held (blocks per sequence
        per windowed group) and the blocks released behind the window."""
        return {"sliding_window": self.sliding_window, "full_groups": self.groups.count(None),
                "window_groups": len(self.groups) - self.groups.count(None),
                "bound_blocks": window_block_bound(self.sliding_window, self.block_size),
                "peak_decode_window_blocks": self.peak_decode_window_blocks,
                "peak_window_blocks": self.peak_window_blocks, "released_blocks": self.released_blocks,
                "model_slots": self.model_slots}

    # --------------------------------------------------------------- vLLM v1's calls

    def _group_keys(self, g: int, keys) -> list:
        """Group ``g``'s keys of the sequence's full blocks: (group, chained key); vLLM keys a cached
        block by its hash and its group (``BlockHashWithGroupId``, vllm/v1/core/kv_cache_utils.py)."""
        return [(g, k) for k in keys]

    def _window_hit(self, g: int, keys: list, length: int) -> list:
        """A windowed group's cache hit within the first ``length`` blocks: searched from the right
        for ceil((window - 1) / block_size) cached blocks in a row, the blocks before them null
        (they lie behind the window of the last hit token); if no such run exists, the cached
        blocks in a row from the start. vLLM's ``SlidingWindowManager.find_longest_cache_hit``."""
        need = cdiv(self.sliding_window - 1, self.block_size)
        lookup = self.pool.lookup
        hit = [NULL_BLOCK] * length
        run = 0
        for i in range(length - 1, -1, -1):
            b = lookup((g, keys[i]))
            if b is None:
                run = 0
                continue
            hit[i] = b
            run += 1
            if run >= need:
                return hit[:i + run]
        return hit[:run]

    def v1_computed_blocks(self, seq_id: int, prompt_len: int, num_tokens: int) -> list:
        """vLLM's hybrid coordinator's ``find_longest_cache_hit`` (vllm/v1/core/kv_cache_coordinator.py,
        ``HybridKVCacheCoordinator``): the longest number of leading blocks, at most (num_tokens - 1)
        // block_size, that every group can serve from the cache -- a full-attention group needs every
        block cached in a row from the first, a windowed group only the blocks inside the window of the
        last hit token (:meth:`_window_hit`) -- shrunk until all groups agree. [] without prefix
        caching.

        Returns:
            one tuple per hit block: the block of each group (-1, the null block, where a windowed
            group needs none), shape (hit blocks, groups). Nothing is taken or touched.
        """
        if not self.prefix_caching:
            return []
        limit = (num_tokens - 1) // self.block_size
        if not limit:
            return []
        keys = self._v1_keys(seq_id, prompt_len, num_tokens)[:limit]
        length, hits = limit, None
        while length:
            hits = []
            for g, window in enumerate(self.groups):
                if window is None:
                    got = self.pool.lookup_run(self._group_keys(g, keys), length)
                else:
                    got = self._window_hit(g, keys, length)
                hits.append(got)
            shortest = min(len(h) for h in hits)
            if shortest == length:
                break
            length = shortest
        if not length:
            return []
        return list(zip(*(h[:length] for h in hits)))

    def _give_back(self, blocks: list) -> list:
        """Drop one reference to each block of ``blocks`` (a table slice in logical order), the
        last first: blocks nobody else holds join the back of the free queue, a block with a hash
        as a cached block (prefix caching). Returns the blocks that became free."""
        if not self.prefix_caching:                   # nothing is ever shared: every block is exclusive
            self.pool.release_exclusive(blocks)
            return blocks
        freed = self.pool.release(blocks)
        self.shared_saving -= (len(blocks) - len(freed)) * self.block_size
        return freed

    def _remove_skipped(self, seq_id: int, computed: int) -> None:
        """vLLM's ``remove_skipped_blocks``: null the table entries behind the window of every
        windowed group and give their blocks back (the back of the free queue, in the order vLLM's
        walk from the last skipped entry frees them; a block another table shares stays in use).
        Every windowed group has the same window and table length, so the same entries."""
        tables = self.group_tables.get(seq_id)
        if not tables:
            return
        nulls = self._nulls.get(seq_id, 0)
        k = min(skipped_blocks(computed, self.sliding_window, self.block_size), len(tables[-1]))
        if k <= nulls:                                # nothing newly behind the window
            return
        for window, table in zip(self.groups, tables):
            if window is None:
                continue
            out = table[nulls:k]
            table[nulls:k] = [NULL_BLOCK] * (k - nulls)
            freed = self._give_back(out)
            self._released.update(freed)
            self.released_blocks += len(freed)
            self.null_entries += k - nulls
        self._nulls[seq_id] = k

    def v1_allocate(self, seq_id: int, prompt_len: int, num_tokens: int, upto: int, hits=(),
                    final: int | None = None, computed: int = 0) -> bool:
        """vLLM's ``allocate_slots`` for every group: first release the blocks behind the window
        of ``computed`` tokens (kept even when the allocation then fails, as in vLLM), then, for a
        new table, take the cache hits (``hits`` from :meth:`v1_computed_blocks`: each group's
        blocks, null where the window needs none), then grow each group's table to
        ceil(upto / block_size) entries from the one pool. With prefix caching, every full block
        among the first min(upto, num_tokens) tokens is registered under (group, chained key).

        Returns:
            True, or False when too few blocks are free for all groups together (hits taken out
            of the free queue count against it; nothing taken).
        """
        self._remove_skipped(seq_id, computed)
        bs, groups, pool = self.block_size, self.groups, self.pool
        tables = self.group_tables.get(seq_id)
        want = -(-upto // bs)
        live_hits = []
        if tables is None:
            tables = [[h[g] for h in hits] for g in range(len(groups))]
            live_hits = [b for t in tables for b in t if b != NULL_BLOCK]
        need = sum(max(0, want - len(t)) for t in tables)
        cached_free = pool.count_refcount(live_hits, 0) if live_hits else 0
        if need + cached_free > pool.num_free:
            return False
        if seq_id not in self.group_tables:
            self.group_tables[seq_id] = tables
            self.block_tables[seq_id] = tables[-1]
            if hits:
                # leading null entries of a windowed group's hit: behind the window of its last hit token
                nulls = next((i for i, b in enumerate(tables[-1]) if b != NULL_BLOCK), len(tables[-1]))
                if nulls:
                    self._nulls[seq_id] = nulls
                    self.null_entries += nulls * (len(groups) - groups.count(None))
                self.shared_saving += (len(live_hits) - cached_free) * bs
                pool.touch(live_hits)
                self._released.difference_update(live_hits)
            if self.prefix_caching:
                self.last_hit_tokens = len(hits) * bs
        if need:
            fresh = pool.allocate(need)
            self._released.difference_update(fresh)
            i = 0
            for t in tables:
                n = want - len(t)
                if n > 0:
                    t.extend(fresh[i:i + n])
                    i += n
        new = upto - computed
        self._last_new[seq_id] = new
        nulls = self._nulls.get(seq_id, 0)
        held = len(tables[-1]) - nulls                # a windowed group's live blocks (the last group is one)
        if held > self.peak_window_blocks:
            self.peak_window_blocks = held
        if new == 1 and held > self.peak_decode_window_blocks:
            self.peak_decode_window_blocks = held
        if final is not None:
            self._final[seq_id] = final
            extra = want * bs - final
            if extra >= 0:                      # its last block, in every group: the rest is never written
                self.never_written += len(groups) * extra - self._unwritten.get(seq_id, 0)
                self._unwritten[seq_id] = len(groups) * extra
        if self.prefix_caching:
            full = min(upto, num_tokens) // bs
            done = self._v1_registered.get(seq_id, 0)
            if full > done:
                keys = self._v1_keys(seq_id, prompt_len, num_tokens)[done:full]
                for g, table in enumerate(tables):
                    pairs = [(b, k) for b, k in zip(table[done:full], self._group_keys(g, keys)) if b != NULL_BLOCK]
                    if pairs:
                        pool.register_all([b for b, _ in pairs], [k for _, k in pairs])
                self._v1_registered[seq_id] = full
        return True

    def v1_free(self, seq_id: int, keep_keys: bool = False) -> None:
        """Release a finished (``keep_keys=False``) or preempted sequence's blocks: group by group,
        each table's blocks last first (its null entries hold nothing); cached blocks stay findable."""
        self._release(seq_id)
        self._v1_registered.pop(seq_id, None)
        if not keep_keys:
            self._keys.pop(seq_id, None)

    def _release(self, seq_id: int) -> None:
        tables = self.group_tables.pop(seq_id)
        self.block_tables.pop(seq_id, None)
        self._final.pop(seq_id, None)
        self._last_new.pop(seq_id, None)
        self.never_written -= self._unwritten.pop(seq_id, 0)
        nulls = self._nulls.pop(seq_id, 0)
        for window, table in zip(self.groups, tables):
            if window is not None:
                self.null_entries -= nulls
            self._give_back([b for b in table if b != NULL_BLOCK])

    def preempt(self, seq_id: int) -> str:
        """Recompute preemption: every group's blocks released."""
        self._release(seq_id)
        return "recompute"

    def _classroom_refused(self, *args, **kwargs):
        raise FieldError("rules", ": a sliding-window pool follows vLLM v1's managers; run it under v1 rules")

    admit = grow = grow_all = free = _classroom_refused

    # --------------------------------------------------------------- pictures and checks

    def snapshot(self, lengths: dict) -> tuple:
        """The pool's block tables: (seq_id, tokens, table) per group of each running sequence, in
        admission order (null entries -1); with prefix caching ``(0, 0, blocks)``, the blocks held only
        by the cache; then, when some are still free, ``(-1, 0, blocks)``: the blocks released behind
        a window that nobody has taken since (drawn in their own colour)."""
        snap = tuple((sid, lengths[sid], tuple(t)) for sid, tables in self.group_tables.items() for t in tables)
        if self.prefix_caching and self.pool.num_cached_free:
            snap += ((0, 0, self.pool.cached_free_blocks()),)
        if self._released:
            snap += ((-1, 0, tuple(sorted(self._released))),)
        return snap

    def check_invariants(self, lengths: dict) -> None:
        """Assert the tables agree with the sequences' lengths and the window rule.

        Raises:
            AssertionError: a table not ceil(tokens / block_size) long, a null entry after a live
                one, a windowed group holding more blocks than the last step's bound, a full
                group with a null entry, or refcounts that differ from the tables (the pool's check).
        """
        assert set(self.group_tables) == set(lengths), "block tables and running sequences differ"
        live = []
        nulls_total = 0
        bs = self.block_size
        for sid, tables in self.group_tables.items():
            n = self._nulls.get(sid, 0)
            for window, table in zip(self.groups, tables):
                assert len(table) == self.blocks_for(lengths[sid]), f"seq {sid}: {len(table)} blocks"
                k = sum(1 for b in table if b == NULL_BLOCK)
                if window is None:
                    assert k == 0, f"seq {sid}: a full-attention table with a null entry"
                    continue
                assert table[:k] == [NULL_BLOCK] * k and k == n, f"seq {sid}: null entries out of place"
                nulls_total += k
                assert len(table) - k <= chunk_block_bound(window, bs, max(1, self._last_new.get(sid, 1))), (
                    f"seq {sid}: {len(table) - k} blocks in a {window}-token window")
                live.append([b for b in table if b != NULL_BLOCK])
            for window, table in zip(self.groups, tables):
                if window is None:
                    live.append(table)
        assert nulls_total == self.null_entries, "null entries miscounted"
        assert not (self._released & {b for t in live for b in t}), "a released block is still in a table"
        self.pool.check_invariants(live)
        saving = sum((r - 1) * bs for r in self.pool.refcounts if r > 1)
        assert saving == self.shared_saving, f"shared saving {self.shared_saving} != {saving}"
