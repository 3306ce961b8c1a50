"""A standalone block manager: refcounted blocks, copy-on-write, prefix caching and swap.

The simulation engine (:mod:`allocator.engine`) only needs to know *how many* blocks each
sequence holds. This module keeps the finer picture the "Block tables" page draws: which token
ids sit in which physical block, how many block tables point at each block (its refcount), which
full blocks can be found again by their hash, and which sequences wait in host memory.

Model
-----
* The GPU pool has ``num_blocks`` blocks of ``block_size`` slots (one token's K and V each).
  A sequence's *block table* maps logical block ``i`` (its tokens ``i*block_size`` to
  ``(i+1)*block_size - 1``) to a physical block id.
* A block's *refcount* is the number of block tables of running sequences that point at it.
  A fork (parallel sampling) shares every block of the parent; prefix caching shares full blocks
  of a common prompt prefix. Full blocks are never written again; only a sequence's last,
  partly filled block receives new tokens, so that is the only block copy-on-write ever copies.
* Prefix caching identifies a full block by a hash chained over everything before it:
  ``h_i = sha256(h_{i-1}, tokens of block i, extra keys of block i)``. Extra keys are *tagged*
  pairs such as ``("salt", "tenant-a")`` or ``("lora", "adapter-x")``, so a LoRA named like a
  salt string hashes differently. As in vLLM, the cache salt enters block 0 only (the chain
  carries it to every later block) and the LoRA name enters every block.
* Every block is in exactly one of three states: **free** (refcount 0, not cached),
  **cached** (refcount 0 but still findable by its hash) or **in use** (refcount >= 1, possibly
  also findable). Unreferenced blocks (free and cached) wait in one queue, least recently used
  at the front; a new block is taken from the front, and taking a cached block evicts its hash.
  Freed blocks join the back, a sequence's last block first, so a prompt's tail is evicted
  before its head. Invariant: ``free + cached + in use == num_blocks``.
* Preemption: :meth:`BlockManager.swap_out` copies a sequence's blocks to a host pool of
  ``num_host_blocks`` blocks and releases them on the GPU; :meth:`BlockManager.swap_in` copies
  them back into any free GPU blocks. :meth:`BlockManager.preempt_recompute` drops the blocks
  and hands back the token ids to prefill again later.

All ids are plain ints: token ids (>= 0) and block ids (0 .. num_blocks - 1, host blocks
0 .. num_host_blocks - 1). Sequence ids are ints or short strings.

Errors
------
Bad input raises ``ValueError`` whose message starts with the offending field: ``block_size``,
``num_blocks``, ``num_host_blocks``, ``seq_id``, ``parent_id``, ``child_id``, ``token_ids``,
``token_id``, ``cache_salt``, ``lora``, ``block_id``. A refused operation changes nothing.

Sources
-------
Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023: section 4.2 (block tables), 4.4 (parallel sampling: fork shares
blocks by refcount, copy-on-write at block granularity, shared prefix), 4.5 (preemption by swap
and by recompute, CPU block allocator). vLLM's automatic prefix caching design (docs, "Automatic
Prefix Caching" / "Prefix caching" design pages): chained block hash over parent hash, block
tokens and extra keys (LoRA id, multimodal hashes, cache salt in the first block), only full
blocks cached, free queue evicting the least recently used block. Seed 003
(``shared/seeds/003_49f236d33f1525f6.txt``), section 10.5 and challenges 3 and 4.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np

from .workload import _check_int

#: Tags accepted in extra keys. Every extra key is hashed as a (tag, value) pair.
EXTRA_KEY_TAGS = ("salt", "lora", "mm")

#: Copy-on-write orders accepted by :meth:`BlockManager.append_token` (the second is the bug
#: of seed 003's challenge 3, kept only so a test can show what it breaks).
COW_ORDERS = ("safe", "decrement_after_copy")

#: Block states reported by :meth:`BlockManager.block_state`.
BLOCK_FREE, BLOCK_CACHED, BLOCK_IN_USE = "free", "cached", "in use"


# --------------------------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------------------------

def _check_seq_id(name: str, value) -> int | str:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer, str)):
        raise ValueError(f"{name} must be an int or a string, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{name} must not be blank")
    return int(value) if isinstance(value, np.integer) else value


def _check_token(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer token id, got {value!r}")
    value = int(value)
    if value < 0:
        raise ValueError(f"{name} must be a token id >= 0, got {value}")
    return value


def _check_tokens(token_ids) -> list[int]:
    if token_ids is None or isinstance(token_ids, (str, bytes)):
        raise ValueError(f"token_ids must be a list of integer token ids, got {token_ids!r}")
    try:
        items = list(token_ids)
    except TypeError:
        raise ValueError(f"token_ids must be a list of integer token ids, got {token_ids!r}") from None
    if not items:
        raise ValueError("token_ids is empty: a sequence needs at least one token")
    return [_check_token(f"token_ids[{i}]", t) for i, t in enumerate(items)]


def _check_key(name: str, value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string or None, got {value!r}")
    return value or None


def extra_keys(block_index: int, cache_salt: str | None = None,
               lora: str | None = None) -> tuple[tuple[str, str], ...]:
    """The tagged extra keys hashed into logical block ``block_index`` of a sequence.

    ``("salt", cache_salt)`` goes into block 0 only (the chained hash carries it to every later
    block, as in vLLM); ``("lora", lora)`` goes into every block. Tags keep kinds apart: a LoRA
    called ``"tenant-a"`` never matches a salt ``"tenant-a"``.

    Returns:
        tuple of (tag, value) string pairs, possibly empty.

    Raises:
        ValueError: ``block_index`` below 0, or ``cache_salt`` / ``lora`` not a string or None.
    """
    block_index = _check_int("block_index", block_index, 0)
    cache_salt = _check_key("cache_salt", cache_salt)
    lora = _check_key("lora", lora)
    keys = []
    if cache_salt is not None and block_index == 0:
        keys.append(("salt", cache_salt))
    if lora is not None:
        keys.append(("lora", lora))
    return tuple(keys)


def block_hash(parent_hash: bytes | None, token_ids, extra: tuple = ()) -> bytes:
    """Stable hash of one block: sha256 over a canonical, tagged encoding (32 bytes).

    The encoding is the JSON text of ``["kv-block", parent hex or null, [token ids...],
    [[tag, value], ...]]`` with fixed separators, so it is the same in every process and Python
    version (unlike the built-in ``hash()``, which is salted per process for strings). Passing
    ``parent_hash=None`` for every block gives the *unchained* scheme ("hash a block's own tokens
    only") that seed 003's challenge 4 warns about.

    Args:
        parent_hash: the previous block's hash (32 bytes), or None for the first block.
        token_ids: the block's token ids, shape (block_size,), ints >= 0.
        extra: tagged extra keys, each a (tag, value) pair with tag in :data:`EXTRA_KEY_TAGS`
            and value a string or int (see :func:`extra_keys`).

    Returns:
        32 bytes.

    Raises:
        ValueError: a token id that is not an int >= 0 (``token_ids[i]``), an extra key that is
            not a (tag, value) pair with a known tag (``extra``), or a parent hash that is not
            bytes (``parent_hash``).

    Source: vLLM prefix caching design (hash of parent hash, block tokens and extra keys).
    """
    if parent_hash is not None and not isinstance(parent_hash, (bytes, bytearray)):
        raise ValueError(f"parent_hash must be bytes or None, got {parent_hash!r}")
    tokens = [_check_token(f"token_ids[{i}]", t) for i, t in enumerate(token_ids)]
    pairs = []
    for key in extra:
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] in EXTRA_KEY_TAGS
                and isinstance(key[1], (str, int)) and not isinstance(key[1], bool)):
            raise ValueError(f"extra must hold (tag, value) pairs with tag in {EXTRA_KEY_TAGS}, "
                             f"got {key!r}")
        pairs.append([key[0], key[1]])
    payload = ["kv-block", None if parent_hash is None else bytes(parent_hash).hex(), tokens, pairs]
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).digest()


def prompt_block_hashes(token_ids, block_size: int, *, cache_salt: str | None = None,
                        lora: str | None = None, chained: bool = True) -> list[bytes]:
    """Hashes of every *full* block of ``token_ids`` (a trailing partial block has none).

    Args:
        token_ids: shape (n,), ints >= 0.
        block_size: tokens per block (>= 1).
        cache_salt, lora: extra keys (see :func:`extra_keys`).
        chained: True chains each hash over the previous one (correct); False hashes each
            block's own tokens and extra keys only (the flawed scheme).

    Returns:
        list of floor(n / block_size) 32-byte hashes.

    Raises:
        ValueError naming ``token_ids``, ``block_size``, ``cache_salt`` or ``lora``.
    """
    block_size = _check_int("block_size", block_size, 1)
    tokens = [_check_token(f"token_ids[{i}]", t) for i, t in enumerate(token_ids)]
    hashes: list[bytes] = []
    parent = None
    for i in range(len(tokens) // block_size):
        h = block_hash(parent if chained else None, tokens[i * block_size:(i + 1) * block_size],
                       extra_keys(i, cache_salt, lora))
        hashes.append(h)
        parent = h
    return hashes


# --------------------------------------------------------------------------------------------
# The manager
# --------------------------------------------------------------------------------------------

@dataclass
class _Seq:
    token_ids: list[int]
    block_table: list[int]
    cache_salt: str | None
    lora: str | None
    host_table: list[int] = field(default_factory=list)
    swapped: bool = False


@dataclass(frozen=True)
class Allocation:
    """What :meth:`BlockManager.allocate` did.

    Attributes:
        num_cached_tokens: leading tokens served from cached blocks (a multiple of block_size).
        reused: logical block indices whose physical block came from the cache (with the
            unchained hash these need not be leading blocks).
        new_blocks: physical block ids taken from the free queue, in logical order.
        evicted: physical block ids whose cached hash was dropped to make room.
    """

    num_cached_tokens: int
    reused: tuple[int, ...]
    new_blocks: tuple[int, ...]
    evicted: tuple[int, ...]


@dataclass(frozen=True)
class AppendResult:
    """What :meth:`BlockManager.append_token` did.

    Attributes:
        block_id: the physical block the token was written into.
        slot: the token's position inside that block (0 .. block_size - 1).
        new_block: True if the token opened a fresh block (the last one was full).
        cow_from: the shared block copied first (copy-on-write), else None.
        evicted: the cached block evicted to supply a new block, else None.
    """

    block_id: int
    slot: int
    new_block: bool
    cow_from: int | None
    evicted: int | None


@dataclass(frozen=True)
class SlotCounts:
    """Tokens and slots of the running sequences (units: tokens / slots / blocks).

    ``logical_tokens``: tokens the running sequences hold between them, counting a shared
    token once per sequence. ``slots_unshared``: slots they would need with private blocks
    (sum of ceil(len / block_size) x block_size). ``physical_slots``: slots of the distinct
    blocks they point at (in-use blocks x block_size). ``blocks_in_use``, ``shared_blocks``
    (in-use blocks with refcount >= 2) and ``saved_slots`` = unshared - physical.
    """

    logical_tokens: int
    slots_unshared: int
    physical_slots: int
    blocks_in_use: int
    shared_blocks: int
    saved_slots: int


class BlockManager:
    """GPU block pool with refcounts, copy-on-write, prefix caching and a host swap pool.

    Args:
        num_blocks: GPU blocks in the pool (>= 1).
        block_size: slots (tokens) per block (1 .. 4096).
        num_host_blocks: host (CPU) blocks available to swapped-out sequences (>= 0).
        enable_prefix_caching: find full blocks again by their hash (True) or never (False).
        chain_hashes: True (correct) chains each block hash over every earlier token; False
            hashes a block's own tokens only and looks every block up independently, which
            shares a block whose K/V was computed after different earlier tokens (seed 003's
            challenge 4). :meth:`wrong_shares` lists those.
        free_order: optional permutation of range(num_blocks): the order the free queue starts
            in (default: ascending ids). The page passes a shuffled order so that physical
            order visibly differs from logical order.

    Raises:
        ValueError: naming ``num_blocks``, ``block_size``, ``num_host_blocks`` or ``free_order``.

    Source: PagedAttention (Kwon et al., SOSP 2023) sections 4.4-4.5; vLLM prefix caching design.
    """

    def __init__(self, num_blocks: int, block_size: int, num_host_blocks: int = 0, *,
                 enable_prefix_caching: bool = True, chain_hashes: bool = True,
                 free_order=None):
        self.num_blocks = _check_int("num_blocks", num_blocks, 1)
        self.block_size = _check_int("block_size", block_size, 1)
        if self.block_size > 4096:
            raise ValueError(f"block_size must be at most 4096, got {self.block_size}")
        self.num_host_blocks = _check_int("num_host_blocks", num_host_blocks, 0)
        self.enable_prefix_caching = bool(enable_prefix_caching)
        self.chain_hashes = bool(chain_hashes)
        order = list(range(self.num_blocks)) if free_order is None else list(free_order)
        if sorted(int(b) for b in order) != list(range(self.num_blocks)):
            raise ValueError(f"free_order must be a permutation of 0..{self.num_blocks - 1}")
        # Per GPU block.
        self._refcount = [0] * self.num_blocks
        self._contents: list[list[int]] = [[] for _ in range(self.num_blocks)]
        self._hash: list[bytes | None] = [None] * self.num_blocks        # lookup key if cached
        self._true_hash: list[bytes | None] = [None] * self.num_blocks   # chained identity of K/V
        # Unreferenced blocks (free or cached), least recently used first.
        self._free: OrderedDict[int, None] = OrderedDict((int(b), None) for b in order)
        self._cache: dict[bytes, int] = {}
        # Host pool.
        self._host_contents: list[list[int]] = [[] for _ in range(self.num_host_blocks)]
        self._host_free: deque[int] = deque(range(self.num_host_blocks))
        self._seqs: dict[int | str, _Seq] = {}
        # Counters.
        self.cow_copies = 0
        self.cache_hit_blocks = 0
        self.evictions = 0
        self.swapped_out_blocks = 0
        self.swapped_in_blocks = 0
        self.swap_preemptions = 0
        self.recompute_preemptions = 0

    # ---------------------------------------------------------------- queries

    def _seq(self, seq_id, name: str = "seq_id", running: bool = True) -> _Seq:
        seq_id = _check_seq_id(name, seq_id)
        seq = self._seqs.get(seq_id)
        if seq is None:
            raise ValueError(f"{name}: no sequence {seq_id!r} (known: {sorted(map(str, self._seqs))})")
        if running and seq.swapped:
            raise ValueError(f"{name}: sequence {seq_id!r} is swapped out to host memory; "
                             "swap it in first")
        return seq

    def _check_block(self, block_id) -> int:
        block_id = _check_int("block_id", block_id, 0)
        if block_id >= self.num_blocks:
            raise ValueError(f"block_id must be below num_blocks = {self.num_blocks}, got {block_id}")
        return block_id

    def sequences(self) -> list:
        """Ids of every known sequence (running and swapped), in the order they were added."""
        return list(self._seqs)

    def is_swapped(self, seq_id) -> bool:
        """True if the sequence currently lives in host memory. Raises ValueError (``seq_id``)."""
        return self._seq(seq_id, running=False).swapped

    def block_table(self, seq_id) -> list[int]:
        """Physical block ids of the sequence's logical blocks 0, 1, ... (empty while swapped).

        Raises:
            ValueError: unknown ``seq_id``.
        """
        return list(self._seq(seq_id, running=False).block_table)

    def host_table(self, seq_id) -> list[int]:
        """Host block ids holding a swapped-out sequence (empty while it runs on the GPU).

        Raises:
            ValueError: unknown ``seq_id``.
        """
        return list(self._seq(seq_id, running=False).host_table)

    def token_ids(self, seq_id) -> list[int]:
        """The sequence's token ids, shape (n,). Raises ValueError (``seq_id``) if unknown."""
        return list(self._seq(seq_id, running=False).token_ids)

    def refcount(self, block_id) -> int:
        """Block tables of running sequences that point at this GPU block (0 when unreferenced).

        Raises:
            ValueError: ``block_id`` outside 0 .. num_blocks - 1.
        """
        return self._refcount[self._check_block(block_id)]

    def block_tokens(self, block_id) -> list[int]:
        """Token ids written into a GPU block, shape (k,), k <= block_size (empty when free).

        A cached-but-unreferenced block keeps its tokens until it is reused.
        """
        return list(self._contents[self._check_block(block_id)])

    def host_block_tokens(self, host_block_id) -> list[int]:
        """Token ids held by a host block (empty when free). Raises ValueError (``block_id``)."""
        b = _check_int("block_id", host_block_id, 0)
        if b >= self.num_host_blocks:
            raise ValueError(f"block_id must be below num_host_blocks = {self.num_host_blocks}, got {b}")
        return list(self._host_contents[b])

    def block_hash_of(self, block_id) -> bytes | None:
        """The hash under which a GPU block can be found, or None if it is not cached."""
        return self._hash[self._check_block(block_id)]

    def block_state(self, block_id) -> str:
        """``"free"``, ``"cached"`` (unreferenced but findable) or ``"in use"`` (refcount >= 1)."""
        b = self._check_block(block_id)
        if self._refcount[b] > 0:
            return BLOCK_IN_USE
        return BLOCK_CACHED if self._hash[b] is not None else BLOCK_FREE

    def holders(self, block_id) -> list:
        """Running sequences whose block table points at this block (a sequence may repeat)."""
        b = self._check_block(block_id)
        return [sid for sid, s in self._seqs.items() for x in s.block_table if x == b]

    @property
    def num_free_blocks(self) -> int:
        """Unreferenced blocks holding no cached content (refcount 0, no hash)."""
        return sum(1 for b in self._free if self._hash[b] is None)

    @property
    def num_cached_free_blocks(self) -> int:
        """Unreferenced blocks that are still findable by hash (cached-but-unreferenced)."""
        return sum(1 for b in self._free if self._hash[b] is not None)

    @property
    def num_in_use_blocks(self) -> int:
        """Blocks with refcount >= 1."""
        return sum(1 for rc in self._refcount if rc > 0)

    @property
    def num_available_blocks(self) -> int:
        """Blocks a new allocation can take: free + cached-but-unreferenced."""
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        """Blocks findable by hash, referenced or not."""
        return len(self._cache)

    @property
    def num_host_free_blocks(self) -> int:
        """Host blocks not holding a swapped-out block."""
        return len(self._host_free)

    def free_queue(self) -> list[int]:
        """Unreferenced block ids in eviction order (least recently used first)."""
        return list(self._free)

    def slot_counts(self) -> SlotCounts:
        """Logical tokens, slots without sharing and distinct physical slots of running sequences.

        Agrees with :func:`allocator.accounting.prefix_sharing` when two sequences share a
        prefix: lengths 20 and 23 with an 8-token common prefix at block size 4 give 43 logical
        tokens, 44 slots unshared and 36 physical slots (seed 001).
        """
        bs = self.block_size
        running = [s for s in self._seqs.values() if not s.swapped]
        logical = sum(len(s.token_ids) for s in running)
        unshared = sum(-(-len(s.token_ids) // bs) * bs for s in running)
        in_use = self.num_in_use_blocks
        shared = sum(1 for rc in self._refcount if rc >= 2)
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
            ValueError naming ``token_ids``, ``cache_salt`` or ``lora``.
        """
        tokens = _check_tokens(token_ids)
        hits = self._lookup(tokens, _check_key("cache_salt", cache_salt), _check_key("lora", lora))
        leading = 0
        while leading < len(hits) and hits[leading] is not None:
            leading += 1
        return leading * self.block_size

    def _lookup(self, tokens: list[int], salt, lora) -> list[int | None]:
        """Per full block: the cached block that would serve it, or None."""
        if not self.enable_prefix_caching:
            return [None] * (len(tokens) // self.block_size)
        hashes = prompt_block_hashes(tokens, self.block_size, cache_salt=salt, lora=lora,
                                     chained=self.chain_hashes)
        hits: list[int | None] = []
        for h in hashes:
            b = self._cache.get(h)
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

    # ---------------------------------------------------------------- internals

    def _take_block(self) -> tuple[int, int | None]:
        """Pop the least recently used unreferenced block; evict its hash. Returns (block, evicted)."""
        b, _ = self._free.popitem(last=False)
        evicted = None
        if self._hash[b] is not None:
            if self._cache.get(self._hash[b]) == b:
                del self._cache[self._hash[b]]
            self._hash[b] = None
            self.evictions += 1
            evicted = b
        self._contents[b] = []
        self._true_hash[b] = None
        self._refcount[b] = 1
        return b, evicted

    def _release(self, blocks) -> None:
        """Drop one reference to each block, last block first; unreferenced ones join the queue."""
        for b in reversed(blocks):
            self._refcount[b] -= 1
            if self._refcount[b] == 0:
                self._free[b] = None
                self._free.move_to_end(b)
                if self._hash[b] is None:
                    self._contents[b] = []
                    self._true_hash[b] = None

    def _seal(self, seq: _Seq, index: int) -> None:
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
        if key not in self._cache and self._hash[b] is None:
            self._cache[key] = b
            self._hash[b] = key

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
            ValueError: ``seq_id`` already exists; bad ``token_ids`` / ``cache_salt`` / ``lora``;
                ``num_blocks`` when the pool cannot supply ceil(n / block_size) blocks
                (nothing is allocated then).
        """
        seq_id = _check_seq_id("seq_id", seq_id)
        if seq_id in self._seqs:
            raise ValueError(f"seq_id: sequence {seq_id!r} already exists")
        tokens = _check_tokens(token_ids)
        salt = _check_key("cache_salt", cache_salt)
        lora = _check_key("lora", lora)
        bs = self.block_size
        n_blocks = -(-len(tokens) // bs)
        hits = self._lookup(tokens, salt, lora)
        hits += [None] * (n_blocks - len(hits))
        hit_blocks = [b for b in hits if b is not None]
        idle_hits = len({b for b in hit_blocks if self._refcount[b] == 0})
        need_new = n_blocks - len(hit_blocks)
        if need_new + idle_hits > len(self._free):
            raise ValueError(
                f"num_blocks: out of blocks: {len(tokens)} tokens need {need_new} new blocks "
                f"(+{len(hit_blocks)} from cache) but only {len(self._free) - idle_hits} of "
                f"{self.num_blocks} can be taken")
        # Claim the cache hits first so that taking new blocks cannot evict them.
        for b in hit_blocks:
            if self._refcount[b] == 0:
                del self._free[b]
            self._refcount[b] += 1
        self.cache_hit_blocks += len(hit_blocks)
        table, new, evicted = [], [], []
        for i in range(n_blocks):
            if hits[i] is not None:
                table.append(hits[i])
                continue
            b, ev = self._take_block()
            self._contents[b] = tokens[i * bs:(i + 1) * bs]
            table.append(b)
            new.append(b)
            if ev is not None:
                evicted.append(ev)
        seq = _Seq(token_ids=tokens, block_table=table, cache_salt=salt, lora=lora)
        self._seqs[seq_id] = seq
        for i in range(len(tokens) // bs):
            if hits[i] is None:
                self._seal(seq, i)
        leading = 0
        while leading < n_blocks and hits[leading] is not None:
            leading += 1
        leading = min(leading * bs, len(tokens))
        return Allocation(num_cached_tokens=leading,
                          reused=tuple(i for i, b in enumerate(hits) if b is not None),
                          new_blocks=tuple(new), evicted=tuple(evicted))

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

        ``cow_order="decrement_after_copy"`` re-points the table first and decrements the
        refcount of whatever the table names afterwards, which is now the copy. The original
        keeps a refcount that never reaches zero (leaked) and the copy drops to 0 while in use.
        It exists only so a test can show that bug (seed 003, challenge 3).

        Args:
            seq_id: a running sequence.
            token_id: the new token's id (int >= 0).
            cow_order: ``"safe"`` (default) or ``"decrement_after_copy"``.

        Returns:
            :class:`AppendResult`.

        Raises:
            ValueError: unknown or swapped ``seq_id``, bad ``token_id`` or ``cow_order``,
                ``num_blocks`` when a new block or a copy is needed and none is free.
        """
        seq = self._seq(seq_id)
        token = _check_token("token_id", token_id)
        if cow_order not in COW_ORDERS:
            raise ValueError(f"cow_order must be one of {COW_ORDERS}, got {cow_order!r}")
        bs = self.block_size
        n = len(seq.token_ids)
        if n % bs == 0:
            if not self._free:
                raise ValueError(f"num_blocks: out of blocks: sequence {seq_id!r} needs a new "
                                 f"block for token {n} and none of {self.num_blocks} is free")
            b, evicted = self._take_block()
            seq.block_table.append(b)
            cow_from, new_block = None, True
        else:
            index = len(seq.block_table) - 1
            b = seq.block_table[index]
            cow_from, evicted, new_block = None, None, False
            if self._refcount[b] > 1:
                if not self._free:
                    raise ValueError(f"num_blocks: out of blocks: sequence {seq_id!r} must copy "
                                     f"shared block {b} before writing and no block is free")
                if cow_order == "safe":
                    self._refcount[b] -= 1                 # 2. drop our reference first
                    copy, evicted = self._take_block()     # 3. new block + copy
                    self._contents[copy] = list(self._contents[b])
                    seq.block_table[index] = copy          # 4. re-point
                else:
                    copy, evicted = self._take_block()
                    self._contents[copy] = list(self._contents[b])
                    seq.block_table[index] = copy
                    self._refcount[seq.block_table[index]] -= 1   # the bug: hits the copy
                cow_from, b = b, copy
                self.cow_copies += 1
        self._contents[b].append(token)
        seq.token_ids.append(token)
        if len(seq.token_ids) % bs == 0:
            self._seal(seq, len(seq.block_table) - 1)
        return AppendResult(block_id=b, slot=len(self._contents[b]) - 1, new_block=new_block,
                            cow_from=cow_from, evicted=evicted)

    def fork(self, parent_id, child_id) -> list[int]:
        """Start ``child_id`` as a copy of a running parent that shares every one of its blocks.

        Each block's refcount rises by one; nothing is copied until one of them writes into the
        shared last block (copy-on-write). Used for parallel sampling and beam search
        (PagedAttention section 4.4).

        Returns:
            the child's block table (the parent's block ids).

        Raises:
            ValueError: unknown or swapped ``parent_id``; ``child_id`` already exists or invalid.
        """
        parent = self._seq(parent_id, "parent_id")
        child_id = _check_seq_id("child_id", child_id)
        if child_id in self._seqs:
            raise ValueError(f"child_id: sequence {child_id!r} already exists")
        for b in parent.block_table:
            self._refcount[b] += 1
        self._seqs[child_id] = _Seq(token_ids=list(parent.token_ids),
                                    block_table=list(parent.block_table),
                                    cache_salt=parent.cache_salt, lora=parent.lora)
        return list(parent.block_table)

    def free(self, seq_id) -> None:
        """Finish a sequence: drop its references (and host blocks, if swapped out).

        Blocks whose refcount reaches 0 join the back of the free queue, last block first. A
        full block that was cached stays findable by its hash until the queue hands it out.

        Raises:
            ValueError: unknown ``seq_id``.
        """
        seq = self._seq(seq_id, running=False)
        if seq.swapped:
            for h in seq.host_table:
                self._host_contents[h] = []
                self._host_free.append(h)
        else:
            self._release(seq.block_table)
        del self._seqs[_check_seq_id("seq_id", seq_id)]

    def preempt_recompute(self, seq_id) -> list[int]:
        """Preempt by recomputation: free the sequence's blocks and return its token ids.

        The caller re-admits the sequence later with :meth:`allocate` (its full blocks may still
        be found in the cache then). PagedAttention section 4.5.

        Raises:
            ValueError: unknown or swapped ``seq_id``.
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
            ValueError: unknown or already swapped ``seq_id``; ``num_host_blocks`` when the host
                pool has fewer free blocks than the sequence holds (nothing moves then).
        """
        seq = self._seq(seq_id)
        need = len(seq.block_table)
        if need > len(self._host_free):
            raise ValueError(f"num_host_blocks: host pool is full: sequence {seq_id!r} needs "
                             f"{need} host blocks but only {len(self._host_free)} of "
                             f"{self.num_host_blocks} are free")
        mapping = []
        for b in seq.block_table:
            h = self._host_free.popleft()
            self._host_contents[h] = list(self._contents[b])
            mapping.append((b, h))
        self._release(seq.block_table)
        seq.host_table = [h for _, h in mapping]
        seq.block_table = []
        seq.swapped = True
        self.swapped_out_blocks += need
        self.swap_preemptions += 1
        return mapping

    def swap_in(self, seq_id) -> list[tuple[int, int]]:
        """Bring a swapped-out sequence back into any free GPU blocks before it resumes.

        Returns:
            (host_block, gpu_block) pairs, in logical order.

        Raises:
            ValueError: unknown ``seq_id`` or one that is not swapped out; ``num_blocks`` when
                too few GPU blocks can be taken (nothing moves then).
        """
        seq = self._seq(seq_id, running=False)
        if not seq.swapped:
            raise ValueError(f"seq_id: sequence {seq_id!r} is not swapped out")
        need = len(seq.host_table)
        if need > len(self._free):
            raise ValueError(f"num_blocks: out of blocks: sequence {seq_id!r} needs {need} GPU "
                             f"blocks to swap in but only {len(self._free)} can be taken")
        mapping = []
        for h in seq.host_table:
            b, _ = self._take_block()
            self._contents[b] = self._host_contents[h]
            self._host_contents[h] = []
            self._host_free.append(h)
            seq.block_table.append(b)
            mapping.append((h, b))
        seq.host_table = []
        seq.swapped = False
        for i in range(len(seq.token_ids) // self.block_size):
            self._seal(seq, i)
        self.swapped_in_blocks += need
        return mapping

    # ---------------------------------------------------------------- checks

    def check_invariants(self) -> None:
        """Assert the bookkeeping is consistent.

        Checks: every refcount equals the number of running block tables pointing at the block;
        free + cached-but-unreferenced + in use == num_blocks, with the queue holding exactly the
        unreferenced blocks once each; every cached hash points back at its block; each running
        sequence's blocks hold its tokens in order (ceil(n / block_size) of them); host blocks
        in use + free == num_host_blocks.

        Raises:
            AssertionError naming the first inconsistency.
        """
        pointing = [0] * self.num_blocks
        for sid, s in self._seqs.items():
            if s.swapped:
                assert not s.block_table, f"swapped sequence {sid!r} still has GPU blocks"
                continue
            for b in s.block_table:
                pointing[b] += 1
        for b in range(self.num_blocks):
            assert self._refcount[b] == pointing[b], (
                f"block {b}: refcount {self._refcount[b]} but {pointing[b]} block tables point at it")
        queued = list(self._free)
        assert len(set(queued)) == len(queued), "a block is queued twice"
        unreferenced = {b for b in range(self.num_blocks) if self._refcount[b] == 0}
        assert set(queued) == unreferenced, "the free queue does not hold exactly the unreferenced blocks"
        total = self.num_free_blocks + self.num_cached_free_blocks + self.num_in_use_blocks
        assert total == self.num_blocks, (
            f"free {self.num_free_blocks} + cached {self.num_cached_free_blocks} + in use "
            f"{self.num_in_use_blocks} = {total} != {self.num_blocks} blocks")
        for h, b in self._cache.items():
            assert self._hash[b] == h, f"cache entry for block {b} does not match its hash"
            assert len(self._contents[b]) == self.block_size, f"cached block {b} is not full"
        assert sum(1 for h in self._hash if h is not None) == len(self._cache), "stray block hash"
        bs = self.block_size
        used_host = 0
        for sid, s in self._seqs.items():
            table = s.host_table if s.swapped else s.block_table
            contents = self._host_contents if s.swapped else self._contents
            used_host += len(s.host_table)
            assert len(table) == -(-len(s.token_ids) // bs), (
                f"sequence {sid!r}: {len(table)} blocks for {len(s.token_ids)} tokens")
            for i, b in enumerate(table):
                want = s.token_ids[i * bs:(i + 1) * bs]
                assert contents[b] == want, f"sequence {sid!r}: block {b} does not hold tokens of block {i}"
        assert used_host + len(self._host_free) == self.num_host_blocks, "host blocks lost"
