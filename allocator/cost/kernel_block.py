"""The attention kernel's cost against block size, as a term added to a step's roofline.

The roofline (:mod:`allocator.cost.roofline`) reads every decoding token's K and V at full HBM
bandwidth whatever the block size. A real paged kernel is slower with small blocks (the
PagedAttention paper, Kwon et al., SOSP 2023, section 7.2 and Figure 18: small blocks cannot use
the GPU's parallelism for reading and processing the KV cache). :class:`KernelBlockClock` adds
``(factor - 1) x decode KV bytes / HBM bandwidth`` to each step, ``factor`` being the kernel's time
at this block size over the contiguous kernel's. The factors are read from
``assets/kernel_block_cost.json`` (:func:`kernel_block_factors`): the lab's own kernel
measurements where they are recorded, else its labelled prediction (``"source"`` says which).
This package never imports ``kernels/``; a test holds the file to the prediction.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from allocator.common.errors import FieldError
from allocator.common.paths import ASSETS
from allocator.cost.roofline import CostModel, kv_bytes

KERNEL_BLOCK_FILE = os.path.join(ASSETS, "kernel_block_cost.json")


def kernel_block_factors(path: str = KERNEL_BLOCK_FILE) -> dict:
    """The kernel's cost against block size.

    Returns:
        {"source": "measured" | "prediction", "factor": {block size (int): paged / contiguous time}, "what",
        "shape"} as the file holds them.

    Raises:
        FieldError (``kernel_block_cost``): the file is missing, not JSON, or a factor is below 1.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        factors = {int(k): float(v) for k, v in data["factor"].items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise FieldError("kernel_block_cost", f": {path} cannot be read ({exc})") from None
    if any(v < 1 for v in factors.values()):
        raise FieldError("kernel_block_cost", f": a factor below 1 in {path}")
    return {**data, "factor": factors}


@dataclass(frozen=True)
class KernelBlockClock:
    """A seconds clock for :func:`allocator.engine.simulate.simulate`: ``cost``'s step time at
    ``block_size`` plus the kernel's extra time at that block size.

    Args:
        cost: the roofline cost model.
        block_size: slots per block (also the swap copies' block size).
        factor: the attention kernel's time at ``block_size`` over the contiguous kernel's (>= 1).

    Raises:
        FieldError (``factor``): below 1.
    """

    cost: CostModel
    block_size: int
    factor: float = 1.0

    def __post_init__(self):
        if not self.factor >= 1:
            raise FieldError("factor", f" must be >= 1 (the kernel's time over the contiguous kernel's), got {self.factor}")

    def kernel_extra_s(self, decode_pairs) -> float:
        """Seconds the kernel spends beyond the roofline on ``decode_pairs`` decode K/V reads."""
        return (self.factor - 1) * kv_bytes(self.cost.model, decode_pairs) / self.cost.hbm_bytes_per_s

    def step_seconds(self, prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks) -> float:
        """Seconds of one step: the roofline's (with swap copies) plus :meth:`kernel_extra_s`."""
        return (self.cost.step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks,
                                       self.block_size) + self.kernel_extra_s(decode_pairs))

    def pricer(self):
        """:meth:`step_seconds` as one plain function, for the engine's loop (it prices every step):
        the roofline's :meth:`allocator.cost.roofline.BoundCostModel.pricer` plus :meth:`kernel_extra_s`
        with the model's KV bytes per token read once, not validated again every step (the section 7
        ablations spent most of their time there). The same arithmetic in the same order, so the same
        floats (``tests/core/test_paper.py`` checks it against :meth:`step_seconds`)."""
        inner = self.cost.for_blocks(self.block_size).pricer()
        extra, per_token, bandwidth = self.factor - 1, self.cost.model.bytes_per_token, self.cost.hbm_bytes_per_s

        def step_seconds(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks) -> float:
            return (inner(prefill_tokens, prefill_pairs, decode_tokens, decode_pairs, swapped_blocks)
                    + extra * (per_token * decode_pairs) / bandwidth)
        return step_seconds
