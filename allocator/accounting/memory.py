"""The lesson's arithmetic: slot counts, page-size cost, prefix sharing, bytes and capacity.

Everything here is closed-form arithmetic (no simulation), pure Python plus numpy, and never
imports streamlit. The Accounting and Capacity pages and the ``account`` / ``capacity``
sub-commands of ``python -m allocator`` all call these functions, so they print the same figures.

Units
-----
* **tokens**: positions a request has actually written (its length).
* **slots**: room for one token's K and V across all layers; what an allocator hands out.
* **blocks (pages)**: groups of ``page_size`` consecutive slots (``block_size`` is the same thing).
* **bytes**: memory. Every multiple is *binary*: ``KiB = 2**10``, ``MiB = 2**20``, ``GiB = 2**30``
  bytes. The seed texts write "KB", "MB", "GB" for these same binary quantities (for example
  "512 KB per token" is 524,288 bytes = 512 KiB, and the PagedAttention paper's "800 KB" for
  OPT-13B is 819,200 bytes = 800 KiB). Nothing in this module uses decimal kB/MB/GB.

Errors
------
Bad input raises ``ValueError`` whose message starts with the offending field's name
(``lengths[2]``, ``page_size``, ``reserve``, ...), so a page can show it next to the control.

Sources
-------
seed 001 = ``shared/seeds/001_b60e659497b44204.txt`` (5/9/17 tokens, page cost, prefix sharing),
seed 002 = ``shared/seeds/002_abdc40c8c116312c.txt`` (512, 37, 1900, 128, 4 with maximum 2048),
seed 003 = ``shared/seeds/003_49f236d33f1525f6.txt`` (7B fp16, 66 GiB free, mean 350 tokens),
seed 000 = ``shared/seeds/000_b2d5125a0ea162ff.txt`` (Llama 3 70B: 320 KiB per slot),
and Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (OPT-13B: 800 KB per token).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field

import numpy as np

#: Binary byte multiples. The app never uses decimal kB/MB/GB.
KIB = 1024
MIB = 1024 ** 2
GIB = 1024 ** 3

#: Candidate page sizes (slots per block) tried by :func:`best_page_size`: powers of two 1..256.
DEFAULT_CANDIDATES: tuple[int, ...] = tuple(2 ** k for k in range(9))

#: The candidate sizes seed 001 tests: powers of two 1..32.
SEED_001_CANDIDATES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)

#: Starting inputs of the Accounting page and the ``account`` command (seed 001's example;
#: ``pool_slots`` is seed 002's pool; ``share`` = (length_a, length_b, prefix_tokens, page_size)).
#: ``candidates`` is seed 001's tested range 1..32 (the functions' own default is 1..256).
ACCOUNT_DEFAULTS: dict = {"lengths": (5, 9, 17), "reserve": 32, "page_size": 4,
                          "metadata_cost": 1.0, "candidates": SEED_001_CANDIDATES,
                          "pool_slots": 40960, "share": (20, 23, 8, 4)}

#: Seed 002's five requests (tokens) with a 2048-slot maximum, shown at page size 16 with
#: candidate page sizes 1..256.
SEED_002_PRESET: dict = {"lengths": (512, 37, 1900, 128, 4), "reserve": 2048, "page_size": 16,
                         "candidates": DEFAULT_CANDIDATES}

#: Starting inputs of the Capacity page and the ``capacity`` command (seed 003).
CAPACITY_DEFAULTS: dict = {"model": "7b-fp16", "free_gib": 66.0, "max_context": 2048,
                           "mean_tokens": 350.0, "block_size": 16}


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------

def _whole_number(value: object, name: str, minimum: int) -> int:
    """Return ``value`` as an int if it is a whole number >= ``minimum``; else raise ValueError.

    Accepts Python/numpy integers and integral floats (``5.0``, as a table editor may return);
    rejects booleans, None/NaN, non-integral numbers and anything non-numeric.
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} is empty: enter a whole number (at least {minimum})")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if math.isnan(as_float):
            raise ValueError(f"{name} is empty: enter a whole number (at least {minimum})")
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise ValueError(f"{name} = {value!r} is not a whole number")
        result = int(as_float)
    else:
        raise ValueError(f"{name} = {value!r} is not a number")
    if result < minimum:
        raise ValueError(f"{name} = {result} must be at least {minimum}")
    return result


def _non_negative_real(value: object, name: str) -> float:
    """Return ``value`` as a float if it is a finite number >= 0; else raise ValueError."""
    if value is None or isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} = {value!r} is not a number")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"{name} = {value!r} is not a finite number")
    if as_float < 0:
        raise ValueError(f"{name} = {value!r} must not be negative")
    return as_float


def check_whole_number(value: object, name: str, minimum: int = 1) -> int:
    """Return ``value`` as an int if it is a whole number >= ``minimum`` (units: the caller's).

    Integral floats such as ``5.0`` are accepted (table editors return them).

    Raises
    ------
    ValueError whose message starts with ``name``: ``"<name> is empty ..."``,
    ``"<name> = 2.5 is not a whole number"`` or ``"<name> = -3 must be at least 1"``.
    """
    return _whole_number(value, name, minimum)


def error_field(exc: BaseException) -> str:
    """The field a ValueError from this module names (the word its message starts with).

    ``error_field(ValueError("lengths[2] = -1 must be at least 1"))`` is ``"lengths"``;
    pages use it to show the message next to the control that holds that field.
    """
    text = str(exc)
    head = text.split(" ", 1)[0]
    return head.split("[", 1)[0]


def validate_lengths(lengths: object, name: str = "lengths") -> list[int]:
    """Check a list of request lengths and return it as ``list[int]``.

    Parameters
    ----------
    lengths : sequence of whole numbers, shape (n,), n >= 1, each >= 1 (tokens)
    name : the field name used in error messages.

    Raises
    ------
    ValueError
        ``"lengths is empty ..."`` for no requests; ``"lengths[i] ..."`` for a missing,
        negative, zero or non-integer entry.
    """
    if lengths is None or isinstance(lengths, (str, bytes)):
        raise ValueError(f"{name} must be a list of whole numbers of tokens")
    items = list(lengths)  # type: ignore[call-overload]
    if not items:
        raise ValueError(f"{name} is empty: give at least one request length (tokens)")
    return [_whole_number(v, f"{name}[{i}]", 1) for i, v in enumerate(items)]


def parse_lengths(text: str, name: str = "lengths") -> list[int]:
    """Parse comma-separated request lengths such as ``"5,9,17"`` into ``[5, 9, 17]`` (tokens).

    Raises
    ------
    ValueError naming ``name`` (and the entry's index) for an empty list, a blank entry or an
    entry that is not a whole number >= 1.
    """
    parts = [p.strip() for p in str(text).split(",")]
    if parts == [""]:
        raise ValueError(f"{name} is empty: give at least one request length (tokens)")
    values: list[object] = []
    for i, part in enumerate(parts):
        if part == "":
            raise ValueError(f"{name}[{i}] is empty: enter a whole number (at least 1)")
        try:
            values.append(int(part))
        except ValueError:
            try:
                values.append(float(part))
            except ValueError:
                raise ValueError(f"{name}[{i}] = {part!r} is not a number") from None
    return validate_lengths(values, name)


def validate_candidates(candidates: object) -> list[int]:
    """Check candidate page sizes (slots per block): non-empty, whole numbers >= 1; sorted, unique.

    Raises
    ------
    ValueError naming ``candidates`` (or ``candidates[i]``).
    """
    if candidates is None or isinstance(candidates, (str, bytes)):
        raise ValueError("candidates must be a list of page sizes (slots per block)")
    items = list(candidates)  # type: ignore[call-overload]
    if not items:
        raise ValueError("candidates is empty: give at least one page size (slots per block)")
    return sorted({_whole_number(v, f"candidates[{i}]", 1) for i, v in enumerate(items)})


def blocks_for(length: int, page_size: int) -> int:
    """Blocks needed to hold ``length`` tokens: ``ceil(length / page_size)`` (seed 001, seed 002).

    Raises
    ------
    ValueError naming ``page_size`` if it is not a whole number >= 1, or ``length`` if negative.
    """
    page_size = _whole_number(page_size, "page_size", 1)
    length = _whole_number(length, "length", 0)
    return -(-length // page_size)


# --------------------------------------------------------------------------------------------
# Slots: reserve-max versus paging (seed 001, seed 002)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ReserveTally:
    """Slots under reserve-max: every request holds ``reserve`` slots however long it is.

    Attributes (all in slots/tokens; lists have shape (n,), one entry per request):
    ``lengths`` tokens written, ``reserve`` slots per request, ``allocated_slots`` = n x reserve,
    ``used_tokens`` = sum(lengths), ``unused_slots`` = allocated - used,
    ``waste_fraction`` = unused / allocated (0..1), ``unused_per_request``.
    """

    lengths: list[int]
    reserve: int
    allocated_slots: int
    used_tokens: int
    unused_slots: int
    waste_fraction: float
    unused_per_request: list[int]

    def to_dict(self) -> dict:
        """Plain-JSON form (numbers and lists only)."""
        return asdict(self)


def reserve_max_slots(lengths: object, reserve: object) -> ReserveTally:
    """Slots allocated when every request reserves ``reserve`` slots (its maximum) up front.

    Formula (seed 001; seed 002): allocated = n x reserve; unused = allocated - sum(lengths);
    waste = 1 - sum(lengths) / allocated. Seed 001: 5, 9, 17 with reserve 32 -> 96 allocated,
    65 unused. Seed 002: 512, 37, 1900, 128, 4 with 2048 -> 10,240 allocated, 74.8 % waste.

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1, tokens per request.
    reserve : whole number >= 1, slots reserved per request (the maximum length).

    Raises
    ------
    ValueError naming ``lengths[i]`` or ``reserve`` for bad values, or ``lengths[i]`` when a
    request is longer than ``reserve`` (it could never have been admitted).
    """
    lengths = validate_lengths(lengths)
    reserve = _whole_number(reserve, "reserve", 1)
    for i, n in enumerate(lengths):
        if n > reserve:
            raise ValueError(f"lengths[{i}] = {n} is above the reserve maximum ({reserve} slots): "
                             "raise reserve or shorten the request")
    allocated = len(lengths) * reserve
    used = sum(lengths)
    return ReserveTally(lengths=lengths, reserve=reserve, allocated_slots=allocated,
                        used_tokens=used, unused_slots=allocated - used,
                        waste_fraction=(allocated - used) / allocated,
                        unused_per_request=[reserve - n for n in lengths])


@dataclass(frozen=True)
class PagedTally:
    """Slots under paging with ``page_size`` slots per block.

    Attributes (slots/tokens/blocks; lists have shape (n,)): ``lengths``, ``page_size``,
    ``blocks_per_request`` = ceil(length / page_size), ``allocated_per_request`` =
    blocks x page_size, ``unused_per_request`` (the last block's empty tail, < page_size),
    ``blocks`` total, ``allocated_slots`` total, ``used_tokens``, ``unused_slots``,
    ``waste_fraction`` = unused / allocated (0..1).
    """

    lengths: list[int]
    page_size: int
    blocks_per_request: list[int]
    allocated_per_request: list[int]
    unused_per_request: list[int]
    blocks: int
    allocated_slots: int
    used_tokens: int
    unused_slots: int
    waste_fraction: float

    def to_dict(self) -> dict:
        """Plain-JSON form (numbers and lists only)."""
        return asdict(self)


def paged_slots(lengths: object, page_size: object) -> PagedTally:
    """Slots allocated when each request gets whole blocks of ``page_size`` slots.

    Formula (seed 001: "ceiling(length/page_size) x page_size per request"; seed 002's
    pagesFor): allocated_i = ceil(length_i / page_size) x page_size. Seed 001: 5, 9, 17 at
    page sizes 4 / 8 / 16 -> 40 / 48 / 64 slots, 9 / 17 / 33 unused. Seed 002: 512, 37, 1900,
    128, 4 at 16 -> 2,608 slots, 1.0 % waste.

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1 (tokens).
    page_size : whole number >= 1 (slots per block).

    Raises
    ------
    ValueError naming ``lengths[i]`` or ``page_size``.
    """
    lengths = validate_lengths(lengths)
    page_size = _whole_number(page_size, "page_size", 1)
    blocks = [-(-n // page_size) for n in lengths]
    alloc = [b * page_size for b in blocks]
    used = sum(lengths)
    total = sum(alloc)
    return PagedTally(lengths=lengths, page_size=page_size, blocks_per_request=blocks,
                      allocated_per_request=alloc,
                      unused_per_request=[a - n for a, n in zip(alloc, lengths)],
                      blocks=sum(blocks), allocated_slots=total, used_tokens=used,
                      unused_slots=total - used, waste_fraction=(total - used) / total)


# --------------------------------------------------------------------------------------------
# Page size with a per-block metadata cost (seed 001)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PageSizeRow:
    """One candidate page size: ``page_size`` (slots per block), ``allocated_slots``,
    ``unused_slots``, ``blocks``, ``metadata_cost`` (= c x blocks, slot-equivalents) and
    ``total_cost`` = allocated_slots + c x blocks (slot-equivalents), ``is_best``."""

    page_size: int
    allocated_slots: int
    unused_slots: int
    blocks: int
    metadata_cost: float
    total_cost: float
    is_best: bool = False

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)


def page_size_table(lengths: object, metadata_cost: object,
                    candidates: object = DEFAULT_CANDIDATES) -> list[PageSizeRow]:
    """Cost of every candidate page size; the best one is flagged ``is_best``.

    Objective (seed 001): total_cost(p) = allocated_slots(p) + c x blocks(p), in token-slot
    equivalents, where c is the metadata cost of one block expressed in slots. The best size
    minimises it; on a tie the *smallest* page size wins (less tail slack for the same cost).

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1 (tokens).
    metadata_cost : c >= 0, slot-equivalents per block.
    candidates : page sizes to try (slots per block), default powers of two 1..256.

    Returns
    -------
    list of :class:`PageSizeRow`, one per unique candidate, sorted by page size.

    Raises
    ------
    ValueError naming ``lengths[i]``, ``metadata_cost`` or ``candidates``.
    """
    lengths = validate_lengths(lengths)
    c = _non_negative_real(metadata_cost, "metadata_cost")
    sizes = validate_candidates(candidates)
    rows = []
    for p in sizes:
        tally = paged_slots(lengths, p)
        meta = c * tally.blocks
        rows.append(PageSizeRow(page_size=p, allocated_slots=tally.allocated_slots,
                                unused_slots=tally.unused_slots, blocks=tally.blocks,
                                metadata_cost=meta, total_cost=tally.allocated_slots + meta))
    best = min(rows, key=lambda r: (r.total_cost, r.page_size))
    return [PageSizeRow(**{**asdict(r), "is_best": r is best}) for r in rows]


def best_page_size(lengths: object, metadata_cost: object,
                   candidates: object = DEFAULT_CANDIDATES) -> tuple[int, float]:
    """The page size minimising allocated slots + c x blocks, and that minimal cost.

    Seed 001 (5, 9, 17 tokens, candidates 1..32): c = 0 -> (1, 31); c = 0.25 -> (2, 38.25);
    c = 1 -> (4, 50); c = 4 -> (8, 72). Ties go to the smallest page size.

    Returns
    -------
    (page_size in slots per block, total cost in token-slot equivalents)

    Raises
    ------
    ValueError as :func:`page_size_table`.
    """
    best = next(r for r in page_size_table(lengths, metadata_cost, candidates) if r.is_best)
    return best.page_size, best.total_cost


# --------------------------------------------------------------------------------------------
# Prefix sharing (seed 001)
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PrefixSharing:
    """Two requests with a common prefix, kept as three separate quantities (never summed).

    ``logical_tokens``: tokens the two requests contain between them (length_a + length_b).
    ``slots_unshared``: slots allocated if each request has its own blocks.
    ``slots_shared``: distinct physical slots when full prefix blocks are stored once.
    Also ``shared_blocks`` (complete prefix blocks stored once), ``saved_slots`` =
    unshared - shared = shared_blocks x page_size, and the inputs.
    """

    length_a: int
    length_b: int
    prefix_tokens: int
    page_size: int
    logical_tokens: int
    slots_unshared: int
    slots_shared: int
    shared_blocks: int
    saved_slots: int

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)


def prefix_sharing(length_a: object, length_b: object, prefix_tokens: object,
                   page_size: object) -> PrefixSharing:
    """Slots for two requests sharing their first ``prefix_tokens`` tokens, with paging.

    Only *complete* blocks of the common prefix are shared (seed 001): shared_blocks =
    floor(prefix / page_size); slots_shared = slots_unshared - shared_blocks x page_size.
    A partly filled prefix block is not shared, because each request writes its own
    continuation into it. Seed 001: lengths 20 and 23, 8-token prefix, page 4 -> 44 slots
    unshared, 36 shared, 43 logical tokens; each shared 4-token block saves 4 slots.

    Parameters
    ----------
    length_a, length_b : whole numbers >= 1 (tokens).
    prefix_tokens : whole number, 0 <= prefix <= min(length_a, length_b) (tokens).
    page_size : whole number >= 1 (slots per block).

    Raises
    ------
    ValueError naming ``length_a``, ``length_b``, ``prefix_tokens`` or ``page_size``.
    """
    a = _whole_number(length_a, "length_a", 1)
    b = _whole_number(length_b, "length_b", 1)
    p = _whole_number(prefix_tokens, "prefix_tokens", 0)
    page = _whole_number(page_size, "page_size", 1)
    if p > min(a, b):
        raise ValueError(f"prefix_tokens = {p} is longer than the shorter request "
                         f"({min(a, b)} tokens)")
    unshared = paged_slots([a, b], page).allocated_slots
    shared_blocks = p // page
    saved = shared_blocks * page
    return PrefixSharing(length_a=a, length_b=b, prefix_tokens=p, page_size=page,
                         logical_tokens=a + b, slots_unshared=unshared,
                         slots_shared=unshared - saved, shared_blocks=shared_blocks,
                         saved_slots=saved)


# --------------------------------------------------------------------------------------------
# Bytes per token (slot) from a model configuration
# --------------------------------------------------------------------------------------------

def kv_bytes_per_token(layers: object, kv_heads: object, head_dim: object,
                       bytes_per_element: object) -> int:
    """Bytes of KV cache for one token (one slot): layers x kv_heads x head_dim x bytes x 2.

    The factor 2 counts K and V. Source: Kwon et al. 2023 (PagedAttention), section 3;
    seed 003 (7B fp16: 512 KiB), seed 000 (Llama 3 70B: 320 KiB).

    Parameters
    ----------
    layers, kv_heads, head_dim : whole numbers >= 1 (kv_heads is the number of K/V heads,
        smaller than the query heads under grouped-query attention).
    bytes_per_element : whole number >= 1 (2 for fp16/bf16, 1 for fp8, 4 for fp32).

    Returns
    -------
    int, bytes (binary units elsewhere: divide by :data:`KIB` for KiB).

    Raises
    ------
    ValueError naming the field.
    """
    return (_whole_number(layers, "layers", 1) * _whole_number(kv_heads, "kv_heads", 1)
            * _whole_number(head_dim, "head_dim", 1)
            * _whole_number(bytes_per_element, "bytes_per_element", 1) * 2)


@dataclass(frozen=True)
class ModelConfig:
    """A model's KV-cache shape: ``layers``, ``kv_heads``, ``head_dim``, ``bytes_per_element``
    (2 = fp16/bf16), plus a display ``label`` (long) and ``short`` name, and the ``source`` of
    its figure."""

    key: str
    label: str
    layers: int
    kv_heads: int
    head_dim: int
    bytes_per_element: int
    dtype: str
    source: str = ""
    short: str = ""

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token (slot), K and V across all layers; see :func:`kv_bytes_per_token`."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim,
                                  self.bytes_per_element)


#: Preset models (keys are the CLI's ``--model`` values).
PRESETS: dict[str, ModelConfig] = {
    "7b-fp16": ModelConfig("7b-fp16", "7B, fp16, no GQA (32 layers x 32 heads x 128)",
                           32, 32, 128, 2, "fp16",
                           "seed 003: 512 KB (= 512 KiB) per token", "7B fp16, no GQA"),
    "llama3-70b": ModelConfig("llama3-70b", "Llama 3 70B, bf16, GQA (80 layers x 8 KV heads x 128)",
                              80, 8, 128, 2, "bf16", "seed 000: 320 KiB per slot",
                              "Llama 3 70B bf16, GQA"),
    "opt-13b": ModelConfig("opt-13b", "OPT-13B, fp16 (40 layers x 40 heads x 128)",
                           40, 40, 128, 2, "fp16",
                           "Kwon et al. 2023: 800 KB (= 819,200 bytes = 800 KiB) per token",
                           "OPT-13B fp16"),
}


def model_config(key: str) -> ModelConfig:
    """Return the preset named ``key`` (one of :data:`PRESETS`); ValueError naming ``model``."""
    try:
        return PRESETS[key]
    except KeyError:
        raise ValueError(f"model = {key!r} is not a preset; choose one of "
                         f"{', '.join(PRESETS)}") from None


def format_bytes(n_bytes: float, unit: str | None = None) -> str:
    """Format a byte count in binary units, e.g. ``"512 KiB"``, ``"1 GiB"``, ``"175 MiB"``.

    ``unit`` forces one of ``"bytes"``, ``"KiB"``, ``"MiB"``, ``"GiB"``; by default the largest
    unit in which the value is at least 1 is chosen. Up to 2 decimals, trailing zeros dropped.
    """
    scales = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB}
    if unit is None:
        unit = "bytes"
        for name in ("GiB", "MiB", "KiB"):
            if abs(n_bytes) >= scales[name]:
                unit = name
                break
    if unit not in scales:
        raise ValueError(f"unit = {unit!r} must be one of {', '.join(scales)}")
    value = n_bytes / scales[unit]
    if unit == "bytes":
        return f"{value:,.0f} bytes" if float(value).is_integer() else f"{value:,.2f} bytes"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"


def bytes_in_units(n_bytes: float) -> dict[str, float]:
    """The same quantity in bytes, KiB, MiB and GiB (binary), for JSON output."""
    return {"bytes": n_bytes, "KiB": n_bytes / KIB, "MiB": n_bytes / MIB, "GiB": n_bytes / GIB}


# --------------------------------------------------------------------------------------------
# Capacity: how many sequences fit in a memory budget (seed 003, seed 002)
# --------------------------------------------------------------------------------------------

def gib_to_bytes(gib: object, name: str = "free_gib") -> int:
    """Convert a memory size in GiB (2**30 bytes, binary) to whole bytes (rounded down).

    Raises
    ------
    ValueError naming ``name`` for a negative, infinite or non-numeric value.
    """
    return int(_non_negative_real(gib, name) * GIB)


def reserve_max_capacity(bytes_per_token: object, free_bytes: object,
                         max_context: object) -> dict[str, int]:
    """Reserve-max figures that do not depend on how long sequences really are (seed 003).

    Returns ``{"reserved_slots", "reserved_bytes", "fit_reserve", "fit_reserve_double"}``:
    reserved = max_context x bytes_per_token bytes per sequence (2048 x 512 KiB = 1 GiB),
    fit = floor(free_bytes / reserved) (66 GiB -> 66), and the same with 2 x free_bytes (132).
    This is seed 003's point: the count is fixed before anyone knows the actual lengths.

    Raises
    ------
    ValueError naming ``bytes_per_token``, ``free_bytes`` or ``max_context``.
    """
    bpt = _whole_number(bytes_per_token, "bytes_per_token", 1)
    free = _whole_number(free_bytes, "free_bytes", 0)
    max_ctx = _whole_number(max_context, "max_context", 1)
    reserved = max_ctx * bpt
    return {"reserved_slots": max_ctx, "reserved_bytes": reserved,
            "fit_reserve": free // reserved, "fit_reserve_double": (2 * free) // reserved}


@dataclass(frozen=True)
class Capacity:
    """How many sequences fit in ``free_bytes`` under reserve-max and under paging.

    Inputs: ``bytes_per_token`` (bytes per slot), ``free_bytes``, ``max_context`` (tokens),
    ``block_size`` (slots per block), ``mean_tokens`` (tokens actually used per sequence; for
    a list of lengths, their mean) and ``lengths`` (the list, or None when a mean was given).

    Per sequence: ``reserved_slots`` (= max_context), ``reserved_bytes``, ``used_bytes``
    (= mean_tokens x bytes_per_token), ``paged_blocks`` and ``paged_slots`` (mean over the
    list when one was given), ``paged_unused_slots``, ``paged_bytes``.
    Fractions 0..1: ``waste_fraction_reserve`` = 1 - used / reserved,
    ``waste_fraction_paged`` = 1 - used / paged.
    Counts: ``fit_reserve``, ``fit_paged`` (floor of free memory over the per-sequence
    allocation), ``fit_reserve_double``, ``fit_paged_double`` (with 2 x free_bytes),
    ``paged_gain`` = fit_paged / fit_reserve (None if fit_reserve is 0).
    """

    bytes_per_token: int
    free_bytes: int
    max_context: int
    block_size: int
    mean_tokens: float
    lengths: list[int] | None
    reserved_slots: int
    reserved_bytes: int
    used_bytes: float
    paged_blocks: float
    paged_slots: float
    paged_unused_slots: float
    paged_bytes: float
    waste_fraction_reserve: float
    waste_fraction_paged: float
    fit_reserve: int
    fit_paged: int
    fit_reserve_double: int
    fit_paged_double: int
    paged_gain: float | None = field(default=None)

    def to_dict(self) -> dict:
        """Plain-JSON form, with the byte figures also given in KiB/MiB/GiB (binary)."""
        out = asdict(self)
        out["units"] = {
            "bytes_per_token": bytes_in_units(self.bytes_per_token),
            "free_bytes": bytes_in_units(self.free_bytes),
            "reserved_bytes": bytes_in_units(self.reserved_bytes),
            "used_bytes": bytes_in_units(self.used_bytes),
            "paged_bytes": bytes_in_units(self.paged_bytes),
        }
        return out


def capacity(bytes_per_token: object, free_bytes: object, max_context: object,
             tokens_used: object, block_size: object) -> Capacity:
    """Sequences that fit in a memory budget, reserving the maximum versus paging.

    Formulas (seed 003, section 10.3-10.4; seed 002 for a list of lengths), all floors exact
    in integer arithmetic:

    * reserved per sequence = max_context x bytes_per_token; fit_reserve =
      floor(free_bytes / reserved). 7B fp16: 2048 x 512 KiB = 1 GiB, and 66 GiB / 1 GiB = 66;
      twice the memory: 132 GiB / 1 GiB = 132.
    * used per sequence = mean_tokens x bytes_per_token; waste = 1 - mean / max_context
      (350 of 2048 -> 82.9 %, which seed 003 rounds to 83 %).
    * paged per sequence, for a mean: ceil(mean / block_size) x block_size slots
      (350 at 16 -> 22 blocks = 352 slots, 2 unused); fit_paged = floor(free_bytes /
      (paged_slots x bytes_per_token)) = floor(66 GiB / (352 x 512 KiB)) = floor(66 GiB /
      176 MiB) = 384 exactly — seed 003's "384" is this figure, not a rounding. (Paging a mean
      is seed 003's simplification; a real mix of lengths wastes about block_size / 2 per
      sequence on average, which the list form below counts exactly.)
    * for a list of lengths (seed 002): the per-sequence allocation is the *mean* of the
      requests' allocations, fit = floor(free x n / total allocated) — seed 002's
      floor(40960 / (2608 / 5)) = 78 against floor(40960 / (10240 / 5)) = 20, with
      bytes_per_token = 1 so that memory is counted in slots (see :func:`slot_pool_capacity`).

    Parameters
    ----------
    bytes_per_token : whole number >= 1, bytes per slot (see :func:`kv_bytes_per_token`).
    free_bytes : whole number >= 0, KV-cache memory available (bytes).
    max_context : whole number >= 1, tokens reserved per sequence under reserve-max.
    tokens_used : the mean tokens actually used per sequence (a number, 0 < mean <=
        max_context), or a list of request lengths, shape (n,), each 1..max_context.
    block_size : whole number >= 1, slots per block under paging.

    Raises
    ------
    ValueError naming ``bytes_per_token``, ``free_bytes``, ``max_context``, ``mean_tokens``,
    ``lengths[i]`` or ``block_size``.
    """
    bpt = _whole_number(bytes_per_token, "bytes_per_token", 1)
    free = _whole_number(free_bytes, "free_bytes", 0)
    max_ctx = _whole_number(max_context, "max_context", 1)
    reserved_bytes = max_ctx * bpt

    if isinstance(tokens_used, numbers.Real) and not isinstance(tokens_used, (bool, np.bool_)):
        mean = _non_negative_real(tokens_used, "mean_tokens")
        if mean <= 0:
            raise ValueError(f"mean_tokens = {tokens_used!r} must be more than 0")
        if mean > max_ctx:
            raise ValueError(f"mean_tokens = {tokens_used!r} is above max_context ({max_ctx} "
                             "tokens): no sequence can use more than it reserves")
        lengths = None
        bs = _whole_number(block_size, "block_size", 1)
        blocks = math.ceil(mean / bs)
        paged_slots_total, n = blocks * bs, 1
        paged_blocks: float = blocks
    elif tokens_used is None or isinstance(tokens_used, numbers.Number):
        raise ValueError(f"mean_tokens = {tokens_used!r} is not a number")
    else:
        lengths = validate_lengths(tokens_used)
        bs = _whole_number(block_size, "block_size", 1)
        for i, length in enumerate(lengths):
            if length > max_ctx:
                raise ValueError(f"lengths[{i}] = {length} is above max_context ({max_ctx} "
                                 "tokens)")
        tally = paged_slots(lengths, bs)
        n = len(lengths)
        mean = tally.used_tokens / n
        paged_slots_total = tally.allocated_slots
        paged_blocks = tally.blocks / n

    paged_slots_mean = paged_slots_total / n
    fixed = reserve_max_capacity(bpt, free, max_ctx)
    fit_reserve = fixed["fit_reserve"]
    fit_paged = (free * n) // (paged_slots_total * bpt)
    return Capacity(
        bytes_per_token=bpt, free_bytes=free, max_context=max_ctx, block_size=bs,
        mean_tokens=mean, lengths=lengths, reserved_slots=max_ctx,
        reserved_bytes=reserved_bytes, used_bytes=mean * bpt,
        paged_blocks=paged_blocks, paged_slots=paged_slots_mean,
        paged_unused_slots=paged_slots_mean - mean, paged_bytes=paged_slots_mean * bpt,
        waste_fraction_reserve=1 - mean / max_ctx,
        waste_fraction_paged=1 - mean / paged_slots_mean,
        fit_reserve=fit_reserve, fit_paged=fit_paged,
        fit_reserve_double=fixed["fit_reserve_double"],
        fit_paged_double=(2 * free * n) // (paged_slots_total * bpt),
        paged_gain=(fit_paged / fit_reserve) if fit_reserve else None,
    )


def slot_pool_capacity(lengths: object, max_context: object, block_size: object,
                       pool_slots: object) -> Capacity:
    """:func:`capacity` with memory counted in slots (bytes_per_token = 1).

    Seed 002: lengths 512, 37, 1900, 128, 4, maximum 2048, block 16, a 40,960-slot pool ->
    ``fit_reserve`` = floor(40960 / (10240 / 5)) = 20, ``fit_paged`` = floor(40960 /
    (2608 / 5)) = 78 (3.9x). The byte fields then read as slots.

    Raises
    ------
    ValueError as :func:`capacity`, with ``pool_slots`` named for a bad pool size.
    """
    pool = _whole_number(pool_slots, "pool_slots", 0)
    return capacity(1, pool, max_context, list(lengths) if lengths is not None else lengths,
                    block_size)


def fit_curve(bytes_per_token: object, free_bytes: object, max_context: object,
              block_size: object, mean_tokens: object) -> dict[str, np.ndarray]:
    """Sequences that fit as the mean length varies, for charts (vectorised :func:`capacity`).

    Parameters
    ----------
    mean_tokens : array-like, shape (m,), each 0 < mean <= max_context (tokens).
    Other parameters as :func:`capacity`.

    Returns
    -------
    dict of arrays of shape (m,): ``mean_tokens``, ``fit_reserve`` (constant: the reservation
    does not depend on the mean — seed 003's point), ``fit_paged``, ``waste_reserve`` and
    ``waste_paged`` (fractions 0..1).

    Raises
    ------
    ValueError naming the field, as :func:`capacity`.
    """
    bpt = _whole_number(bytes_per_token, "bytes_per_token", 1)
    free = _whole_number(free_bytes, "free_bytes", 0)
    max_ctx = _whole_number(max_context, "max_context", 1)
    bs = _whole_number(block_size, "block_size", 1)
    means = np.asarray(mean_tokens, dtype=float).reshape(-1)
    if means.size == 0:
        raise ValueError("mean_tokens is empty")
    if not np.all(np.isfinite(means)) or np.any(means <= 0) or np.any(means > max_ctx):
        raise ValueError(f"mean_tokens must lie in (0, max_context = {max_ctx}]")
    paged = np.ceil(means / bs).astype(np.int64) * bs
    return {
        "mean_tokens": means,
        "fit_reserve": np.full(means.shape, free // (max_ctx * bpt), dtype=np.int64),
        "fit_paged": np.array([free // (int(s) * bpt) for s in paged], dtype=np.int64),
        "waste_reserve": 1 - means / max_ctx,
        "waste_paged": 1 - means / paged,
    }


# --------------------------------------------------------------------------------------------
# One call for the ``account`` command
# --------------------------------------------------------------------------------------------

def account(lengths: object, reserve: object, metadata_cost: object, page_size: object = 16,
            candidates: object = DEFAULT_CANDIDATES, pool_slots: object | None = None,
            sharing: tuple[object, object, object, object] | None = None) -> dict:
    """Every Accounting-page figure for one set of inputs, as plain JSON-able data.

    Returns a dict with ``reserve_max`` (:class:`ReserveTally`), ``paged`` (:class:`PagedTally`
    at ``page_size``), ``page_sizes`` (:func:`page_size_table` rows), ``best`` ({page_size,
    total_cost}), optionally ``pool`` (:func:`slot_pool_capacity` for ``pool_slots`` slots,
    block size ``page_size``, maximum ``reserve``) and ``prefix_sharing``
    (:func:`prefix_sharing` of ``sharing`` = (length_a, length_b, prefix_tokens, page_size)).

    Raises
    ------
    ValueError naming the field, from the functions above.
    """
    table = page_size_table(lengths, metadata_cost, candidates)
    best = next(r for r in table if r.is_best)
    out: dict = {
        "lengths": validate_lengths(lengths),
        "metadata_cost": float(_non_negative_real(metadata_cost, "metadata_cost")),
        "reserve_max": reserve_max_slots(lengths, reserve).to_dict(),
        "paged": paged_slots(lengths, page_size).to_dict(),
        "page_sizes": [r.to_dict() for r in table],
        "best": {"page_size": best.page_size, "total_cost": best.total_cost},
    }
    if pool_slots is not None:
        pool = slot_pool_capacity(lengths, reserve, page_size, pool_slots)
        out["pool"] = {"pool_slots": pool.free_bytes, "fit_reserve": pool.fit_reserve,
                       "fit_paged": pool.fit_paged, "paged_gain": pool.paged_gain}
    if sharing is not None:
        out["prefix_sharing"] = prefix_sharing(*sharing).to_dict()
    return out
