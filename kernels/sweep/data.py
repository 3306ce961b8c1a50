"""What the kernel sweep takes and gives: the shape it times, the result it returns, recorded results.

:class:`SweepShape` is the decode batch (with presets for a CPU, a GPU and tests);
:class:`SweepResult` holds one row per block size and the metadata that says what produced them
(backend, device, timer, date, versions); :func:`load_recorded` reads GPU sweeps recorded in
``assets/`` by ``python3 -m kernels.gpu_check``. The runner is :mod:`kernels.sweep.run`, the
statistics :mod:`kernels.sweep.stats`. Needs only torch (no numpy): the GPU check imports it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from allocator.common.errors import FieldError
from kernels.errors import read_json
from kernels.sweep.stats import CONFIDENCE, NO_DIFFERENCE, verdict_text

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass(frozen=True)
class SweepShape:
    """The decode batch swept: ``num_seqs`` sequences of ``seq_len`` tokens each.

    ``dtype`` is "float16", "bfloat16" or "float32". K+V bytes per call =
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
        return DTYPES[self.dtype]

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V one decode call reads (bytes)."""
        item = 4 if self.dtype == "float32" else 2
        return 2 * self.num_seqs * self.seq_len * self.num_kv_heads * self.head_dim * item

    def validate(self) -> None:
        """Check every field.

        Raises:
            FieldError (the field's name: ``num_seqs`` ... ``head_dim``, ``dtype``): a size that
                is not an integer >= 1, ``num_heads`` not a multiple of ``num_kv_heads``, or an
                unknown dtype.
        """
        for name in ("num_seqs", "seq_len", "num_heads", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise FieldError(name, f" must be an integer >= 1, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise FieldError("num_heads", f" ({self.num_heads}) must be a multiple of num_kv_heads "
                             f"({self.num_kv_heads})")
        if self.dtype not in DTYPES:
            raise FieldError("dtype", f" must be one of {tuple(DTYPES)}, got {self.dtype!r}")


#: CPU default: K+V = 67 MB per call, twice the 32 MiB L3 of the lab's machines (Llama-3-8B-like
#: heads; four sequences, not eight, so that nine block sizes with at least 3 timed pairs each fit
#: the 45 s budget on a 2-core machine shared by other work: with eight, a loaded machine took 127 s).
CPU_SHAPE = SweepShape(num_seqs=4, seq_len=2048, num_heads=32, num_kv_heads=8, head_dim=128, dtype="float32")
#: CUDA default: K+V = 1.07 GB per call, larger than any L2 cache (Llama-3-8B-like heads).
CUDA_SHAPE = SweepShape(num_seqs=64, seq_len=4096, num_heads=32, num_kv_heads=8, head_dim=128, dtype="bfloat16")
#: Long contexts on CUDA: 16 sequences x 16k tokens (K+V = 4.3 GB; 128 single-pass programs on a
#: 132-SM H200, so the split-KV path is what fills the GPU).
CUDA_LONG_SHAPE = SweepShape(num_seqs=16, seq_len=16384, num_heads=32, num_kv_heads=8, head_dim=128,
                             dtype="bfloat16")
#: Tiny: for tests, the page's quick option and the Triton interpreter.
TINY_SHAPE = SweepShape(num_seqs=2, seq_len=64, num_heads=4, num_kv_heads=2, head_dim=16, dtype="float32")


def default_shape(backend_name: str) -> SweepShape:
    """The default sweep shape for a backend name."""
    return {"cuda": CUDA_SHAPE, "torch-cpu": CPU_SHAPE}.get(backend_name, TINY_SHAPE)


@dataclass
class SweepResult:
    """Rows (one per block size) plus metadata saying what produced them.

    Row keys: ``block_size`` (slots), ``paged_s`` and ``contiguous_s`` (median latency, seconds),
    ``paged_ms``/``contiguous_ms`` (milliseconds), ``paged_ms_q1``/``paged_ms_q3`` and
    ``contiguous_ms_q1``/``contiguous_ms_q3`` (quartiles: the spread), ``overhead`` (median of
    the paired paged / contiguous ratios), ``overhead_ci_low``/``overhead_ci_high`` (its bootstrap
    interval; the rows' intervals hold at 95 % together), ``verdict`` ("slower", "faster" or
    "no measurable difference"),
    ``pairs`` (timed pairs), ``paged_GBps``/``contiguous_GBps`` (K+V bytes / median time, 1e9
    bytes per second), ``paged_peak_fraction`` (paged_GBps / device peak, None when the peak is
    unknown), ``max_abs_diff`` (paged vs contiguous output).

    Meta keys: ``backend``, ``device``, ``reason``, ``peak_GBps``, ``peak_source``, ``shape``
    (dict), ``kv_bytes``, ``llc_bytes`` (CPU last-level cache, None on CUDA or unknown),
    ``timer``, ``confidence`` (0.95, for the whole sweep), ``row_confidence`` (each row's
    level, Bonferroni), ``launch`` (the Triton launch shape, or None for torch),
    ``date`` (UTC ISO 8601), ``versions`` (dict), ``recorded`` (True when loaded from a file),
    ``warnings`` (list of str). A live sweep also has ``repeats`` (the count asked for, or "auto"),
    ``budget_s``, ``plan_s`` and ``estimate_s`` (its plan and the figure it stated, seconds),
    ``estimate_is_bound`` (True: the stated figure is an upper bound the sweep kept to, see
    :mod:`kernels.sweep.plan`), ``skipped`` (block sizes left out to keep to it) and ``wall_s``.
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
            FieldError (``text``, or ``rows`` with ``.index`` for a row): text is not JSON with
                "meta" (object) and "rows" (list of objects with block_size, paged_ms,
                contiguous_ms, overhead, its interval and verdict).
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FieldError("text", f" is not valid JSON: {exc}", subject="results file") from None
        if not isinstance(data, dict) or not isinstance(data.get("meta"), dict) \
                or not isinstance(data.get("rows"), list):
            raise FieldError("text", " must be a JSON object with 'meta' and 'rows'", subject="results file")
        need = ("block_size", "paged_ms", "contiguous_ms", "overhead", "overhead_ci_low", "overhead_ci_high",
                "verdict")
        for i, row in enumerate(data["rows"]):
            if not isinstance(row, dict) or any(k not in row for k in need):
                raise FieldError("rows", f" must have keys {need}", index=i)
        return cls(rows=data["rows"], meta=data["meta"])

    @property
    def measurable(self) -> bool:
        """True when at least one block size's interval excludes 1.0 (a real difference)."""
        return any(r["verdict"] != NO_DIFFERENCE for r in self.rows)

    def verdict_text(self) -> str:
        """One sentence on what the sweep can claim, with every number taken from the rows."""
        return verdict_text(self.rows, self.meta.get("confidence", CONFIDENCE),
                            simultaneous=self.meta.get("row_confidence", CONFIDENCE) > self.meta.get("confidence",
                                                                                                  CONFIDENCE))

    def table(self) -> str:
        """A fixed-width text table of the rows."""
        head = (f"{'block':>6} {'paged ms':>10} {'contig ms':>10} {'overhead':>9} {'interval':>15} "
                f"{'verdict':>24} {'paged GB/s':>11} {'of peak':>8}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            frac = r.get("paged_peak_fraction")
            ci = f"{r['overhead_ci_low']:.3f}-{r['overhead_ci_high']:.3f}"
            lines.append(f"{r['block_size']:>6} {r['paged_ms']:>10.4g} {r['contiguous_ms']:>10.4g} "
                         f"{r['overhead']:>9.3f} {ci:>15} {r['verdict']:>24} {r['paged_GBps']:>11.4g} "
                         f"{('%.0f%%' % (100 * frac)) if frac is not None else 'n/a':>8}")
        return "\n".join(lines)


def load_recorded(pattern: str = "kernel_gpu_*.json", assets: str | Path | None = None) -> list[SweepResult]:
    """Load recorded GPU sweeps from ``assets/``.

    Two file shapes are read: what ``python3 -m kernels.gpu_check`` writes
    (``kernel_gpu_check.json``: ``{"dry_run": false, "meta": ..., "correctness": [...], "sweeps":
    [{"meta": ..., "rows": [...]}, ...]}``; each sweep's meta names device, date and versions)
    and what ``python -m kernels.sweep --out`` writes (one ``{"meta", "rows"}``). A dry run's
    file (``"dry_run": true``, made on a CPU) is skipped: it is not a measurement.

    Returns:
        list of :class:`SweepResult` with ``meta["recorded"] = True`` and ``meta["file"]`` set,
        sorted by file name then order in the file; empty when no file matches.

    Raises:
        FieldError (``file``; the message starts with the file's name): a matching file is
            malformed or was not produced by the "cuda" backend.
    """
    folder = Path(assets) if assets else Path(__file__).resolve().parent.parent / "assets"
    out = []
    for path in sorted(folder.glob(pattern)):
        data = read_json(path)
        if isinstance(data, dict) and data.get("dry_run"):
            continue
        parts = data.get("sweeps") if isinstance(data, dict) and "sweeps" in data else [data]
        if not isinstance(parts, list) or not parts:
            raise FieldError("file", ": 'sweeps' must be a non-empty list", subject=path.name)
        for i, part in enumerate(parts):
            try:
                res = SweepResult.from_json(json.dumps(part))
            except ValueError as exc:
                where = f"sweeps[{i}]: " if len(parts) > 1 or "sweeps" in data else ""
                raise FieldError("file", f": {where}{exc}", subject=path.name) from None
            if res.meta.get("backend") != "cuda":
                raise FieldError("file", f": backend is {res.meta.get('backend')!r}, not 'cuda'", subject=path.name)
            res.meta["recorded"] = True
            res.meta["file"] = path.name
            out.append(res)
    return out
