"""SplitMix64, the 64-bit mixer behind the engine's block keys (``allocator.memory.block_hash``) and
the Mooncake reader's token ids (``allocator.workloads.mooncake``)."""
from __future__ import annotations

import numpy as np


#: 2**64 / golden ratio, odd: SplitMix64's increment.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on a uint64 array (Steele, Lea & Flood, OOPSLA 2014): a bijection
    that spreads nearby inputs over all 64 bits. Arithmetic wraps modulo 2**64."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
