"""Slots under reserve-max versus paging, for a list of request lengths.

Units: **tokens** are positions a request has actually written (its length); **slots** are
room for one token's K and V across all layers, what an allocator hands out; a **block** is
``block_size`` consecutive slots.

Sources: ``assets/reference_figures.md`` R1 (5, 9, 17 tokens, reserve 32, blocks of 4/8/16)
and R4 (512, 37, 1900, 128, 4 tokens with a maximum of 2048, blocks of 16).

Bad input raises :class:`allocator.common.validate.FieldError`: ``.field`` is ``"lengths"`` (with
``.index`` the 0-based entry), ``"reserve"`` or :data:`BLOCK_FIELD` (a block size).
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from allocator.common.limits import LIMITS
from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError
from allocator.common.validate import number_from_text, whole_number, whole_numbers

#: The ``.field`` a bad block size is reported under, and its limit's key: ``"block_size"``, as
#: everywhere else (``LIMITS``); the Accounting page keys its block-size controls and labels by it
#: (``pages/accounting.py``: ``FIELD_LABELS`` and its placeholders).
BLOCK_FIELD = "block_size"

#: Longest request (tokens) and largest reserve (slots) and block (slots per block) accepted.
MAX_LENGTH = int(LIMITS["lengths"].high)
MAX_RESERVE = int(LIMITS["reserve"].high)
MAX_BLOCK_SIZE = int(LIMITS[BLOCK_FIELD].high)


def validate_lengths(lengths: object, name: str = "lengths") -> list[int]:
    """Check a list of request lengths and return it as ``list[int]``.

    A thin wrapper over :func:`allocator.common.validate.whole_numbers` with the lesson's wording.

    Parameters
    ----------
    lengths : sequence of whole numbers, shape (n,), n >= 1, each 1 .. 10,000,000 (tokens,
        ``LIMITS["lengths"]``)
    name : the field name (``.field`` of the error and the subject of its message).

    Raises
    ------
    FieldError
        field ``name``: ``"lengths must be a list of whole numbers of tokens"`` (a string, None
        or a scalar), ``"lengths is empty ..."`` for no requests; with ``.index`` = i,
        ``"lengths[i] ..."`` for a missing, negative, zero, too large or non-integer entry.
    """
    if lengths is None or isinstance(lengths, (str, bytes)) or not isinstance(lengths, Iterable):
        raise FieldError(name, " must be a list of whole numbers of tokens")
    return whole_numbers(name, lengths, 1, maximum=MAX_LENGTH, what="request length (tokens)")


def parse_numbers(text: str, name: str, *, what: str) -> list[object]:
    """Split comma-separated text such as ``"5, 9,17"`` into numbers (ints, or floats as written).

    Only the text is checked here -- each entry must read as a number -- so the caller's check
    words the range. ``what`` is what one entry is, for the empty-list message
    (``"block size (slots per block)"``).

    Raises
    ------
    FieldError
        field ``name`` for an empty list (``"candidates is empty: give at least one block size
        (slots per block)"``); with ``.index`` = i for a blank entry or one that is not a number
        (``"lengths[0] = 'nan' is not a number"``; NaN is never taken for a blank).
    """
    parts = [p.strip() for p in str(text).split(",")]
    if parts == [""]:
        raise FieldError(name, f" is empty: give at least one {what}")
    values: list[object] = []
    for i, part in enumerate(parts):
        if part == "":
            raise FieldError(name, " is empty: enter a whole number (at least 1)", index=i)
        value = number_from_text(part)
        if isinstance(value, str) or (isinstance(value, float) and value != value):
            raise FieldError(name, f" = {part[:40]!r} is not a number", index=i)
        values.append(value)
    return values


def parse_lengths(text: str, name: str = "lengths") -> list[int]:
    """Parse comma-separated request lengths such as ``"5,9,17"`` into ``[5, 9, 17]`` (tokens).

    Entries may be written as integral floats (``"17.0"``); spaces around entries are ignored.

    Raises
    ------
    FieldError
        field ``name`` for an empty list; with ``.index`` = i for a blank entry i, text that is not
        a number (``"lengths[1] = 'abc' is not a number"``, also ``'nan'``) or an entry that is not
        a whole number from 1 to 10,000,000.
    """
    return validate_lengths(parse_numbers(text, name, what="request length (tokens)"), name)


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

    Formula: allocated = n x reserve; unused = allocated - sum(lengths); waste = 1 -
    sum(lengths) / allocated. ``assets/reference_figures.md`` R1: 5, 9, 17 with reserve 32 ->
    96 allocated, 65 unused; R4: 512, 37, 1900, 128, 4 with 2048 -> 10,240 allocated, 74.8 %
    waste.

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1, tokens per request.
    reserve : whole number >= 1, slots reserved per request (the maximum length).

    Raises
    ------
    FieldError with field ``lengths`` (and ``.index``) or ``reserve`` for bad values, or field
    ``lengths`` with the request's ``.index`` when a request is longer than ``reserve`` (it
    could never have been admitted).
    """
    lengths = validate_lengths(lengths)
    reserve = whole_number("reserve", reserve, 1, MAX_RESERVE)
    for i, n in enumerate(lengths):
        if n > reserve:
            raise FieldError("lengths", f" = {n} is above the reserve maximum ({reserve} slots): "
                             "raise reserve or shorten the request", index=i)
    allocated = len(lengths) * reserve
    used = sum(lengths)
    return ReserveTally(lengths=lengths, reserve=reserve, allocated_slots=allocated,
                        used_tokens=used, unused_slots=allocated - used,
                        waste_fraction=(allocated - used) / allocated,
                        unused_per_request=[reserve - n for n in lengths])


@dataclass(frozen=True)
class PagedTally:
    """Slots under paging with blocks of ``block_size`` slots.

    Attributes (slots/tokens/blocks; lists have shape (n,)): ``lengths``, ``block_size``
    (slots per block),
    ``blocks_per_request`` = ceil(length / block size), ``allocated_per_request`` =
    blocks x block size, ``unused_per_request`` (the last block's empty tail, < block size),
    ``blocks`` total, ``allocated_slots`` total, ``used_tokens``, ``unused_slots``,
    ``waste_fraction`` = unused / allocated (0..1).
    """

    lengths: list[int]
    block_size: int
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


def paged_slots(lengths: object, block_size: object) -> PagedTally:
    """Slots allocated when each request gets whole blocks of ``block_size`` slots.

    Formula: allocated_i = ceil(length_i / block_size) x block_size (the paper's section 4.2:
    a request's logical blocks fill left to right, so only the last block has empty slots).
    ``assets/reference_figures.md`` R1: 5, 9, 17 at block sizes 4 / 8 / 16 -> 40 / 48 / 64
    slots, 9 / 17 / 33 unused; R4: 512, 37, 1900, 128, 4 at 16 -> 2,608 slots, 1.0 % waste.

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1 (tokens).
    block_size : whole number 1 .. 4,096 (slots per block).

    Raises
    ------
    FieldError with field ``lengths`` (and ``.index``) or :data:`BLOCK_FIELD` (a bad
    ``block_size``).
    """
    lengths = validate_lengths(lengths)
    block_size = whole_number(BLOCK_FIELD, block_size, 1, MAX_BLOCK_SIZE)
    blocks = [cdiv(n, block_size) for n in lengths]
    alloc = [round_up(n, block_size) for n in lengths]
    used = sum(lengths)
    total = sum(alloc)
    return PagedTally(lengths=lengths, block_size=block_size, blocks_per_request=blocks,
                      allocated_per_request=alloc,
                      unused_per_request=[a - n for a, n in zip(alloc, lengths)],
                      blocks=sum(blocks), allocated_slots=total, used_tokens=used,
                      unused_slots=total - used, waste_fraction=(total - used) / total)
