"""Two requests with a common prefix under paging: three quantities kept apart.

Logical tokens, slots without sharing and distinct physical slots with sharing are never summed:
adding them would count one saving twice. Source: ``assets/reference_figures.md`` R3 (lengths
20 and 23, an 8-token prefix, blocks of 4 -> 43 logical tokens, 44 slots separately, 36
shared); the paper's section 4.4 (shared prefix, block-level sharing).

Bad input raises :class:`allocator.common.validate.FieldError` with ``.field`` ``"length_a"``,
``"length_b"``, ``"prefix_tokens"`` or ``"block_size"``
(:data:`allocator.accounting.slots.BLOCK_FIELD`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from allocator.common.limits import LIMITS
from allocator.common.errors import FieldError
from allocator.common.validate import whole_number

from allocator.accounting.slots import BLOCK_FIELD, paged_slots


@dataclass(frozen=True)
class PrefixSharing:
    """Two requests with a common prefix, kept as three separate quantities (never summed).

    ``logical_tokens``: tokens the two requests contain between them (length_a + length_b).
    ``slots_unshared``: slots allocated if each request has its own blocks.
    ``slots_shared``: distinct physical slots when full prefix blocks are stored once.
    Also ``shared_blocks`` (complete prefix blocks stored once), ``saved_slots`` =
    unshared - shared = shared_blocks x block_size, and the inputs (``block_size`` in slots per
    block).
    """

    length_a: int
    length_b: int
    prefix_tokens: int
    block_size: int
    logical_tokens: int
    slots_unshared: int
    slots_shared: int
    shared_blocks: int
    saved_slots: int

    def to_dict(self) -> dict:
        """Plain-JSON form."""
        return asdict(self)


def prefix_sharing(length_a: object, length_b: object, prefix_tokens: object,
                   block_size: object) -> PrefixSharing:
    """Slots for two requests sharing their first ``prefix_tokens`` tokens, with paging.

    Only *complete* blocks of the common prefix are shared: shared_blocks =
    floor(prefix / block_size); slots_shared = slots_unshared - shared_blocks x block_size.
    A partly filled prefix block is not shared, because each request writes its own
    continuation into it. ``assets/reference_figures.md`` R3: lengths 20 and 23, 8-token
    prefix, blocks of 4 -> 44 slots unshared, 36 shared, 43 logical tokens; each shared 4-token
    block saves 4 slots.

    Parameters
    ----------
    length_a, length_b : whole numbers 1 .. 10,000,000 (tokens).
    prefix_tokens : whole number, 0 <= prefix <= min(length_a, length_b) (tokens).
    block_size : whole number 1 .. 4,096 (slots per block).

    Raises
    ------
    FieldError with field ``length_a``, ``length_b``, ``prefix_tokens`` (also when it is longer
    than the shorter request) or ``block_size``.
    """
    a, b, p, bs = (whole_number(name, value, int(LIMITS[name].low), int(LIMITS[name].high))
                   for name, value in (("length_a", length_a), ("length_b", length_b),
                                       ("prefix_tokens", prefix_tokens), (BLOCK_FIELD, block_size)))
    if p > min(a, b):
        raise FieldError("prefix_tokens", f" = {p} is longer than the shorter request "
                         f"({min(a, b)} tokens)")
    unshared = paged_slots([a, b], bs).allocated_slots
    shared_blocks = p // bs
    saved = shared_blocks * bs
    return PrefixSharing(length_a=a, length_b=b, prefix_tokens=p, block_size=bs,
                         logical_tokens=a + b, slots_unshared=unshared,
                         slots_shared=unshared - saved, shared_blocks=shared_blocks,
                         saved_slots=saved)
