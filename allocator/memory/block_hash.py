"""Block hashes for prefix caching: a full block is found again by a hash chained over every
token before it, plus tagged extra keys (a tenant's cache salt, a LoRA adapter's name).

``h_i = sha256(h_{i-1}, tokens of block i, extra keys of block i)``. Chaining is what makes a
match safe: a block's K and V depend on every earlier token (attention mixes them in, and
positions differ), so two blocks with the same words after different earlier words must not
be shared. Hashing a block's own tokens only (``chained=False``) is the flawed scheme
(assets/reference_figures.md R8: it would hand one request another's K/V), kept so the Block
tables page can show what goes wrong.

Sources: vLLM's automatic prefix caching design (hash of the parent block's hash, the block's
tokens and extra keys such as the LoRA id and a per-request cache salt in the first block; only
full blocks are hashed; vllm/v1/core/kv_cache_utils.py, ``hash_block_tokens``); the chaining
rule, assets/reference_figures.md R8.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.hashing import GOLDEN, splitmix64
from allocator.common.validate import whole_number

#: Tags accepted in extra keys. Every extra key is hashed as a (tag, value) pair.
EXTRA_KEY_TAGS = ("salt", "lora", "mm")


def check_token(field: str, value) -> int:
    """Return a token id (an int >= 0). Raises FieldError naming ``field``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FieldError(field, f" must be an integer token id, got {value!r}")
    value = int(value)
    if value < 0:
        raise FieldError(field, f" must be a token id >= 0, got {value}")
    return value


def check_tokens(token_ids) -> list[int]:
    """Return a non-empty list of token ids, shape (n,), n >= 1.

    Raises:
        FieldError: field ``token_ids`` (index set for a bad entry).
    """
    if token_ids is None or isinstance(token_ids, (str, bytes)):
        raise FieldError("token_ids", f" must be a list of integer token ids, got {token_ids!r}")
    try:
        items = list(token_ids)
    except TypeError:
        raise FieldError("token_ids", f" must be a list of integer token ids, got {token_ids!r}") from None
    if not items:
        raise FieldError("token_ids", " is empty: a sequence needs at least one token")
    return [_token_at(i, t) for i, t in enumerate(items)]


def _token_at(i: int, value) -> int:
    try:
        return check_token(f"token_ids[{i}]", value)
    except FieldError as exc:
        raise FieldError("token_ids", exc.problem, index=i) from None


def check_key(field: str, value) -> str | None:
    """An optional extra key (salt, LoRA name): a string, or None (an empty string means None).

    Raises:
        FieldError: naming ``field`` when the value is not a string or None.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(field, f" must be a string or None, got {value!r}")
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
        FieldError: ``block_index`` below 0, or ``cache_salt`` / ``lora`` not a string or None.
    """
    block_index = whole_number("block_index", block_index, 0)
    cache_salt = check_key("cache_salt", cache_salt)
    lora = check_key("lora", lora)
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
    only") that assets/reference_figures.md R8 warns about.

    Args:
        parent_hash: the previous block's hash (32 bytes), or None for the first block.
        token_ids: the block's token ids, shape (block_size,), ints >= 0.
        extra: tagged extra keys, each a (tag, value) pair with tag in :data:`EXTRA_KEY_TAGS`
            and value a string or int (see :func:`extra_keys`).

    Returns:
        32 bytes.

    Raises:
        FieldError: a token id that is not an int >= 0 (``token_ids``, with its index), an extra
            key that is not a (tag, value) pair with a known tag (``extra``), or a parent hash
            that is not bytes (``parent_hash``).

    Source: vLLM prefix caching design (hash of parent hash, block tokens and extra keys).
    """
    if parent_hash is not None and not isinstance(parent_hash, (bytes, bytearray)):
        raise FieldError("parent_hash", f" must be bytes or None, got {parent_hash!r}")
    tokens = [_token_at(i, t) for i, t in enumerate(token_ids)]
    pairs = []
    for key in extra:
        if not (isinstance(key, tuple) and len(key) == 2 and key[0] in EXTRA_KEY_TAGS
                and isinstance(key[1], (str, int)) and not isinstance(key[1], bool)):
            raise FieldError("extra", f" must hold (tag, value) pairs with tag in {EXTRA_KEY_TAGS}, got {key!r}")
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
        FieldError naming ``token_ids``, ``block_size``, ``cache_salt`` or ``lora``.
    """
    block_size = whole_number("block_size", block_size, 1)
    tokens = [_token_at(i, t) for i, t in enumerate(token_ids)]
    hashes: list[bytes] = []
    parent = None
    for i in range(len(tokens) // block_size):
        h = block_hash(parent if chained else None, tokens[i * block_size:(i + 1) * block_size],
                       extra_keys(i, cache_salt, lora))
        hashes.append(h)
        parent = h
    return hashes




#: Seeds of the two 64-bit lanes of :func:`prefix_block_keys`.
_LANES = (np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344))


def prefix_block_keys(token_ids, block_size: int, *, as_bytes: bool = False) -> list:
    """Keys of every *full* block of a prompt, each covering the block and every token before it.

    The engine's fast equivalent of :func:`prompt_block_hashes` for long prompts (a 12k-token
    prompt at block size 16 has 750 blocks; sha256 over JSON is far too slow for thousands of
    them). Key i is a 128-bit value computed from tokens 0 .. (i + 1) x block_size - 1: each
    token is mixed with its position (SplitMix64), the mixed values are summed modulo 2**64 in
    two independent lanes, and key i is the pair of running sums at the end of block i. So, as
    with a chained hash, two blocks get the same key only if they *and everything before them*
    hold the same tokens (up to a 2**-128-scale accident), and only full blocks have keys.

    Args:
        token_ids: int array-like, shape (n,), values >= 0.
        block_size: tokens per block (>= 1).
        as_bytes: give each key as 16 bytes (``key.to_bytes(16, "big")``: the same keys, equal
            exactly when the ints are, but far cheaper to make; the paged allocator's block-hash
            map uses these).

    Returns:
        floor(n / block_size) Python ints (< 2**128), or 16-byte strings, in block order.

    Raises:
        FieldError: ``block_size`` not a whole number >= 1, or a negative token id (``token_ids``).
    """
    block_size = whole_number("block_size", block_size, 1)
    tokens = np.asarray(token_ids)
    if tokens.size and int(tokens.min()) < 0:
        raise FieldError("token_ids", " must hold token ids >= 0")
    full = (tokens.size // block_size) * block_size
    if full == 0:
        return []
    t = splitmix64(tokens[:full].astype(np.uint64))
    ends = np.arange(block_size - 1, full, block_size)
    lanes = []
    with np.errstate(over="ignore"):
        for lane in range(len(_LANES)):
            mixed = splitmix64(t ^ _position_mix(lane, full))
            lanes.append(np.cumsum(mixed, dtype=np.uint64)[ends])
    if as_bytes:                               # lane 0 then lane 1, big-endian: (a << 64 | b).to_bytes(16)
        pairs = np.empty((len(ends), 2), dtype=">u8")
        pairs[:, 0], pairs[:, 1] = lanes
        return pairs.view("V16").ravel().tolist()
    return [(a << 64) | b for a, b in zip(lanes[0].tolist(), lanes[1].tolist())]


#: splitmix64(position x golden + lane seed) for positions 0 .. len - 1, per lane: the same for every
#: prompt, so computed once (grown by doubling) instead of once per prompt.
_POS_MIX: list = [np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.uint64)]


def _position_mix(lane: int, stop: int) -> np.ndarray:
    """splitmix64(p x golden + seed of ``lane``) for p in 0 .. stop - 1 (uint64, read-only)."""
    table = _POS_MIX[lane]
    if len(table) < stop:
        size = max(stop, 2 * len(table), 1 << 16)
        with np.errstate(over="ignore"):
            table = splitmix64(np.arange(size, dtype=np.uint64) * GOLDEN + _LANES[lane])
        table.flags.writeable = False
        _POS_MIX[lane] = table
    return table[:stop]
