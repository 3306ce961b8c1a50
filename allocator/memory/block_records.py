"""What the block manager keeps per sequence and what its operations return.

:class:`allocator.memory.block_manager.BlockManager` keeps one :class:`SeqState` per sequence (its token
ids, its block table, and its host table while swapped out); its ``allocate`` returns an
:class:`Allocation`, ``append_token`` an :class:`AppendResult`, ``slot_counts`` a
:class:`SlotCounts`.
Source: Kwon et al., PagedAttention, SOSP 2023, section 4.2 (block tables).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from allocator.common.errors import FieldError

__all__ = ["Allocation", "AppendResult", "SeqState", "SlotCounts", "check_seq_id"]


def check_seq_id(name: str, value) -> int | str:
    """A sequence id (an int or a non-blank string; numpy ints become ints).

    Raises:
        FieldError: named ``name``, for any other type or a blank string.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, str)):
        raise FieldError(name, f" must be an int or a string, got {value!r}")
    if isinstance(value, str) and not value.strip():
        raise FieldError(name, " must not be blank")
    return int(value) if isinstance(value, np.integer) else value


@dataclass
class SeqState:
    """One sequence as the block manager keeps it: its token ids (shape (n,)), its block table
    (GPU block ids, one per logical block; empty while swapped out), the salt and LoRA adapter its
    blocks were hashed with, and the host blocks holding it while ``swapped``."""

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

