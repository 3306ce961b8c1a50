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

Prefix caching with a window is not modelled (vLLM searches a windowed group's cache hits from
the right, needing only the blocks inside the window: ``SlidingWindowManager.find_longest_cache_hit``);
the allocator refuses it rather than give a number that is not vLLM's.
"""
from __future__ import annotations

from allocator.common.errors import FieldError
from allocator.common.limits import MAX_TOKENS
from allocator.common.mathutils import cdiv
from allocator.common.validate import whole_number
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
        prefix_caching: must be False (see the module docstring).

    Driven only through vLLM v1's calls (``v1_computed_blocks``, ``v1_allocate``, ``v1_free``):
    ``allocator.engine.simulate.simulate`` refuses it without v1 rules.

    Attributes:
        groups: the window per group (None: full attention), shape (groups,).
        peak_window_blocks: most blocks one sequence held in one windowed group at any step.
        peak_decode_window_blocks: the same over the steps in which it decoded one token (never
            above :func:`window_block_bound`).
        released_blocks: blocks released behind a window so far (count).

    Raises:
        FieldError: any argument out of range, ``prefix_caching`` on, or ``preemption`` "swap".
    """

    kind = "paged"
    label = "Paged"
    needs_v1_rules = True
    windowed = True

    def __init__(self, total_slots: int, block_size: int, *, sliding_window: int, full_groups: int = 0,
                 window_groups: int = 1, preemption: str = "recompute", prefix_caching: bool = False):
        self.groups = layer_groups(sliding_window, full_groups, window_groups)
        self.sliding_window = self.groups[-1]
        if prefix_caching:
            raise FieldError("prefix_caching", ": prefix caching with a sliding window is not modelled here "
                             "(vLLM finds a windowed group's cache hits by its own rule); turn one of them off")
        if preemption != "recompute":
            raise FieldError("preemption", f" = {preemption!r}: a sliding-window pool follows vLLM v1, which "
                             "preempts by recompute only")
        model_slots = whole_number("total_slots", total_slots, 1)
        self.model_slots = model_slots
        super().__init__(len(self.groups) * model_slots, block_size, preemption="recompute")
        if len(self.groups) > 1:
            self.label = "Paged (hybrid)"

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Empty the pool and forget every table (see :meth:`PagedAllocator.reset`)."""
        super().reset(shared_prefix=shared_prefix, prompts=None)
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

    def window_gap(self, seq_id: int, computed: int) -> int | None:
        """Tokens a decoder may still compute from ``computed`` before its next step releases a
        block behind the window (0: the next step does), or None without a windowed group."""
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

    def v1_computed_blocks(self, seq_id: int, prompt_len: int, num_tokens: int) -> list[int]:
        """No prefix cache here: nothing is ever found ([])."""
        return []

    def _remove_skipped(self, seq_id: int, computed: int) -> None:
        """vLLM's ``remove_skipped_blocks``: null the table entries behind the window of every
        windowed group and queue their blocks (back of the free queue, in vLLM's order). Every
        windowed group has the same window and the same table length, so the same entries."""
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
            self.pool.release_exclusive(out)          # queued last-skipped first, as vLLM's walk frees them
            self._released.update(out)
            self.released_blocks += len(out)
            self.null_entries += k - nulls
        self._nulls[seq_id] = k

    def v1_allocate(self, seq_id: int, prompt_len: int, num_tokens: int, upto: int, hits=(),
                    final: int | None = None, computed: int = 0) -> bool:
        """vLLM's ``allocate_slots`` for every group: first release the blocks behind the window
        of ``computed`` tokens (kept even when the allocation then fails, as in vLLM), then grow
        each group's table to ceil(upto / block_size) entries from the one pool.

        Returns:
            True, or False when too few blocks are free for all groups together (nothing taken).
        """
        self._remove_skipped(seq_id, computed)
        bs, groups = self.block_size, self.groups
        tables = self.group_tables.get(seq_id)
        if tables is None:
            tables = [[] for _ in groups]
        want = -(-upto // bs)
        need = sum(max(0, want - len(t)) for t in tables)
        if need > self.pool.num_free:
            return False
        if seq_id not in self.group_tables:
            self.group_tables[seq_id] = tables
            self.block_tables[seq_id] = tables[0]
        if need:
            fresh = self.pool.allocate(need)
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
        return True

    def v1_free(self, seq_id: int, keep_keys: bool = False) -> None:
        """Release a finished or preempted sequence's blocks: group by group, each table's blocks
        last first (its null entries hold nothing)."""
        self._release(seq_id)

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
            self.pool.release_exclusive([b for b in table if b != NULL_BLOCK])

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
        admission order (null entries -1), then, when some are still free, ``(-1, 0, blocks)``: the
        blocks released behind a window that nobody has taken since (drawn in their own colour)."""
        snap = tuple((sid, lengths[sid], tuple(t)) for sid, tables in self.group_tables.items() for t in tables)
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
