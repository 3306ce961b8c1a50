"""The Block tables page's demo, without streamlit: one pool, its sequences, and what happened.

Words stand in for tokens (each word is one token id) and a block holds :data:`BLOCK_SIZE` of them,
so students can read what each physical block contains. :class:`BlockTablesDemo` holds one
:class:`allocator.memory.block_manager.BlockManager` across button presses, the page's bookkeeping about
each sequence (tenant, sample sentence, colour), the numbered log of what the cache did, and the
blocks to highlight. Every number it writes comes from the manager. The page script keeps one demo
in ``st.session_state`` and only lays it out.

A refused operation (out of GPU blocks, host pool full, no sequence chosen) is recorded as
:attr:`BlockTablesDemo.error` and changes nothing else. Refusals are told apart by exception type
and ``.field`` (:class:`allocator.common.validate.OutOfBlocksError`, :class:`allocator.common.validate.FieldError`),
never by reading the message text.

Sources: Kwon et al., PagedAttention (SOSP 2023) sections 4.4-4.5; vLLM's prefix-caching design
(chained block hash with extra keys such as the LoRA id and a per-request cache salt:
``vllm/v1/core/kv_cache_utils.py``); ``assets/reference_figures.md`` R8 (two sequences sharing a
system prompt's blocks; chained hashes; the copy-on-write order).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from allocator.memory.block_pool import BLOCK_CACHED, BLOCK_FREE
from allocator.memory.block_manager import BlockManager
from allocator.common.formats import plural
from allocator.common.errors import FieldError, OutOfBlocksError
from allocator.viz.theme import REQUEST_COLOURS

BLOCK_SIZE = 4               # slots (words) per block
NUM_BLOCKS = 16              # GPU pool, blocks
NUM_HOST_BLOCKS = 8          # host (swap) pool, blocks
FREE_ORDER_SEED = 3          # shuffles the starting free queue: physical order != logical order

SYSTEM = ["You", "are", "a", "calm", "tutor", ".", "Be", "brief"]          # two full blocks
QUESTION_A = ["Why", "does", "paging", "help", "?"]
QUESTION_B = ["Define", "a", "block"]
OTHER_OPENING = ["You", "are", "a", "pirate", ".", "Talk", "like", "one"]
NEW_QUESTIONS = [["How", "do", "forks", "share", "?"], ["When", "is", "a", "block", "freed", "?"],
                 ["What", "is", "a", "hash", "?"]]
SAMPLES = [
    ["Blocks", "fill", "on", "demand", ",", "so", "little", "is", "wasted", "."],
    ["Four", "slots", "of", "K", "and", "V", "each", "."],
    ["Memory", "grows", "one", "block", "at", "a", "time", "."],
    ["Tables", "map", "logical", "to", "physical", "blocks", "."],
    ["Sharing", "stores", "the", "prompt", "once", "."],
    ["Each", "copy", "splits", "on", "its", "first", "write", "."],
]
TENANTS = ["tenant-1", "tenant-2"]

#: Every action :meth:`BlockTablesDemo.do` accepts, in the order the page shows its buttons.
ACTIONS = ("append", "fork", "write_shared", "finish", "new_same", "new_other", "swap_out", "swap_in", "reset")
#: The actions that need a chosen sequence (``seq_id``) that still exists.
SEQUENCE_ACTIONS = frozenset({"append", "fork", "finish", "swap_out", "swap_in"})
#: ``FieldError.field`` values that name a sequence id: their message reads well without the field name.
_SEQUENCE_FIELDS = frozenset({"seq_id", "parent_id", "child_id"})


def _vocabulary() -> list[str]:
    words: list[str] = []
    for group in [SYSTEM, QUESTION_A, QUESTION_B, OTHER_OPENING, *NEW_QUESTIONS, *SAMPLES]:
        for w in group:
            if w not in words:
                words.append(w)
    return words


VOCAB = _vocabulary()
TOKEN_OF = {w: i for i, w in enumerate(VOCAB)}


def ids(words: list[str]) -> list[int]:
    """Token ids of a list of words (each word is one token). Raises KeyError for a word not in VOCAB."""
    return [TOKEN_OF[w] for w in words]


def word(token_id: int) -> str:
    """The word a token id stands for."""
    return VOCAB[token_id]


def words_of(token_ids: list[int]) -> str:
    """The words of a list of token ids, joined by spaces."""
    return " ".join(word(t) for t in token_ids)


def last_token_hits(block_size: int = BLOCK_SIZE) -> dict:
    """Cached tokens a fully cached prompt of ``block_size`` and of ``2 * block_size`` tokens gets
    back from a fresh :class:`BlockManager`, and how many blocks the longer prompt's last block
    hash then names (the block computed again joins the first copy): the numbers the page's
    vLLM note quotes, computed rather than typed.

    Returns:
        ``{"one_block": (tokens, cached), "two_blocks": (tokens, cached), "copies": k}``.

    Source: vllm/v1/core/kv_cache_manager.py, ``get_computed_blocks`` (``max_cache_hit_length =
    request.num_tokens - 1``); vllm/v1/core/block_pool.py, ``cache_full_blocks``.
    """
    out = {}
    for name, n in (("one_block", block_size), ("two_blocks", 2 * block_size)):
        mgr = BlockManager(8, block_size)
        prompt = list(range(n))
        mgr.allocate("first", prompt)
        out[name] = (n, mgr.num_cached_tokens(prompt))
        if name == "two_blocks":
            mgr.allocate("again", prompt)
            last = mgr.block_table("again")[-1]
            out["copies"] = len(mgr.pool.lookup_all(mgr.block_hash_of(last)))
    return out


def vllm_note(block_size: int = BLOCK_SIZE) -> str:
    """The page's note (Markdown) on where the lab follows vLLM v1 and where its classroom loop
    departs from it, and why; its numbers come from :func:`last_token_hits`.

    Sources: vllm/v1/core/kv_cache_manager.py (``get_computed_blocks``, ``allocate_slots``);
    vllm/v1/core/block_pool.py (``BlockHashToBlockMap``, ``cache_full_blocks``,
    ``_maybe_evict_cached_block``); the classroom rules: ``assets/reference_figures.md`` R9 and
    :mod:`allocator.engine.simulate`.
    """
    ex = last_token_hits(block_size)
    (n1, c1), (n2, c2) = ex["one_block"], ex["two_blocks"]
    return (
        "**This page follows vLLM v1's prefix caching.**\n"
        "- *The last prompt token is never a cache hit.* Its logits give the first output token, so it is "
        f"always computed. Here a fully cached prompt of {n2} words gets {c2} back from the cache and one of "
        f"{n1} words gets {c1}: the block holding the last word is computed again.\n"
        "- *A block computed again gets its hash.* Blocks are never de-duplicated (a block table only grows "
        "at its end), so the recomputed block is hashed like any block that fills up, and the hash then names "
        f"both copies (in the {n2}-word example, the last block's hash names {ex['copies']} blocks). "
        "A lookup finds the copy cached first; evicting "
        "one copy leaves the hash finding the other.\n\n"
        "**Where the classroom loop departs from vLLM, on purpose.** The engine's classroom scheduler, which "
        "every simulating page except \"Checked against a real engine\" runs, keeps two of the seed lesson's "
        "rules:\n"
        "1. *It takes the block for the first generated token when it admits a request.* vLLM v1 allocates a "
        "slot only in the step that computes it. Taking it at admission makes admission one decision about "
        "memory: the prompt and the token prefill emits fit, or the request waits.\n"
        "2. *It never caches generated tokens:* only prompt blocks get a hash. vLLM hashes every full block, "
        "generated ones too; the classroom leaves them out because the answer is the model's and its "
        "workloads do not say which later prompt repeats it.\n\n"
        "Everything else follows vLLM: this page, the block pool every paged model shares (several blocks "
        "per hash, hashes on recomputed blocks), and the engine's vLLM v1 rules (\"Checked against a real "
        "engine\", `python -m allocator replay-vllm`), which also allocate slots step by step and cache "
        "generated blocks.\n\n"
        "Sources: vllm/v1/core/kv_cache_manager.py (`get_computed_blocks`: max_cache_hit_length = "
        "num_tokens − 1; `allocate_slots`); vllm/v1/core/block_pool.py (`BlockHashToBlockMap`, "
        "`cache_full_blocks`, `_maybe_evict_cached_block`); the classroom rules: the lesson's reference R9."
    )


class Notice(NamedTuple):
    """A message for the page to show under the buttons: ``kind`` is ``"error"`` or ``"info"``."""

    kind: str
    text: str


def _sentence(text: str) -> str:
    """``text`` with a capital first letter and a closing full stop; a fallback for an empty one."""
    if not text:
        return "That operation was refused."
    text = text[0].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def refusal_text(exc: ValueError) -> str:
    """What the page shows for a refused operation, chosen by exception type and ``.field``.

    * :class:`OutOfBlocksError` on ``num_blocks``: "The GPU pool is out of blocks: <detail>. Finish
      or swap out a sequence first."; on ``num_host_blocks``: "The host pool is full: <detail>. Swap a
      sequence in or finish one." (``<detail>`` is the error's ``detail``).
    * another :class:`FieldError` about a sequence id (``seq_id``, ``parent_id``, ``child_id``): its
      ``problem`` as a sentence ("Sequence 'A' is not swapped out."); any other field: the whole
      message as a sentence.
    * a plain ``ValueError`` (a manager that does not raise FieldError yet): its message as a sentence.
    """
    if isinstance(exc, OutOfBlocksError):
        if exc.field == "num_host_blocks":
            return ("The host pool is full: " + exc.detail
                    + ". Swap a sequence in or finish one.")
        return ("The GPU pool is out of blocks: " + exc.detail
                + ". Finish or swap out a sequence first.")
    if isinstance(exc, FieldError) and exc.field in _SEQUENCE_FIELDS:
        return _sentence(exc.detail)
    return _sentence(str(exc))


class BlockTablesDemo:
    """One block-tables lesson: a :class:`BlockManager` (:data:`NUM_BLOCKS` GPU blocks of
    :data:`BLOCK_SIZE` slots, :data:`NUM_HOST_BLOCKS` host blocks, a shuffled free queue) held across
    actions, with A and B sharing an 8-word system prompt to start.

    Args:
        naive_hashing: hash a block's own tokens only (the flawed scheme) instead of chaining the
            hash over every earlier token.
        salt: give each tenant its own cache salt (A is ``tenant-1``, B ``tenant-2``).

    Attributes:
        mgr: the :class:`BlockManager`; every number shown comes from it.
        meta: ``{seq_id: {"tenant", "sample", "next", "colour"}}`` -- the tenant, which of
            :data:`SAMPLES` the sequence appends from and how far it got, its colour index.
        log: what happened, one Markdown line per event, oldest first.
        highlight: ``{block_id: label}`` for the blocks the last action touched.
        selected: the sequence the page shows as chosen (the caller's choice, moved by an action
            that focuses another sequence: a new request, a fork's child, the copy-on-write writer).
        error: the :class:`Notice` for the last action (a refusal, or why Write shared had nothing
            to do), or None when it succeeded.
    """

    def __init__(self, naive_hashing: bool = False, salt: bool = False):
        self.naive_hashing = bool(naive_hashing)
        self.salt = bool(salt)
        self.reset()

    # ------------------------------------------------------------------ settings and reset

    def reset(self) -> None:
        """A fresh pool with A and B, both starting with the same system prompt (keeps the settings)."""
        order = np.random.default_rng(FREE_ORDER_SEED).permutation(NUM_BLOCKS).tolist()
        self.mgr = BlockManager(NUM_BLOCKS, BLOCK_SIZE, NUM_HOST_BLOCKS,
                                chain_hashes=not self.naive_hashing, free_order=order)
        self.meta: dict = {}
        self.log: list[str] = []
        self.highlight: dict = {}
        self.error: Notice | None = None
        #: swapped-out sequence -> {GPU block it shared at swap-out: the other holders then}
        self.shared_at_swap_out: dict = {}
        self._swap_tables: dict = {}     # swapped-out sequence -> its GPU block table before the swap
        self._colours = 0            # colour index of the next sequence
        self._next_request = 0       # which of NEW_QUESTIONS the next "same prompt" request asks
        mode = "each block's own tokens only (flawed)" if self.naive_hashing else \
            "chained over every earlier token"
        salt = "one salt per tenant" if self.salt else "no salt"
        self.log.append(f"New pool: {NUM_BLOCKS} blocks of {BLOCK_SIZE} slots, {NUM_HOST_BLOCKS} host blocks; "
                        f"block hash {mode}; {salt}.")
        self._add_sequence("A", SYSTEM + QUESTION_A, TENANTS[0], 0)
        self._add_sequence("B", SYSTEM + QUESTION_B, TENANTS[1], 1)
        self.selected = "A"

    def set_naive_hashing(self, on: bool) -> None:
        """Switch the flawed own-tokens-only block hash on or off; restarts the demo."""
        self.naive_hashing = bool(on)
        self.reset()

    def set_salt(self, on: bool) -> None:
        """Switch one cache salt per tenant on or off; restarts the demo."""
        self.salt = bool(on)
        self.reset()

    # ------------------------------------------------------------------ reading

    def colour(self, seq_id) -> str:
        """The colour of ``seq_id`` (hex), from :data:`REQUEST_COLOURS` by the order it arrived."""
        return REQUEST_COLOURS[self.meta[seq_id]["colour"] % len(REQUEST_COLOURS)]

    def colours(self) -> dict:
        """``{seq_id: colour}`` for every sequence the manager holds (running or swapped out)."""
        return {s: self.colour(s) for s in self.mgr.sequences()}

    def running(self) -> list:
        """Sequences whose blocks are on the GPU (not swapped out), in the manager's order."""
        return [s for s in self.mgr.sequences() if not self.mgr.is_swapped(s)]

    # ------------------------------------------------------------------ the dispatcher

    def do(self, action: str, seq_id=None, *, tenant: str | None = None) -> None:
        """Run one action of the page (one button press) on the pool.

        Args:
            action: one of :data:`ACTIONS`.
            seq_id: the chosen sequence (default: :attr:`selected`); it becomes :attr:`selected`.
                The actions in :data:`SEQUENCE_ACTIONS` act on it; Write shared prefers it.
            tenant: the tenant of a new request (``new_same``, ``new_other``) when the salt is on;
                default ``tenant-1``. Without the salt every new request is ``tenant-1``.

        A refusal (out of blocks, host pool full, a sequence that is gone or swapped out) sets
        :attr:`error` and changes nothing else; a success clears it.

        Raises:
            FieldError: ``action`` is not one of :data:`ACTIONS` (field ``"action"``); nothing changes.
        """
        handler = self._HANDLERS.get(action)
        if handler is None:
            raise FieldError("action", f" = {action!r} is not an action of the demo "
                                       f"(one of: {', '.join(ACTIONS)})")
        seq_id = self.selected if seq_id is None else seq_id
        self.error = None
        self.selected = seq_id
        try:
            if action in SEQUENCE_ACTIONS and seq_id not in self.mgr.sequences():
                raise FieldError("seq_id", ": choose a sequence first (none is left: add a new request)")
            handler(self, seq_id, tenant)
        except ValueError as exc:      # FieldError / OutOfBlocksError; plain ValueError from an older manager
            self.error = Notice("error", refusal_text(exc))

    # ------------------------------------------------------------------ the actions

    def _add_sequence(self, seq_id: str, words: list[str], tenant: str, sample: int) -> None:
        """Allocate a new request and describe what the cache did (the manager refuses first, if at all)."""
        mgr = self.mgr
        res = mgr.allocate(seq_id, ids(words), cache_salt=tenant if self.salt else None)
        self.meta[seq_id] = {"tenant": tenant, "sample": sample, "next": 0, "colour": self._colours}
        self._colours += 1
        table = mgr.block_table(seq_id)
        who = f"{seq_id} ({tenant})" if self.salt else seq_id
        text = (f"**{who}** arrives with {len(words)} tokens \u201c{' '.join(words)}\u201d: "
                f"{len(table)} blocks, table {table}.")
        if res.reused:
            shared = [table[i] for i in res.reused]
            one = len(res.reused) == 1
            text += (f" The hash{'' if one else 'es'} of logical block{'' if one else 's'} {list(res.reused)} "
                     f"{'was' if one else 'were'} found in the cache, so it points at existing "
                     f"block{'' if one else 's'} {shared} instead of computing {'it' if one else 'them'} again "
                     f"({res.num_cached_tokens} leading tokens served from cache).")
            if res.num_cached_tokens < len(res.reused) * BLOCK_SIZE:
                text += " A reused block is not at the start of the prompt: look at the warning above."
        elif mgr.enable_prefix_caching:
            text += " None of its full blocks was in the cache."
        if res.evicted:
            text += (f" Taking fresh blocks evicted cached block{'' if len(res.evicted) == 1 else 's'} "
                     f"{list(res.evicted)}.")
        self.log.append(text)
        hl = {b: "new" for b in res.new_blocks}
        hl.update({table[i]: "from cache" for i in res.reused})
        self.highlight = hl
        self.selected = seq_id

    def _next_name(self, prefix: str) -> str:
        taken = set(self.meta)
        k = 1
        while f"{prefix}{k}" in taken:
            k += 1
        return f"{prefix}{k}" if prefix else str(k)

    def _fresh_request_name(self) -> str:
        taken = set(self.meta)
        for letter in "CDEFGHIJKLMNOPQRSTUVWXYZ":
            if letter not in taken:
                return letter
        return self._next_name("R")

    def _new_tenant(self, tenant: str | None) -> str:
        return (tenant or TENANTS[0]) if self.salt else TENANTS[0]

    def _append(self, seq_id, _tenant=None) -> None:
        """Append the next word of the sequence's sample sentence (a new block, or copy-on-write)."""
        mgr = self.mgr
        meta = self.meta[seq_id]
        sample = SAMPLES[meta["sample"] % len(SAMPLES)]
        w = sample[meta["next"] % len(sample)]
        res = mgr.append_token(seq_id, TOKEN_OF[w])
        meta["next"] += 1
        if res.cow_from is not None:
            self.log.append(
                f"**{seq_id}** writes \u201c{w}\u201d into its last block {res.cow_from}, which is shared "
                f"(refcount {mgr.refcount(res.cow_from) + 1}). Copy-on-write: {seq_id} drops its "
                f"reference to block {res.cow_from} (refcount now {mgr.refcount(res.cow_from)}), "
                f"copies {plural(len(mgr.block_tokens(res.block_id)) - 1, 'token')} into free block "
                f"{res.block_id}, points its table there, then writes \u201c{w}\u201d into slot {res.slot}.")
            self.highlight = {res.block_id: f"copy of {res.cow_from}", res.cow_from: "copied from"}
        elif res.new_block:
            self.log.append(
                f"**{seq_id}**'s last block was full, so \u201c{w}\u201d opens block {res.block_id} "
                f"(slot 0); its other {BLOCK_SIZE - 1} slots are allocated but empty."
                + (" That block came from the cache and its old contents were evicted."
                   if res.evicted is not None else ""))
            self.highlight = {res.block_id: "new"}
        else:
            self.log.append(f"**{seq_id}** writes \u201c{w}\u201d into slot {res.slot} of block {res.block_id} "
                            f"(refcount 1: nobody else sees it, so no copy).")
            self.highlight = {res.block_id: "written"}
        if len(mgr.token_ids(seq_id)) % BLOCK_SIZE == 0 and mgr.block_hash_of(res.block_id) is not None:
            self.log.append(f"Block {res.block_id} is now full, so its hash is recorded: a later request with "
                            f"the same tokens before and in it can find it.")

    def _fork(self, seq_id, _tenant=None) -> None:
        """A second sample of ``seq_id`` sharing all its blocks (refcounts + 1, nothing copied)."""
        child = self._next_name(f"{seq_id}.")
        table = self.mgr.fork(seq_id, child)
        parent = self.meta[seq_id]
        self.meta[child] = {"tenant": parent["tenant"], "sample": 2 + len(self.meta), "next": 0,
                            "colour": self._colours}
        self._colours += 1
        self.log.append(f"**Fork**: {child} starts as a second sample of {seq_id}. It gets a block table "
                        f"{table} pointing at the very same blocks, and each of their refcounts goes up "
                        f"by one. Nothing is copied yet.")
        self.highlight = {b: "shared" for b in table}
        self.selected = child

    def _write_shared(self, seq_id, _tenant=None) -> None:
        """Append to a running sequence whose partly filled last block is shared: copy-on-write.

        Prefers ``seq_id``, else the last such sequence; with none, only sets an info notice.
        """
        mgr = self.mgr
        candidates = [s for s in self.running()
                      if len(mgr.token_ids(s)) % BLOCK_SIZE and mgr.refcount(mgr.block_table(s)[-1]) > 1]
        if not candidates:
            self.error = Notice("info", "No sequence is about to write into a shared block: press **Fork** "
                                        "first (a fork shares the partly filled last block).")
            return
        target = seq_id if seq_id in candidates else candidates[-1]
        self._append(target)
        self.selected = target

    def _finish(self, seq_id, _tenant=None) -> None:
        """Free ``seq_id``: one reference dropped per block; full blocks stay findable by hash."""
        mgr = self.mgr
        table = mgr.block_table(seq_id) or mgr.host_table(seq_id)
        swapped = mgr.is_swapped(seq_id)
        mgr.free(seq_id)
        self.shared_at_swap_out.pop(seq_id, None)
        self._swap_tables.pop(seq_id, None)
        if swapped:
            self.log.append(f"**{seq_id}** finishes while swapped out: its {len(table)} host blocks are free again.")
        else:
            states = {b: mgr.block_state(b) for b in table}
            kept = [b for b in table if states[b] not in (BLOCK_FREE, BLOCK_CACHED)]
            cached = [b for b in table if states[b] == BLOCK_CACHED]
            free = [b for b in table if states[b] == BLOCK_FREE]
            text = f"**{seq_id}** finishes and drops one reference to each of {table}."
            if kept:
                text += f" Still used by others: {kept}."
            if cached:
                text += f" Refcount 0 but full, so still findable by hash until reused: {cached}."
            if free:
                text += f" Back to plain free: {free}."
            self.log.append(text)
            self.highlight = {b: "released" for b in table}
        remaining = mgr.sequences()
        self.selected = remaining[0] if remaining else None

    def _new_same(self, _seq_id, tenant=None) -> None:
        """A new request: the system prompt and the next of :data:`NEW_QUESTIONS` (its prompt blocks hit)."""
        k = self._next_request
        self._add_sequence(self._fresh_request_name(), SYSTEM + NEW_QUESTIONS[k % len(NEW_QUESTIONS)],
                           self._new_tenant(tenant), 3 + self._colours)
        self._next_request += 1        # only once admitted: a refused request asks the same question again

    def _new_other(self, _seq_id, tenant=None) -> None:
        """A new request: another opening, then A's question (its third block's words match A's)."""
        name = self._fresh_request_name()
        self._add_sequence(name, OTHER_OPENING + QUESTION_A, self._new_tenant(tenant), 3 + self._colours)
        if self.mgr.chain_hashes and not self.mgr.wrong_shares():
            self.log.append(f"{name}'s third block holds the same four words as A's third block, but its "
                            "hash also covers the eight words before it, which differ, so it is not "
                            "confused with A's.")

    def _swap_out(self, seq_id, _tenant=None) -> None:
        """Preempt ``seq_id`` by swapping its blocks to the host pool.

        The log says what the manager did: every logical block is copied to a host block; on the
        GPU only this sequence's references go, so a block falls to refcount 0 (freed) only if no
        other block table lists it; the others stay in use, with their refcount after the swap.
        """
        mgr = self.mgr
        mapping = mgr.swap_out(seq_id)
        gpu = [g for g, _ in mapping]
        freed = [g for g in gpu if mgr.refcount(g) == 0]
        kept = {g: mgr.holders(g) for g in gpu if mgr.refcount(g) > 0}
        self.shared_at_swap_out[seq_id] = kept
        self._swap_tables[seq_id] = gpu
        text = (f"**{seq_id}** is preempted by swapping: its blocks {gpu} are copied to host blocks "
                f"{[h for _, h in mapping]} ({mgr.num_host_free_blocks} of {NUM_HOST_BLOCKS} host blocks "
                f"still free), and {seq_id}'s references to them go. ")
        text += (f"Freed on the GPU (refcount 0): {freed}. " if freed else "No block is freed on the GPU. ")
        if kept:
            still = ", ".join(f"{g} (refcount {mgr.refcount(g)}: {', '.join(map(str, h))})"
                              for g, h in kept.items())
            text += f"Still in use by other sequences: {still}."
        self.log.append(text.rstrip())
        self.highlight = {g: "to host" for g, _ in mapping}

    def _swap_in(self, seq_id, _tenant=None) -> None:
        """Bring a swapped-out ``seq_id`` back to whichever GPU blocks are free.

        Every host block gets a GPU block of its own: blocks the sequence shared before it was
        swapped out are not shared again (vLLM's v0 block manager swapped a whole sequence group
        out and in together, one host block per shared GPU block, for this reason:
        ``vllm/core/block_manager_v1.py``, ``swap_out`` / ``swap_in``).
        """
        mapping = self.mgr.swap_in(seq_id)
        gpu = [g for _, g in mapping]
        text = (f"**{seq_id}** is swapped back in before it resumes: host blocks "
                f"{[h for h, _ in mapping]} go to whichever GPU blocks were free: {gpu}.")
        shared = self.shared_at_swap_out.pop(seq_id, {})
        if shared:
            mgr = self.mgr
            others = sorted({str(o) for h in shared.values() for o in h})
            # pairs (old block, its copy) whose old block still holds the same tokens for someone
            twice = [(g, new) for g, (_, new) in zip(self._swap_tables.pop(seq_id, []), mapping)
                     if g in shared and mgr.refcount(g) > 0 and mgr.block_tokens(g) == mgr.block_tokens(new)]
            text += (f" They are {seq_id}'s own copies: blocks {list(shared)}, which it shared with "
                     f"{' and '.join(others) if len(others) < 3 else ', '.join(others)} before the swap, "
                     "are not shared again")
            text += (f"; the pool now holds the tokens of blocks {[g for g, _ in twice]} twice "
                     f"(also in {[n for _, n in twice]})." if twice else ".")
            text += (" (vLLM's v0 block manager swapped a parent and its forks out and in together as one "
                     "sequence group, so a shared block went to one host block and came back as one.)")
        self.log.append(text)
        self.highlight = {g: "from host" for g in gpu}

    def _reset(self, _seq_id=None, _tenant=None) -> None:
        self.reset()

    #: action name -> handler ``(self, seq_id, tenant)``; :meth:`do` dispatches through it.
    _HANDLERS = {
        "append": _append, "fork": _fork, "write_shared": _write_shared, "finish": _finish,
        "new_same": _new_same, "new_other": _new_other, "swap_out": _swap_out, "swap_in": _swap_in,
        "reset": _reset,
    }
