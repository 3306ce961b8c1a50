"""The PagedAttention paper's section 7 ablations, run again: block size (Figure 18b) and
recompute against swap (Figure 19), on the replication's set-up (:mod:`allocator.studies.paper`).

* **Figure 19a** (a microbenchmark, the artifact's ``benchmark/benchmark_swap.py`` and
  ``benchmark_recomp.py``): the time to swap 256 tokens of OPT-13B's KV cache out and in, at each
  block size (256 / block size blocks), against the time to recompute them (a prefill of 256
  tokens). Swap pays per block ``2 x layers`` PCIe copies, each with a fixed latency
  (:data:`allocator.cost.roofline.DEFAULT_TRANSFER_LATENCY_S`), so small blocks are slow; the
  same without that latency shows what the latency alone does. Recompute does not depend on the
  block size. :func:`swap_vs_recompute` returns both curves and the crossover.
* **Figures 18b and 19b** (end to end, the artifact's ``experiments/fig19-b.sh``): vLLM on
  ShareGPT at 2.01 requests/s (the paper's rate scale, x the replication's load scale) for 600 s,
  at block sizes 1 to 256, with recompute and with swap preemption, over several arrival seeds.
  The attention kernel's cost against block size is added to every step
  (:class:`allocator.cost.kernel_block.KernelBlockClock`) from the factors the caller passes:
  the lab's measured kernel sweep where one is recorded, else its prediction. These runs use the
  classroom scheduler (swap needs it: :class:`allocator.engine.v1.V1Rules` recomputes only), so
  without the 2023 caps.

Nothing is fitted: the transfer latency, the kernel factors and the load scale are set before
and apart from what they are compared with. The paper's results are quoted qualitatively in
:data:`PAPER_ABLATIONS` (its figures print no numbers this lab can quote exactly).
"""
from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field

from allocator.common.errors import FieldError
from allocator.cost.kernel_block import KernelBlockClock
from allocator.cost.roofline import CostModel
from allocator.cost.timing import price
from allocator.engine.simulate import simulate
from allocator.memory.paged import PagedAllocator
from allocator.studies.paper import PAPER_POOL_SLOTS, load_scale, paper_cost, paper_workload, run_all, spread

#: The block sizes the artifact sweeps (experiments/fig18-b.sh, fig19-a.sh, fig19-b.sh).
BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Tokens swapped or recomputed in the microbenchmark (benchmark_swap.py: 256 // block size blocks).
MICRO_TOKENS = 256
#: The end-to-end runs: the paper's rate scale (fig19-b.sh: 2.01 requests/s) and duration (600 s).
E2E_RATE = 2.01
E2E_DURATION_S = 600.0
#: Arrival seeds of the end-to-end spreads.
E2E_SEEDS = (0, 1, 2)
#: The paper's results (Kwon et al., SOSP 2023, section 7.2-7.3, Figures 18b and 19), as it states them.
PAPER_ABLATIONS = {
    "fig18b": {"best_block_sizes": (16, 128), "dataset": "ShareGPT",
               "said": "block sizes 16 to 128 give the best performance on ShareGPT; smaller blocks cannot use "
                       "the GPU's parallelism in the kernel, larger ones waste memory (section 7.2)"},
    "fig19": {"comparable_block_sizes": (16, 64),
              "said": "swapping with small blocks is slow (many small PCIe transfers) and recompute's cost does "
                      "not depend on the block size, so recompute wins for small blocks; for blocks of 16 to 64 "
                      "the two perform comparably end to end (section 7.3)"},
}


def swap_vs_recompute(cost: CostModel | None = None, tokens: int = MICRO_TOKENS,
                      block_sizes=BLOCK_SIZES) -> dict:
    """Figure 19a on the roofline: seconds to swap ``tokens`` tokens out and in, and to recompute them.

    Args:
        cost: the cost model (default the paper's OPT-13B on an A100-40GB).
        tokens: tokens moved or recomputed (>= 1; default 256, the artifact's).
        block_sizes: block sizes (slots), each >= 1.

    Returns:
        {"block_sizes": [...], "swap_out_in_s": [out + in, per block size], "swap_no_latency_s": [the
        same with no per-transfer latency], "recompute_s": one prefill of ``tokens`` tokens (s, the
        roofline without the step's fixed overhead), "transfers_per_block", "transfer_latency_s",
        "crossover": the smallest block size whose swap (out + in) is no slower than recompute, or None}.

    Raises:
        FieldError (``tokens``, ``block_sizes``): a count below 1.
    """
    cost = cost or paper_cost()
    if tokens < 1:
        raise FieldError("tokens", f" must be >= 1, got {tokens}")
    if not block_sizes or min(block_sizes) < 1:
        raise FieldError("block_sizes", f" must be block sizes >= 1, got {block_sizes!r}")
    free = dataclasses.replace(cost, transfer_latency_s=0.0)
    swap, bare = [], []
    for bs in block_sizes:
        blocks = -(-tokens // bs)
        swap.append(2 * float(cost.swap_seconds(blocks, bs)))
        bare.append(2 * float(free.swap_seconds(blocks, bs)))
    compute_s, memory_s = cost.roofline(tokens, tokens * (tokens + 1) // 2, 0)
    recompute = float(max(compute_s, memory_s))
    cross = next((bs for bs, s in zip(block_sizes, swap) if s <= recompute), None)
    return {"block_sizes": list(block_sizes), "swap_out_in_s": swap, "swap_no_latency_s": bare,
            "recompute_s": recompute, "tokens": tokens, "transfers_per_block": 2 * cost.model.layers,
            "transfer_latency_s": cost.transfer_latency_s, "crossover": cross}


@dataclass
class Ablations:
    """What :func:`ablations` returns.

    Attributes:
        micro: :func:`swap_vs_recompute`'s dict.
        e2e: {"recompute" | "swap": {block size: :func:`allocator.studies.paper.spread` of the normalised
            latency (s/token) over ``seeds``}}.
        kernel: {"source": "measured" | "prediction", "factor": {block size: factor}, ...}: the kernel's
            cost against block size the runs used.
        scale, rate, seeds, seconds: the load scale (x), this model's rate (requests/s), the seeds,
            the wall time (s).
    """

    micro: dict
    kernel: dict
    scale: float
    rate: float
    seeds: tuple
    e2e: dict = field(default_factory=dict)
    seconds: float = 0.0

    def best(self, mode: str = "recompute", within: float = 0.10) -> list[int]:
        """Block sizes whose mean latency is within ``within`` (a fraction) of the lowest, ``mode`` preemption."""
        means = {bs: v["mean"] for bs, v in self.e2e[mode].items()}
        low = min(means.values())
        return [bs for bs, m in means.items() if m <= low * (1 + within)]

    def swap_over_recompute(self) -> dict:
        """{block size: mean swap latency / mean recompute latency} end to end."""
        return {bs: self.e2e["swap"][bs]["mean"] / self.e2e["recompute"][bs]["mean"] for bs in self.e2e["swap"]}

    def to_dict(self) -> dict:
        """JSON-ready, with the paper's statements beside."""
        return {"paper": PAPER_ABLATIONS, "kernel": self.kernel, "scale": self.scale, "rate": self.rate,
                "paper_rate": E2E_RATE, "duration_s": E2E_DURATION_S, "seeds": list(self.seeds),
                "fig19a": self.micro,
                "e2e": {m: {str(bs): v for bs, v in d.items()} for m, d in self.e2e.items()},
                "best_block_sizes_recompute": self.best("recompute"),
                "swap_over_recompute": {str(k): v for k, v in self.swap_over_recompute().items()},
                "seconds": self.seconds}


def e2e_latency(args: tuple) -> float:
    """One end-to-end run of Figures 18b and 19b: ``args`` = (preemption mode, block size, seed, rate on this
    model's clock, the kernel's cost factor at that block size); vLLM (paged, the classroom scheduler) on
    :data:`E2E_DURATION_S` of ShareGPT arrivals, each step priced with the kernel's factor
    (:class:`allocator.cost.kernel_block.KernelBlockClock`). Returns the normalised latency (s/token)."""
    mode, bs, sd, rate, factor = args
    cost = paper_cost()
    res = simulate(paper_workload(rate, E2E_DURATION_S, sd), PagedAllocator(PAPER_POOL_SLOTS, bs, preemption=mode),
                   record_snapshots=False, clock=KernelBlockClock(cost, bs, factor))
    return price(res, cost).summary["normalized_latency_s_per_token"]


def ablations(kernel: dict, *, scale: float | None = None, seeds=E2E_SEEDS, block_sizes=BLOCK_SIZES,
              progress=None, workers: int = 1) -> Ablations:
    """Figures 18b, 19a and 19b (see the module docstring).

    Args:
        kernel: {"source", "factor": {block size: kernel time / contiguous kernel time}} (e.g.
            :func:`allocator.cost.kernel_block.kernel_block_factors`); a block size it lacks costs 1.
        scale: the load scale (default :func:`allocator.studies.paper.load_scale`'s).
        seeds: arrival seeds (at least one).
        block_sizes: block sizes to run.
        progress: ``progress(done, total, text)`` after each (mode, block size).
        workers: processes for the runs (:func:`allocator.studies.paper.run_all`; the same values for any count).

    Raises:
        FieldError (``seeds``): no seed; (``workers``): out of range.
    """
    seeds = tuple(seeds)
    if not seeds:
        raise FieldError("seeds", " must name at least one arrival seed")
    t0 = time.perf_counter()
    cost = paper_cost()
    scale = scale if scale is not None else load_scale(cost)["scale"]
    rate = E2E_RATE * scale
    out = Ablations(micro=swap_vs_recompute(cost, block_sizes=block_sizes), kernel=kernel, scale=scale, rate=rate,
                    seeds=seeds)
    tasks = [(mode, bs, sd, rate, kernel["factor"].get(bs, 1.0)) for mode in ("recompute", "swap")
             for bs in block_sizes for sd in seeds]
    # one progress tick per (mode, block size): after its last seed
    per = len(seeds)
    tell = None if progress is None else (
        lambda done, total: progress(done // per, total // per, f"block size {tasks[done - 1][1]}, "
                                                              f"{tasks[done - 1][0]}") if done % per == 0 else None)
    values = run_all(e2e_latency, tasks, workers, tell)
    for i, (mode, bs, sd, *_) in enumerate(tasks):
        out.e2e.setdefault(mode, {}).setdefault(bs, []).append(values[i])
    for mode in out.e2e:
        out.e2e[mode] = {bs: spread(lat) for bs, lat in out.e2e[mode].items()}
    out.seconds = time.perf_counter() - t0
    return out


_MEMO: dict = {}
_LOCK = threading.Lock()


def ablations_for(kernel: dict, progress=None) -> Ablations:
    """:func:`ablations` with the default scale and seeds, once per process per kernel source."""
    key = (kernel.get("source"), tuple(sorted(kernel["factor"].items())))
    with _LOCK:
        if key not in _MEMO:
            _MEMO[key] = ablations(kernel, progress=progress)
        return _MEMO[key]
