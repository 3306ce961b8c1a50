"""Capacity: how many sequences fit in a memory budget, reserving the maximum versus paging.

Units: **tokens** (what a sequence has written), **slots** (room for one token's K and V in
every layer; ``bytes_per_token`` bytes each), **blocks** of ``block_size`` slots, and **bytes**,
always binary (``GiB = 2**30``; see :mod:`allocator.accounting.units`). Every count of
sequences is a floor computed exactly in integer arithmetic.

Sources: ``assets/reference_figures.md`` R5 (7B fp16, 66 GiB free, a 2048-token maximum and
a mean of 350 tokens: 66 sequences reserve-max, 384 paged) and R4 (512, 37, 1900, 128, 4
tokens in a 40,960-slot pool: 20 against 78).

Bad input raises :class:`allocator.common.validate.FieldError`; ``.field`` names the input
(``"free_gib"``, ``"bytes_per_token"``, ``"free_bytes"``, ``"max_context"``, ``"mean_tokens"``,
``"lengths"`` with ``.index``, ``"block_size"``, ``"pool_slots"``).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np

from allocator.common.limits import LIMITS
from allocator.common.errors import FieldError
from allocator.common.validate import real_number, whole_number

from allocator.accounting.slots import paged_slots, validate_lengths
from allocator.common.formats import GIB
from allocator.accounting.units import bytes_in_units

#: Longest max_context (tokens) and largest block (slots) accepted (``allocator.common.limits.LIMITS``).
MAX_CONTEXT = int(LIMITS["max_context"].high)
MAX_BLOCK = int(LIMITS["block_size"].high)
#: Most memory counted (bytes): ``LIMITS["free_gib"]`` GiB.
MAX_FREE_BYTES = int(LIMITS["free_gib"].high) * GIB

#: Starting inputs of the Capacity page and the ``capacity`` command (reference figure R5).
CAPACITY_DEFAULTS: dict = {"model": "7b-fp16", "free_gib": 66.0, "max_context": 2048,
                           "mean_tokens": 350.0, "block_size": 16}


def _as_written(value: object, as_float: float) -> str:
    """``value`` as messages show numbers: ``3000`` for an int, ``3000.0`` for a float."""
    return str(int(value)) if isinstance(value, numbers.Integral) else repr(as_float)


def gib_to_bytes(gib: object, name: str = "free_gib") -> int:
    """Convert a memory size in GiB (2**30 bytes, binary) to whole bytes (rounded down).

    Raises
    ------
    FieldError with field ``name`` for a negative, infinite or non-numeric value, or one above
    ``LIMITS["free_gib"]`` (1,048,576 GiB = 1 PiB).
    """
    return int(real_number(name, gib, 0, LIMITS["free_gib"].high) * GIB)


def kv_pool_bytes(memory_bytes: object, weight_bytes: object, reserve_bytes: object,
                  bytes_per_token: object = 1) -> int:
    """Memory left for the KV cache on a device: memory - weights - reserve (bytes).

    The one place this subtraction is written: the Capacity page's "free memory" is this figure,
    and the cost model (:mod:`allocator.cost.timing`) sizes a GPU's KV pool with it (then
    slots = floor(free / bytes_per_token)). E.g. OPT-13B (12,853,473,280 fp16 parameters =
    25,706,946,560 bytes) on an A100 40GB (40 GiB) with a 10 % reserve (4 GiB) leaves
    42,949,672,960 - 25,706,946,560 - 4,294,967,296 = 12,947,759,104 bytes (12.06 GiB), which is
    15,805 slots of 800 KiB.

    Parameters
    ----------
    memory_bytes, weight_bytes, reserve_bytes : whole numbers >= 0 (bytes).
    bytes_per_token : whole number >= 1, the KV bytes of one slot: the result must hold one.

    Raises
    ------
    FieldError with field ``memory_bytes``, ``weight_bytes``, ``reserve_bytes`` or
    ``bytes_per_token`` for a bad value, and ``weight_bytes`` when the weights and the reserve
    leave less than one slot.
    """
    mem = whole_number("memory_bytes", memory_bytes, 0)
    weights = whole_number("weight_bytes", weight_bytes, 0)
    reserve = whole_number("reserve_bytes", reserve_bytes, 0)
    bpt = whole_number("bytes_per_token", bytes_per_token, 1)
    free = mem - weights - reserve
    if free < bpt:
        from allocator.common.formats import format_bytes
        raise FieldError("weight_bytes", f": the weights ({format_bytes(weights)}) and the reserve "
                         f"({format_bytes(reserve)}) leave no room for the KV cache in "
                         f"{format_bytes(mem)}")
    return free


def reserve_max_capacity(bytes_per_token: object, free_bytes: object,
                         max_context: object) -> dict[str, int]:
    """Reserve-max figures that do not depend on how long sequences really are (R5).

    Returns ``{"reserved_slots", "reserved_bytes", "fit_reserve", "fit_reserve_double"}``:
    reserved = max_context x bytes_per_token bytes per sequence (2048 x 512 KiB = 1 GiB),
    fit = floor(free_bytes / reserved) (66 GiB -> 66), and the same with 2 x free_bytes (132).
    This is R5's point (``assets/reference_figures.md``): the count is fixed before anyone
    knows the actual lengths.

    Raises
    ------
    FieldError with field ``bytes_per_token``, ``free_bytes`` or ``max_context``.
    """
    bpt = whole_number("bytes_per_token", bytes_per_token, 1)
    free = whole_number("free_bytes", free_bytes, 0, MAX_FREE_BYTES)
    max_ctx = whole_number("max_context", max_context, 1, MAX_CONTEXT)
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

    Formulas (``assets/reference_figures.md`` R5; R4 for a list of lengths), all floors exact
    in integer arithmetic:

    * reserved per sequence = max_context x bytes_per_token; fit_reserve =
      floor(free_bytes / reserved). 7B fp16: 2048 x 512 KiB = 1 GiB, and 66 GiB / 1 GiB = 66;
      twice the memory: 132 GiB / 1 GiB = 132.
    * used per sequence = mean_tokens x bytes_per_token; waste = 1 - mean / max_context
      (350 of 2048 -> 82.9 %, which R5 rounds to 83 %).
    * paged per sequence, for a mean: ceil(mean / block_size) x block_size slots
      (350 at 16 -> 22 blocks = 352 slots, 2 unused); fit_paged = floor(free_bytes /
      (paged_slots x bytes_per_token)) = floor(66 GiB / (352 x 512 KiB)) = floor(66 GiB /
      176 MiB) = 384 exactly — R5's "about 384" is this figure, not a rounding. (Paging a
      mean is R5's simplification; a real mix of lengths wastes about block_size / 2 per
      sequence on average, which the list form below counts exactly.)
    * for a list of lengths (R4): the per-sequence allocation is the *mean* of the
      requests' allocations, fit = floor(free x n / total allocated) — R4's floor(40960 / (2608 / 5)) = 78 against floor(40960 / (10240 / 5)) = 20, with
      bytes_per_token = 1 so that memory is counted in slots (see :func:`slot_pool_capacity`).

    Parameters
    ----------
    bytes_per_token : whole number >= 1, bytes per slot (see
        :func:`~allocator.accounting.models.kv_bytes_per_token`).
    free_bytes : whole number 0 .. 2**50 (one PiB), KV-cache memory available (bytes).
    max_context : whole number 1 .. 10,000,000, tokens reserved per sequence under reserve-max.
    tokens_used : the mean tokens actually used per sequence (a number, 0 < mean <=
        max_context), or a list of request lengths, shape (n,), each 1..max_context.
    block_size : whole number 1 .. 4,096, slots per block under paging.

    Raises
    ------
    FieldError with field ``bytes_per_token``, ``free_bytes``, ``max_context``,
    ``mean_tokens`` (not a number, not above 0, or above max_context), ``lengths`` with
    ``.index`` (a bad entry, or one above max_context) or ``block_size``.
    """
    bpt = whole_number("bytes_per_token", bytes_per_token, 1)
    free = whole_number("free_bytes", free_bytes, 0, MAX_FREE_BYTES)
    max_ctx = whole_number("max_context", max_context, 1, MAX_CONTEXT)
    reserved_bytes = max_ctx * bpt

    if isinstance(tokens_used, numbers.Real) and not isinstance(tokens_used, (bool, np.bool_)):
        mean = real_number("mean_tokens", tokens_used, 0, above=0)
        if mean > max_ctx:
            raise FieldError("mean_tokens", f" = {_as_written(tokens_used, mean)} is above "
                             f"max_context ({max_ctx} tokens): no sequence can use more than "
                             "it reserves")
        lengths = None
        bs = whole_number("block_size", block_size, 1, MAX_BLOCK)
        blocks = math.ceil(mean / bs)
        paged_slots_total, n = blocks * bs, 1
        paged_blocks: float = blocks
    elif tokens_used is None or isinstance(tokens_used, numbers.Number):
        raise FieldError("mean_tokens", f" = {tokens_used!r} is not a number")
    else:
        lengths = validate_lengths(tokens_used)
        bs = whole_number("block_size", block_size, 1, MAX_BLOCK)
        for i, length in enumerate(lengths):
            if length > max_ctx:
                raise FieldError("lengths", f" = {length} is above max_context ({max_ctx} "
                                 "tokens)", index=i)
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

    ``assets/reference_figures.md`` R4: lengths 512, 37, 1900, 128, 4, maximum 2048, block 16, a 40,960-slot pool ->
    ``fit_reserve`` = floor(40960 / (10240 / 5)) = 20, ``fit_paged`` = floor(40960 /
    (2608 / 5)) = 78 (3.9x). The byte fields then read as slots.

    Raises
    ------
    FieldError as :func:`capacity`, with field ``pool_slots`` for a bad pool size.
    """
    pool = whole_number("pool_slots", pool_slots, 0, int(LIMITS["pool_slots"].high))
    if lengths is None or isinstance(lengths, (str, bytes)) or not isinstance(lengths, Iterable):
        raise FieldError("lengths", " must be a list of whole numbers of tokens")
    return capacity(1, pool, max_context, list(lengths), block_size)


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
    does not depend on the mean — R5's point), ``fit_paged``, ``waste_reserve`` and
    ``waste_paged`` (fractions 0..1).

    Raises
    ------
    FieldError with field ``bytes_per_token``, ``free_bytes``, ``max_context``,
    ``block_size`` or ``mean_tokens`` (not numbers, empty, or an entry outside
    (0, max_context], with ``.index`` the first such entry).
    """
    bpt = whole_number("bytes_per_token", bytes_per_token, 1)
    free = whole_number("free_bytes", free_bytes, 0, MAX_FREE_BYTES)
    max_ctx = whole_number("max_context", max_context, 1, MAX_CONTEXT)
    bs = whole_number("block_size", block_size, 1, MAX_BLOCK)
    try:
        means = np.asarray(mean_tokens, dtype=float).reshape(-1)
    except (TypeError, ValueError):
        raise FieldError("mean_tokens", " must be an array of numbers (tokens)") from None
    if means.size == 0:
        raise FieldError("mean_tokens", " is empty")
    bad = ~np.isfinite(means) | (means <= 0) | (means > max_ctx)
    if bad.any():
        raise FieldError("mean_tokens", f" must lie in (0, max_context = {max_ctx}]",
                         index=int(np.argmax(bad)), subject="mean_tokens")
    paged = np.ceil(means / bs).astype(np.int64) * bs
    return {
        "mean_tokens": means,
        "fit_reserve": np.full(means.shape, free // (max_ctx * bpt), dtype=np.int64),
        "fit_paged": np.array([free // (int(s) * bpt) for s in paged], dtype=np.int64),
        "waste_reserve": 1 - means / max_ctx,
        "waste_paged": 1 - means / paged,
    }
