"""A prediction, before any GPU run, of the bandwidth each launch should reach on an H200.

Decode attention moves bytes and does little arithmetic, so its time is the bytes it reads over
the bandwidth it manages to draw. Two things cap that bandwidth, and the model takes the
smaller:

* **What the memory system delivers**: a plain device-to-device copy measured about 4.3 TB/s on
  the lent H200 (the data sheet's 4.8 TB/s is the nominal figure; nothing reaches it).
* **What the kernel keeps in flight** (Little's law: bandwidth = bytes in flight / latency):
  each resident program has ``num_stages - 1`` K+V tiles on their way when the compile record
  shows its loads going through ``cp.async`` (software pipelining), else one; the number of
  resident programs per SM follows from the compile record's registers, warps and shared memory
  (:func:`occupancy`); the latency under load is an assumption (:data:`ASSUMED_LATENCY_S`).

The grid is dealt to ``SMs x programs-per-SM`` slots in waves; every wave moves one stretch of
K/V per program at the rate the active programs can draw, and a split launch adds its partial
results (written and read again) and the reduction kernel's launch. Predicted bandwidth = the
bytes FlashInfer's benchmarks count (q, K, V read; output written) over the predicted time.

What the model cannot see, and the GPU run measures: DRAM page and TLB locality of scattered
blocks, L2 sector efficiency on short rows, instruction overhead of per-token address
arithmetic, clock behaviour. It therefore predicts paged ~ contiguous (they differ only by the
block table's 4 bytes per block); any measured gap beyond that is what paging really costs.
Every figure here is labelled a prediction wherever it is shown.

Sources: Little, "A proof for the queuing formula L = lambda W" (1961); NVIDIA CUDA C++
Programming Guide, "Technical Specifications per Compute Capability" (sm_90 limits); the H200
data sheet (132 SMs in the SXM part, 4.8 TB/s); the compile record ``assets/kernel_compile_sm90.json``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError
from kernels.attention.triton_kernels import LaunchConfig, choose_config, next_pow2

#: Assumed latency of a DRAM load under heavy load on Hopper (seconds). An assumption, not a
#: measurement: unloaded latency is lower, queueing raises it.
ASSUMED_LATENCY_S = 1.0e-6
#: Fixed cost of launching the split path's reduction kernel (seconds; assumed).
REDUCTION_LAUNCH_S = 3e-6


@dataclass(frozen=True)
class GpuFigures:
    """What the prediction knows about a GPU (bytes, seconds, counts).

    Attributes:
        name: e.g. "NVIDIA H200".
        sms: streaming multiprocessors.
        nominal_Bps: data-sheet memory bandwidth (bytes/s): the denominator of "% of peak".
        copy_Bps: bandwidth a plain device copy reached (bytes/s): the ceiling of the model.
        copy_source: where ``copy_Bps`` comes from.
        regs_per_sm, shared_per_sm, shared_reserved_per_program, max_warps_per_sm,
        max_programs_per_sm: sm_90 limits (CUDA programming guide).
    """

    name: str
    sms: int
    nominal_Bps: float
    copy_Bps: float
    copy_source: str
    regs_per_sm: int = 65536
    shared_per_sm: int = 228 * 1024
    shared_reserved_per_program: int = 1024
    max_warps_per_sm: int = 64
    max_programs_per_sm: int = 32


H200 = GpuFigures("NVIDIA H200", 132, 4.8e12, 4.3e12,
                  "a device-to-device copy on the lent H200 (issue 25), not measured by this lab")


def occupancy(registers: int, num_warps: int, shared_bytes: int, gpu: GpuFigures = H200) -> tuple[int, str]:
    """Programs one SM can hold, and what limits it ("registers", "shared memory", "warps").

    Registers are allocated per warp in units of 256 (8 per thread); each program also costs
    ``gpu.shared_reserved_per_program`` bytes of shared memory. At least 1 (a program that fits
    at all).
    """
    regs_per_warp = round_up(registers * 32, 256)
    limits = {
        "registers": gpu.regs_per_sm // max(1, regs_per_warp * num_warps),
        "shared memory": gpu.shared_per_sm // (shared_bytes + gpu.shared_reserved_per_program),
        "warps": gpu.max_warps_per_sm // num_warps,
        "programs per SM": gpu.max_programs_per_sm,
    }
    name = min(limits, key=lambda k: limits[k])
    return max(1, limits[name]), name


@dataclass(frozen=True)
class Prediction:
    """One launch's predicted behaviour (bytes, seconds, ratios); every field a model output.

    Attributes:
        programs_per_sm, limited_by: :func:`occupancy` of the attention kernel.
        grid, slots, waves: programs launched, resident at once (SMs x programs_per_sm), and
            the rounds needed.
        inflight_per_sm: K/V bytes the resident programs keep in flight on one SM.
        bound: "copy bandwidth" or "bytes in flight" (which cap the busiest wave hit).
        seconds: predicted time of the call.
        io_bytes: bytes counted (q, K, V read; output written).
        GBps: io_bytes / seconds / 1e9.
        fraction_of_nominal: GBps x 1e9 / the data-sheet bandwidth.
    """

    programs_per_sm: int
    limited_by: str
    grid: int
    slots: int
    waves: int
    inflight_per_sm: int
    bound: str
    seconds: float
    io_bytes: int
    GBps: float
    fraction_of_nominal: float


def predict(record_row: dict, num_seqs: int, seq_len: int, num_heads: int, num_kv_heads: int, head_dim: int,
            itemsize: int, cfg: LaunchConfig, gpu: GpuFigures = H200, latency_s: float = ASSUMED_LATENCY_S,
            table_bytes: int = 0) -> Prediction:
    """Predict one call from its attention kernel's compile record row (see the module docstring).

    Args:
        record_row: a row of ``assets/kernel_compile_sm90.json`` (``registers``, ``num_warps``,
            ``num_stages``, ``shared_bytes``, ``cp_async``) for the kernel the launch runs
            (``single_pass`` when ``cfg.num_splits == 1``, else ``split_kv``).
        num_seqs, seq_len, num_heads, num_kv_heads, head_dim, itemsize: the batch (every
            sequence ``seq_len`` tokens; itemsize in bytes).
        cfg: the launch (tile, splits).
        table_bytes: block-table bytes the call reads (0 for the contiguous kernel).

    Raises:
        FieldError (the size's name): a size below 1.
    """
    for name, value in (("num_seqs", num_seqs), ("seq_len", seq_len), ("num_kv_heads", num_kv_heads),
                        ("head_dim", head_dim), ("itemsize", itemsize)):
        if value < 1:
            raise FieldError(name, f" must be >= 1, got {value}")
    programs, limit = occupancy(record_row["registers"], record_row["num_warps"], record_row["shared_bytes"], gpu)
    tile_bytes = 2 * cfg.tile * head_dim * itemsize                     # one K and one V tile
    inflight_prog = (max(1, record_row["num_stages"] - 1) if record_row.get("cp_async") else 1) * tile_bytes
    grid = num_seqs * num_kv_heads * cfg.num_splits
    slots = gpu.sms * programs
    waves = cdiv(grid, slots)
    tokens_per_prog = min(seq_len, cfg.split_len)
    prog_bytes = tokens_per_prog * 2 * head_dim * itemsize + table_bytes / max(1, grid)   # K+V of one head
    full = min(grid, slots)
    bound = "bytes in flight" if inflight_prog / latency_s < gpu.copy_Bps / full else "copy bandwidth"
    seconds, left = 0.0, grid
    for _ in range(waves):
        active = min(left, slots)
        left -= active
        seconds += prog_bytes / min(inflight_prog / latency_s, gpu.copy_Bps / active)
    if cfg.num_splits > 1:
        head_dim_p = max(16, next_pow2(head_dim))
        partial = num_seqs * cfg.num_splits * num_heads * (head_dim_p * 4 + 8)
        seconds += 2 * partial / gpu.copy_Bps + REDUCTION_LAUNCH_S
    io = (2 * num_seqs * num_heads * head_dim + 2 * num_seqs * seq_len * num_kv_heads * head_dim) * itemsize
    gbps = io / seconds / 1e9
    return Prediction(programs, limit, grid, slots, waves, programs * inflight_prog, bound, seconds, io, gbps,
                      gbps * 1e9 / gpu.nominal_Bps)


def _find(report: dict, kernel: str, dtype: str, head_dim: int, group: int, block_size: int | None) -> dict | None:
    for r in report["results"]:
        if "error" in r or r["kernel"] != kernel or r["dtype"] != dtype or r["head_dim"] != head_dim \
                or r.get("group") != group:
            continue
        if (block_size is None and r.get("paged") is False) or (block_size is not None and r.get("paged")
                                                               and r["block_size"] == block_size):
            return r
    return None


def prediction_table(report: dict, num_seqs: int, seq_len: int, num_heads: int = 32, num_kv_heads: int = 8,
                     head_dim: int = 128, dtype: str = "bf16", block_sizes=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                     gpu: GpuFigures = H200, latency_s: float = ASSUMED_LATENCY_S) -> list[dict]:
    """One row per block size (and one for the contiguous kernel) at one shape, from the record.

    Row keys: ``block_size`` (None: contiguous), ``kernel``, ``registers``, ``num_warps``,
    ``num_stages``, ``shared_KiB``, ``cp_async``, ``num_splits``, the :class:`Prediction`
    fields, ``predicted_overhead`` (paged seconds / contiguous seconds; None for the contiguous
    row) and ``prediction`` (always True: these are model outputs). Block sizes whose kernel the
    record lacks are left out.
    """
    itemsize = 4 if dtype == "fp32" else 2
    cfg = choose_config(num_seqs, num_kv_heads, seq_len, head_dim, num_sms=gpu.sms, itemsize=itemsize,
                        num_heads=num_heads)
    kernel = "single_pass" if cfg.num_splits == 1 else "split_kv"
    group = num_heads // num_kv_heads
    rows = []
    contig = _find(report, kernel, dtype, head_dim, group, None)
    base = None
    if contig is not None:
        base = predict(contig, num_seqs, seq_len, num_heads, num_kv_heads, head_dim, itemsize, cfg, gpu, latency_s)
    for bs in (None, *block_sizes):
        row = contig if bs is None else _find(report, kernel, dtype, head_dim, group, bs)
        if row is None:
            continue
        table = 0 if bs is None else num_seqs * num_kv_heads * cdiv(seq_len, bs) * 4
        p = base if bs is None else predict(row, num_seqs, seq_len, num_heads, num_kv_heads, head_dim, itemsize,
                                            cfg, gpu, latency_s, table_bytes=table)
        rows.append({"block_size": bs, "kernel": kernel, "registers": row["registers"], "num_warps": row["num_warps"],
                     "num_stages": row["num_stages"], "shared_KiB": round(row["shared_bytes"] / 1024, 1),
                     "cp_async": bool(row.get("cp_async")), "num_splits": cfg.num_splits, **asdict(p),
                     "predicted_overhead": (p.seconds / base.seconds) if (bs is not None and base) else None,
                     "prediction": True})
    return rows
