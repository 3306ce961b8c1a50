"""The lesson's arithmetic: slot counts, block-size cost, prefix sharing, bytes and capacity.

Everything here is closed-form arithmetic (no simulation), pure Python plus numpy, and never
imports streamlit. The Accounting and Capacity pages and the ``account`` / ``capacity``
sub-commands of ``python -m allocator`` all call these functions, so they print the same figures.
The public names are re-exported here (``from allocator import accounting as acc;
acc.capacity(...)``); the modules follow the lesson:

* :mod:`~allocator.accounting.units` -- binary byte units (KiB, MiB, GiB) and their formatting;
* :mod:`~allocator.accounting.slots` -- reserve-max versus paged slot tallies, request lengths
  (reference figures R1 and R4);
* :mod:`~allocator.accounting.block_size` -- the best block size under a per-block metadata cost
  (R2);
* :mod:`~allocator.accounting.sharing` -- two requests sharing a prefix (R3);
* :mod:`~allocator.accounting.models` -- KV bytes per token from a model's shape, preset models
  (R5, R6 and the PagedAttention paper);
* :mod:`~allocator.accounting.kv_configs` -- KV bytes from a model's published config.json
  (``assets/model_configs/``), factor by factor: GQA, MLA, FP8 and sliding-window layers, and the
  sequences that fit each way (import its names from it);
* :mod:`~allocator.accounting.memory` -- how many sequences fit in a memory budget (R4, R5);
* :mod:`~allocator.accounting.report` -- every Accounting-page figure in one call.

Units: **tokens** (what a request has written), **slots** (room for one token's K and V across
all layers), **blocks** of ``block_size`` slots, and
**bytes**, always binary.

Errors: bad input raises :class:`allocator.common.validate.FieldError` (a ``ValueError``) whose
``.field`` is the input's name (``"lengths"``, ``"reserve"``, ...; a block size is reported as
``"block_size"``, the field the Accounting page's controls are keyed by) and, for an entry of a
list input, ``.index`` its 0-based position; a page shows it next to the control holding that
field, and ``.reworded(label)`` puts the control's label in place of the name.

Sources: the lesson's reference figures, ``assets/reference_figures.md`` sections R1-R6, and
Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180).
"""
from allocator.accounting.block_size import (DEFAULT_CANDIDATES, R2_CANDIDATES, BlockSizeRow, best_block_size,
                                             block_size_table, validate_candidates)
from allocator.accounting.memory import (CAPACITY_DEFAULTS, Capacity, capacity, fit_curve, gib_to_bytes,
                                         kv_pool_bytes, reserve_max_capacity, slot_pool_capacity)
from allocator.accounting.models import PRESETS, ModelConfig, kv_bytes_per_token, model_config
from allocator.accounting.report import ACCOUNT_DEFAULTS, R4_PRESET, account
from allocator.accounting.sharing import PrefixSharing, prefix_sharing
from allocator.accounting.slots import (PagedTally, ReserveTally, paged_slots, parse_lengths,
                                        reserve_max_slots, validate_lengths)
from allocator.common.formats import GIB, KIB, MIB, format_bytes
from allocator.accounting.units import bytes_in_units

__all__ = [
    "KIB", "MIB", "GIB", "format_bytes", "bytes_in_units",
    "validate_lengths", "parse_lengths", "ReserveTally", "reserve_max_slots",
    "PagedTally", "paged_slots",
    "DEFAULT_CANDIDATES", "R2_CANDIDATES", "validate_candidates", "BlockSizeRow",
    "block_size_table", "best_block_size",
    "PrefixSharing", "prefix_sharing",
    "kv_bytes_per_token", "ModelConfig", "PRESETS", "model_config",
    "CAPACITY_DEFAULTS", "gib_to_bytes", "kv_pool_bytes", "reserve_max_capacity", "Capacity", "capacity",
    "slot_pool_capacity", "fit_curve",
    "ACCOUNT_DEFAULTS", "R4_PRESET", "account",
]
