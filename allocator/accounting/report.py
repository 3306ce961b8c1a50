"""The Accounting page's inputs and every figure it shows, in one call (the ``account`` command).

Sources: ``assets/reference_figures.md`` R1-R3 (the default example: 5, 9, 17 tokens, reserve
32, blocks of 4, c = 1, prefix sharing 20/23/8 at blocks of 4) and R4 (512, 37, 1900, 128, 4
tokens, maximum 2048, blocks of 16, a 40,960-slot pool).
"""
from __future__ import annotations

from allocator.common.limits import LIMITS
from allocator.common.validate import real_number

from allocator.accounting.block_size import DEFAULT_CANDIDATES, R2_CANDIDATES, block_size_table
from allocator.accounting.memory import slot_pool_capacity
from allocator.accounting.sharing import prefix_sharing
from allocator.accounting.slots import paged_slots, reserve_max_slots, validate_lengths

#: Starting inputs of the Accounting page and the ``account`` command (reference figures R1-R3;
#: ``pool_slots`` is R4's pool; ``share`` = (length_a, length_b, prefix_tokens, block_size)).
#: ``candidates`` is R2's range 1..32 (the functions' own default is 1..256).
ACCOUNT_DEFAULTS: dict = {"lengths": (5, 9, 17), "reserve": 32, "block_size": 4,
                          "metadata_cost": 1.0, "candidates": R2_CANDIDATES,
                          "pool_slots": 40960, "share": (20, 23, 8, 4)}

#: Reference figure R4's five requests (tokens) with a 2048-slot maximum, shown at block size 16
#: with candidate block sizes 1..256.
R4_PRESET: dict = {"lengths": (512, 37, 1900, 128, 4), "reserve": 2048, "block_size": 16,
                   "candidates": DEFAULT_CANDIDATES}
#: The old name of :data:`R4_PRESET`, still imported by ``pages/accounting.py``; remove once it
#: uses ``R4_PRESET``.


def account(lengths: object, reserve: object, metadata_cost: object, block_size: object = 16,
            candidates: object = DEFAULT_CANDIDATES, pool_slots: object | None = None,
            sharing: tuple[object, object, object, object] | None = None) -> dict:
    """Every Accounting-page figure for one set of inputs, as plain JSON-able data.

    Returns a dict with ``lengths`` (tokens), ``metadata_cost`` (slot-equivalents per block),
    ``reserve_max`` (:class:`~allocator.accounting.slots.ReserveTally`), ``paged``
    (:class:`~allocator.accounting.slots.PagedTally` at ``block_size``), ``block_sizes``
    (:func:`~allocator.accounting.block_size.block_size_table` rows), ``best`` ({block_size,
    total_cost}: the best block size), optionally ``pool``
    (:func:`~allocator.accounting.memory.slot_pool_capacity` for ``pool_slots`` slots, block
    size ``block_size``, maximum ``reserve``) and ``prefix_sharing``
    (:func:`~allocator.accounting.sharing.prefix_sharing` of ``sharing`` = (length_a, length_b,
    prefix_tokens, block_size)). The defaults (``assets/reference_figures.md`` R1-R3) give 96 /
    65 reserve-max, 40 / 9 at blocks of 4, best block size 4 at c = 1 (cost 50) and 43 / 44 /
    36 shared.

    Raises
    ------
    FieldError naming the field (``lengths`` with ``.index``, ``reserve``, ``metadata_cost``,
    ``candidates``, ``block_size``, ``pool_slots``, ``length_a``, ``length_b``,
    ``prefix_tokens``), from the functions above.
    """
    table = block_size_table(lengths, metadata_cost, candidates)
    best = next(r for r in table if r.is_best)
    out: dict = {
        "lengths": validate_lengths(lengths),
        "metadata_cost": float(real_number("metadata_cost", metadata_cost, 0, LIMITS["metadata_cost"].high)),
        "reserve_max": reserve_max_slots(lengths, reserve).to_dict(),
        "paged": paged_slots(lengths, block_size).to_dict(),
        "block_sizes": [r.to_dict() for r in table],
        "best": {"block_size": best.block_size, "total_cost": best.total_cost},
    }
    if pool_slots is not None:
        pool = slot_pool_capacity(lengths, reserve, block_size, pool_slots)
        out["pool"] = {"pool_slots": pool.free_bytes, "fit_reserve": pool.fit_reserve,
                       "fit_paged": pool.fit_paged, "paged_gain": pool.paged_gain}
    if sharing is not None:
        out["prefix_sharing"] = prefix_sharing(*sharing).to_dict()
    return out
