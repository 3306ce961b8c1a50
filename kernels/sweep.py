"""Block-size sweep: what reading the KV cache through a block table costs the decode kernel.

For each block size (1, 2, 4 ... 256) the same tokens are paged into a randomly permuted block
pool and the decode kernel runs on it; the contiguous baseline runs the *same* function on the
same tokens stored one block per sequence. The ratio of the two median latencies is the gather
overhead -- the kernel-side cost of a page size, which the slack (memory waste) figures of the
allocator do not capture.

Timing: on CUDA ``triton.testing.do_bench`` (median; it clears the L2 cache between runs) with a
KV working set of at least 1 GB by default, so the L2 cache does not flatter the result; on CPU a
plain ``time.perf_counter`` loop (median of ``repeats`` after one warm-up call).

CLI::

    python -m kernels.sweep                      # auto backend, its default shape, prints a table
    python -m kernels.sweep --tiny               # seconds, tiny shape
    python -m kernels.sweep --out assets/kernel_gpu_results.json   # on a GPU: record results

Sources: Kwon et al., PagedAttention (SOSP 2023), section on kernel overhead of block size;
vLLM's paged-attention kernels for the cache layout.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

import kernels  # noqa: F401  (sets TRITON_INTERPRET before triton is imported on CPU)
from kernels.backend import BACKENDS, Backend, cpu_description, detect, versions
from kernels.paged_attention import page_tokens, paged_attention_torch, paged_attention_triton, validate_inputs

DEFAULT_BLOCK_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Above this many (token x KV head) pairs the interpreter backend refuses to time (far too slow).
INTERPRETER_LIMIT = 16_384


@dataclass(frozen=True)
class SweepShape:
    """The decode batch swept: ``num_seqs`` sequences of ``seq_len`` tokens each.

    ``dtype`` is "float16" or "float32". K+V bytes per call =
    2 x num_seqs x seq_len x num_kv_heads x head_dim x itemsize.
    """

    num_seqs: int
    seq_len: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float32"

    @property
    def torch_dtype(self) -> torch.dtype:
        """The torch dtype named by ``dtype``."""
        return {"float16": torch.float16, "float32": torch.float32}[self.dtype]

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V one decode call reads (bytes)."""
        item = 2 if self.dtype == "float16" else 4
        return 2 * self.num_seqs * self.seq_len * self.num_kv_heads * self.head_dim * item

    def validate(self) -> None:
        """Raise ValueError naming the field if a size is < 1, the head ratio is not whole or the
        dtype is unknown."""
        for name in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads})")
        if self.dtype not in ("float16", "float32"):
            raise ValueError(f"dtype must be 'float16' or 'float32', got {self.dtype!r}")


#: CPU default: a few seconds per block size on 2 cores (K+V = 64 MiB per call).
CPU_SHAPE = SweepShape(num_seqs=8, seq_len=1024, num_heads=32, num_kv_heads=8, head_dim=128, dtype="float32")
#: CUDA default: K+V = 1.07 GB per call, larger than any L2 cache (Llama-3-8B-like heads).
CUDA_SHAPE = SweepShape(num_seqs=64, seq_len=4096, num_heads=32, num_kv_heads=8, head_dim=128, dtype="float16")
#: Tiny: for tests, the page's quick option and the Triton interpreter.
TINY_SHAPE = SweepShape(num_seqs=2, seq_len=64, num_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")


def default_shape(backend_name: str) -> SweepShape:
    """The default sweep shape for a backend name."""
    return {"cuda": CUDA_SHAPE, "torch-cpu": CPU_SHAPE}.get(backend_name, TINY_SHAPE)


@dataclass
class SweepResult:
    """Rows (one per block size) plus metadata saying what produced them.

    Row keys: ``block_size`` (slots), ``paged_s`` and ``contiguous_s`` (median latency, seconds),
    ``paged_ms``/``contiguous_ms`` (milliseconds), ``overhead`` (paged / contiguous latency: on
    CUDA the ratio of the medians, on CPU the median of back-to-back pair ratios),
    ``paged_GBps``/``contiguous_GBps`` (K+V bytes / time, 1e9 bytes per second),
    ``paged_peak_fraction`` (paged_GBps / device peak, None when the peak is unknown),
    ``max_abs_diff`` (paged vs contiguous output).

    Meta keys: ``backend``, ``device``, ``reason``, ``peak_GBps``, ``peak_source``, ``shape``
    (dict), ``kv_bytes``, ``timer``, ``date`` (UTC ISO 8601), ``versions`` (dict), ``recorded``
    (True when loaded from a file), ``warnings`` (list of str).
    """

    rows: list[dict] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def to_json(self) -> str:
        """Serialise rows and meta as indented JSON."""
        return json.dumps({"meta": self.meta, "rows": self.rows}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> "SweepResult":
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: text is not JSON with "meta" (object) and "rows" (list of objects with
                block_size, paged_ms, contiguous_ms, overhead).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"results file is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) \
                or not isinstance(data.get("rows"), list):
            raise ValueError("results file must be a JSON object with 'meta' and 'rows'")
        need = ("block_size", "paged_ms", "contiguous_ms", "overhead")
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict) or any(k not in row for k in need):
                raise ValueError(f"rows[{i}] must have keys {need}")
        return cls(rows=data["rows"], meta=data["meta"])

    def table(self) -> str:
        """A fixed-width text table of the rows."""
        head = (f"{'block':>6} {'paged ms':>10} {'contig ms':>10} {'overhead':>9} "
                f"{'paged GB/s':>11} {'contig GB/s':>12} {'of peak':>8}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            frac = r.get("paged_peak_fraction")
            lines.append(f"{r['block_size']:>6} {r['paged_ms']:>10.4g} {r['contiguous_ms']:>10.4g} "
                         f"{r['overhead']:>9.3f} {r['paged_GBps']:>11.4g} {r['contiguous_GBps']:>12.4g} "
                         f"{('%.0f%%' % (100 * frac)) if frac is not None else 'n/a':>8}")
        return "\n".join(lines)


def format_bytes(n: float) -> str:
    """``n`` bytes as e.g. "67.1 MB", "1.07 GB" or "16.4 kB" (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def _dense_tokens(shape: SweepShape, device: str, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = shape.torch_dtype
    q = torch.randn(shape.num_seqs, shape.num_heads, shape.head_dim, generator=gen, device=device, dtype=dt)
    kv_shape = (shape.num_seqs, shape.seq_len, shape.num_kv_heads, shape.head_dim)
    k = torch.randn(kv_shape, generator=gen, device=device, dtype=dt)
    v = torch.randn(kv_shape, generator=gen, device=device, dtype=dt)
    lens = torch.full((shape.num_seqs,), shape.seq_len, dtype=torch.int32, device=device)
    return q, k, v, lens


def _timer(backend: str, repeats: int) -> tuple[Callable[..., tuple[float, float, float]], str]:
    """Return ``(time_pair, description)``; ``time_pair(fn_a, fn_b)`` gives ``(a_s, b_s, ratio)``:
    the median seconds of one call of each and the ratio a/b.

    On CPU the calls alternate (a, b, a, b ...) and the ratio is the median of the per-pair
    ratios, so that load from other processes on a shared machine hits both sides alike. On CUDA
    the ratio is the ratio of the two medians."""
    if backend == "cuda":
        import triton.testing

        def pair_cuda(fn_a: Callable[[], object], fn_b: Callable[[], object]) -> tuple[float, float]:
            a = triton.testing.do_bench(fn_a, warmup=25, rep=100, return_mode="median")
            b = triton.testing.do_bench(fn_b, warmup=25, rep=100, return_mode="median")
            return float(a) / 1e3, float(b) / 1e3, float(a) / float(b)
        return pair_cuda, ("triton.testing.do_bench, median (warm-up 25 ms, 100 ms of runs, "
                           "L2 cache cleared before each run)")

    def pair_cpu(fn_a: Callable[[], object], fn_b: Callable[[], object]) -> tuple[float, float, float]:
        fn_a()                                                 # warm-up
        fn_b()
        sa, sb = [], []
        for _ in range(repeats):
            for fn, samples in ((fn_a, sa), (fn_b, sb)):
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
        ratio = statistics.median(a / b for a, b in zip(sa, sb))
        return statistics.median(sa), statistics.median(sb), ratio
    return pair_cpu, (f"time.perf_counter, median of {repeats} calls each after 1 warm-up call, "
                      "paged and contiguous calls alternating; overhead = median of the per-pair ratios")


def sweep(block_sizes: tuple[int, ...] | list[int] = DEFAULT_BLOCK_SIZES, shape: SweepShape | None = None,
          backend: str | None = None, repeats: int = 15, seed: int = 0,
          progress: Callable[[float, str], None] | None = None) -> SweepResult:
    """Time paged vs contiguous decode for each block size.

    Args:
        block_sizes: slots per block to try (each >= 1).
        shape: the decode batch; default :func:`default_shape` for the backend.
        backend: "cuda", "torch-cpu" or "triton-interpreter"; default ``detect("sweep").name``.
        repeats: timed calls per measurement on CPU backends (the median is kept).
        seed: RNG seed for tokens and block permutations.
        progress: optional callback ``progress(fraction_done in [0, 1], message)``.

    Returns:
        :class:`SweepResult` (see its docstring for the row and meta keys; times in seconds and
        milliseconds, bandwidth in GB/s = 1e9 bytes/s of K and V read).

    Raises:
        ValueError: a block size < 1, an invalid shape (field named), an unknown backend, "cuda"
            without a GPU, ``repeats`` < 1, or a shape too large for the Triton interpreter.
    """
    auto = detect("sweep")
    name = backend or auto.name
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "cuda" and auto.name != "cuda":
        raise ValueError(f"backend 'cuda' is not available here: {auto.reason}")
    sizes = [int(b) for b in block_sizes]
    if not sizes or min(sizes) < 1:
        raise ValueError(f"block_sizes must be a non-empty list of integers >= 1, got {list(block_sizes)}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    shape = shape or default_shape(name)
    shape.validate()
    if name == "triton-interpreter" and shape.num_seqs * shape.seq_len * shape.num_kv_heads > INTERPRETER_LIMIT:
        raise ValueError(f"shape is too large for backend 'triton-interpreter' (num_seqs x seq_len x "
                         f"num_kv_heads must be <= {INTERPRETER_LIMIT}); use the tiny shape")
    info = auto if name == auto.name else Backend(name, cpu_description(), "chosen explicitly")
    device = "cuda" if name == "cuda" else "cpu"
    run = paged_attention_torch if name == "torch-cpu" else paged_attention_triton
    time_pair, timer_desc = _timer(name, repeats)
    warnings: list[str] = []
    if name == "cuda" and shape.kv_bytes < 1e9:
        warnings.append(f"K+V working set is {shape.kv_bytes / 1e9:.2f} GB (< 1 GB): the L2 cache may "
                        "flatter the bandwidth")

    def report(frac: float, msg: str) -> None:
        if progress is not None:
            progress(min(1.0, max(0.0, frac)), msg)

    q, k_dense, v_dense, lens = _dense_tokens(shape, device, seed)
    contig_tables = torch.arange(shape.num_seqs, dtype=torch.int32, device=device).reshape(-1, 1)
    contig_args = (q, k_dense, v_dense, contig_tables, lens)
    validate_inputs(*contig_args)
    contig_out = run(*contig_args, validate=False)
    perm_gen = torch.Generator().manual_seed(seed + 1)
    rows = []
    for i, bs in enumerate(sizes):
        report(i / len(sizes), f"block size {bs}: paging {shape.num_seqs} x {shape.seq_len} tokens")
        k_cache, v_cache, tables = page_tokens(k_dense, v_dense, lens, bs, generator=perm_gen)
        paged_args = (q, k_cache, v_cache, tables, lens)
        validate_inputs(*paged_args)
        paged_out = run(*paged_args, validate=False)
        diff = float((paged_out.float() - contig_out.float()).abs().max())
        report((i + 0.3) / len(sizes), f"block size {bs}: timing paged and contiguous")
        paged_s, contig_s, ratio = time_pair(lambda a=paged_args: run(*a, validate=False),
                                             lambda: run(*contig_args, validate=False))
        row = {
            "block_size": bs,
            "paged_s": paged_s, "contiguous_s": contig_s,
            "paged_ms": paged_s * 1e3, "contiguous_ms": contig_s * 1e3,
            "overhead": ratio,
            "paged_GBps": shape.kv_bytes / paged_s / 1e9,
            "contiguous_GBps": shape.kv_bytes / contig_s / 1e9,
            "paged_peak_fraction": (shape.kv_bytes / paged_s / info.peak_bandwidth) if info.peak_bandwidth else None,
            "max_abs_diff": diff if math.isfinite(diff) else float("inf"),
        }
        rows.append(row)
        del k_cache, v_cache, tables, paged_args, paged_out
        if device == "cuda":
            torch.cuda.empty_cache()
    report(1.0, "done")
    meta = {
        "backend": name, "device": info.device, "reason": info.reason,
        "peak_GBps": info.peak_bandwidth / 1e9 if info.peak_bandwidth else None,
        "peak_source": info.peak_source, "shape": asdict(shape), "kv_bytes": shape.kv_bytes,
        "timer": timer_desc, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(), "recorded": False, "warnings": warnings,
    }
    return SweepResult(rows=rows, meta=meta)


def load_recorded(pattern: str = "kernel_gpu_results*.json", assets: str | Path | None = None) -> list[SweepResult]:
    """Load recorded GPU sweeps from ``assets/`` (files written by ``--out`` on a GPU).

    Returns:
        list of :class:`SweepResult` with ``meta["recorded"] = True`` and ``meta["file"]`` set,
        sorted by file name; empty when no file matches.

    Raises:
        ValueError: a matching file is malformed or was not produced by the "cuda" backend
            (message names the file).
    """
    folder = Path(assets) if assets else Path(__file__).resolve().parent.parent / "assets"
    out = []
    for path in sorted(folder.glob(pattern)):
        try:
            res = SweepResult.from_json(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{path.name}: {exc}") from None
        if res.meta.get("backend") != "cuda":
            raise ValueError(f"{path.name}: backend is {res.meta.get('backend')!r}, not 'cuda'")
        res.meta["recorded"] = True
        res.meta["file"] = path.name
        out.append(res)
    return out


def bench(quick: bool = True) -> dict:
    """Small entry point for the benchmark harness: a correctness check plus a short sweep.

    Args:
        quick: True -> tiny shape, block sizes (1, 16, 256), 3 repeats (a few seconds on CPU);
            False -> the backend's default shape and all of :data:`DEFAULT_BLOCK_SIZES`.

    Returns:
        dict with ``backend``, ``device``, ``check_max_abs_error``, ``check_passed``,
        ``check_seconds`` and ``sweep`` (list of row dicts as in :class:`SweepResult`) and
        ``sweep_seconds`` (wall time of the sweep, seconds).
    """
    from kernels.paged_attention import check_correctness

    chk = check_correctness()
    t0 = time.perf_counter()
    if quick:
        res = sweep(block_sizes=(1, 16, 256), shape=TINY_SHAPE if detect().name != "cuda" else None, repeats=3)
    else:
        res = sweep()
    return {"backend": res.meta["backend"], "device": res.meta["device"],
            "check_backend": chk["backend"], "check_max_abs_error": chk["max_abs_error"],
            "check_passed": chk["passed"], "check_seconds": chk["seconds"],
            "sweep": res.rows, "sweep_seconds": time.perf_counter() - t0}


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    """CLI: run a sweep, print a table (or JSON), optionally write it with ``--out``.

    Exit status 0 on success, 2 on bad input (one-line message on stderr, no traceback).
    """
    p = argparse.ArgumentParser(prog="python -m kernels.sweep",
                                description="Paged vs contiguous decode attention latency over block sizes.")
    p.add_argument("--backend", choices=BACKENDS, help="default: detected (cuda, else torch-cpu)")
    p.add_argument("--block-sizes", type=_int_list, default=list(DEFAULT_BLOCK_SIZES),
                   help="comma-separated, default 1,2,4,...,256")
    p.add_argument("--tiny", action="store_true", help="use the tiny shape (seconds)")
    for name in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim"):
        p.add_argument("--" + name.replace("_", "-"), type=int, help="override the default shape")
    p.add_argument("--dtype", choices=("float16", "float32"))
    p.add_argument("--repeats", type=int, default=15, help="timed calls per point on CPU (median kept)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--out", help="write the result as JSON (recorded GPU results: needs the cuda backend)")
    p.add_argument("--allow-non-gpu", action="store_true", help="let --out write a non-GPU result (testing)")
    args = p.parse_args(argv)
    try:
        name = args.backend or detect("sweep").name
        base = TINY_SHAPE if args.tiny else default_shape(name)
        over = {k: getattr(args, k) for k in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim", "dtype")
                if getattr(args, k) is not None}
        shape = SweepShape(**{**asdict(base), **over})
        if args.out and name != "cuda" and not args.allow_non_gpu:
            raise ValueError(f"--out records GPU results but the backend is {name!r}; "
                             "run on a CUDA machine (or pass --allow-non-gpu for a test file)")

        def show(frac: float, msg: str) -> None:
            print(f"[{frac * 100:5.1f}%] {msg}", file=sys.stderr)

        res = sweep(args.block_sizes, shape, name, repeats=args.repeats, seed=args.seed, progress=show)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(res.to_json() + "\n", encoding="utf-8")
    if args.json:
        print(res.to_json())
    else:
        m = res.meta
        print(f"backend: {m['backend']}   device: {m['device']}")
        print(f"shape: {m['shape']}   K+V per call: {format_bytes(m['kv_bytes'])}")
        print(f"timer: {m['timer']}")
        if m["peak_GBps"]:
            print(f"peak bandwidth: {m['peak_GBps']:.0f} GB/s ({m['peak_source']})")
        for w in m["warnings"]:
            print(f"warning: {w}")
        print(res.table())
        if args.out:
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
