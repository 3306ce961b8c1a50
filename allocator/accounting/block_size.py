"""Which block size is best once every block carries a metadata cost.

The objective is allocated slots + c x blocks, in token-slot equivalents, where ``c`` (the
metadata cost of one block, in slots) stands in for a block-table entry, a lookup and a
scattered read. Source: ``assets/reference_figures.md`` R2 (5, 9, 17 tokens over block sizes
1..32: best 1 at c = 0, 2 at c = 0.25, 4 at c = 1, 8 at c = 4).

Bad input raises :class:`allocator.common.validate.FieldError`: ``.field`` is ``"lengths"`` (with
``.index``), ``"metadata_cost"`` or ``"candidates"`` (with ``.index`` for a bad entry).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from allocator.common.limits import LIMITS
from allocator.common.errors import FieldError
from allocator.common.validate import real_number, whole_numbers

from allocator.accounting.slots import paged_slots, validate_lengths

#: Candidate block sizes (slots per block) tried by :func:`best_block_size`: powers of two 1..256.
DEFAULT_CANDIDATES: tuple[int, ...] = tuple(2 ** k for k in range(9))

#: Two total costs within this relative difference are a tie: the costs are exact sums of whole
#: slots and c x whole blocks, so only float rounding (far below 1e-9) can separate equal ones.
TIE_REL_TOL = 1e-9

#: The candidate block sizes of reference figure R2: powers of two 1..32.
R2_CANDIDATES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def validate_candidates(candidates: object) -> list[int]:
    """Check candidate block sizes (slots per block): non-empty, whole numbers >= 1; sorted, unique.

    A thin wrapper over :func:`allocator.common.validate.whole_numbers` with the lesson's wording.

    Returns
    -------
    list[int], shape (k,), sorted ascending without repeats (slots per block).

    Raises
    ------
    FieldError with field ``candidates`` (``.index`` = i for a bad entry i).
    """
    if (candidates is None or isinstance(candidates, (str, bytes))
            or not isinstance(candidates, Iterable)):
        raise FieldError("candidates", " must be a list of block sizes (slots per block)")
    return sorted(set(whole_numbers("candidates", candidates, 1, maximum=int(LIMITS["candidates"].high),
                                    what="block size (slots per block)")))


@dataclass(frozen=True)
class BlockSizeRow:
    """One candidate block size: ``block_size`` (slots per block), ``allocated_slots``,
    ``unused_slots``, ``blocks``, ``metadata_cost`` (= c x blocks, slot-equivalents) and
    ``total_cost`` = allocated_slots + c x blocks (slot-equivalents), ``is_best`` (the one the
    table picks: the smallest total cost, the smallest block on a tie) and ``ties_best`` (its total
    cost equals the best's: more than one row with ``ties_best`` is a tie, and is said as one)."""

    block_size: int
    allocated_slots: int
    unused_slots: int
    blocks: int
    metadata_cost: float
    total_cost: float
    is_best: bool = False
    ties_best: bool = False

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)


def block_size_table(lengths: object, metadata_cost: object,
                     candidates: object = DEFAULT_CANDIDATES) -> list[BlockSizeRow]:
    """Cost of every candidate block size; the best one is flagged ``is_best``.

    Objective (``assets/reference_figures.md`` R2): total_cost(p) = allocated_slots(p) + c x blocks(p), in token-slot
    equivalents, where c is the metadata cost of one block expressed in slots. The best size
    minimises it; on a tie the *smallest* block size wins (less tail slack for the same cost).

    Parameters
    ----------
    lengths : shape (n,) whole numbers >= 1 (tokens).
    metadata_cost : c >= 0, slot-equivalents per block.
    candidates : block sizes to try (slots per block), default powers of two 1..256.

    Returns
    -------
    list of :class:`BlockSizeRow`, one per unique candidate, sorted by block size.

    Raises
    ------
    FieldError with field ``lengths`` (and ``.index``), ``metadata_cost`` or ``candidates``
    (and ``.index``).
    """
    lengths = validate_lengths(lengths)
    c = real_number("metadata_cost", metadata_cost, 0, LIMITS["metadata_cost"].high)
    sizes = validate_candidates(candidates)
    rows = []
    for p in sizes:
        tally = paged_slots(lengths, p)
        meta = c * tally.blocks
        rows.append(BlockSizeRow(block_size=p, allocated_slots=tally.allocated_slots,
                                 unused_slots=tally.unused_slots, blocks=tally.blocks,
                                 metadata_cost=meta, total_cost=tally.allocated_slots + meta))
    best = min(rows, key=lambda r: (r.total_cost, r.block_size))
    return [BlockSizeRow(**{**asdict(r), "is_best": r is best,
                            "ties_best": math.isclose(r.total_cost, best.total_cost, rel_tol=TIE_REL_TOL)})
            for r in rows]


def tied_best(rows: list[BlockSizeRow]) -> list[int]:
    """The block sizes (slots per block) whose total cost equals the best's, ascending: one entry,
    or several when candidates tie (5, 9, 17 tokens at c = 2: blocks of 4 and 8 both cost 60)."""
    return [r.block_size for r in rows if r.ties_best]


def best_block_size(lengths: object, metadata_cost: object,
                    candidates: object = DEFAULT_CANDIDATES) -> tuple[int, float]:
    """The block size minimising allocated slots + c x blocks, and that minimal cost.

    ``assets/reference_figures.md`` R2 (5, 9, 17 tokens, candidates 1..32): c = 0 -> (1, 31);
    c = 0.25 -> (2, 38.25); c = 1 -> (4, 50); c = 4 -> (8, 72). Ties go to the smallest block
    size.

    Returns
    -------
    (block size in slots per block, total cost in token-slot equivalents)

    Raises
    ------
    FieldError as :func:`block_size_table`.
    """
    best = next(r for r in block_size_table(lengths, metadata_cost, candidates) if r.is_best)
    return best.block_size, best.total_cost
