"""The largest pool and the largest block any allocator accepts (slots).

One range for every allocator (:mod:`allocator.reserve_max`, :mod:`allocator.paged`), the CLI
and every page; :data:`allocator.limits.LIMITS` states it for ``total_slots`` and
``block_size``, and ``tests/core/test_pool_range.py`` runs pools at its top end.

Sources: Mooncake (Qin et al., FAST 2025) for prefix caches spanning GPU, host memory and disk,
which makes pools of 2**30 slots real; :mod:`allocator.block_pool` for why such a pool costs
only the blocks it uses.
"""
from __future__ import annotations

#: Largest block size accepted (slots).
MAX_BLOCK_SIZE = 4096
#: Largest pool simulated (slots), for every allocator, the CLI and every page
#: (``allocator.limits``): 2**30. Production prefix caches span GPU, host memory and disk
#: (Mooncake, FAST 2025), so pools this large are real; the block pool's memory grows with the
#: blocks used, not with the pool's size (``allocator.block_pool``), so they cost what they hold.
MAX_POOL_SLOTS = 1 << 30
