"""``python -m kernels.sweep``: the block-size sweep from the command line (a table or JSON).

Runs :func:`kernels.sweep.run.sweep` on this machine's backend (or the one named), prints a table,
the verdict sentence and any warning, or the JSON of :meth:`kernels.sweep.run.SweepResult.to_json`;
``--out`` records a GPU result for the kernel page. Bad input exits 2 with one line on stderr.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path

from kernels.attention.backend import BACKENDS, detect
from allocator.common.errors import FieldError
from kernels.sweep.run import DEFAULT_BLOCK_SIZES, DEFAULT_BUDGET_S, HARD_LIMIT_S, sweep
from kernels.sweep.data import DTYPES, TINY_SHAPE, SweepShape, default_shape
from allocator.common.formats import format_bytes_decimal as format_bytes


def _int_list(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4], for argparse (an ArgumentTypeError names the text)."""
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
    p.add_argument("--dtype", choices=tuple(DTYPES))
    p.add_argument("--repeats", type=int, default=None,
                   help=f"timed pairs per block size (>= 3); default: chosen to fit {DEFAULT_BUDGET_S:.0f} s, "
                        f"then the sweep states the most it will take (at most {HARD_LIMIT_S:.0f} s) and keeps to it")
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
            raise FieldError("out", f" records GPU results but the backend is {name!r}; run on a CUDA "
                             "machine (or pass --allow-non-gpu for a test file)", subject="--out")

        def show(frac: float, msg: str) -> None:
            print(f"[{frac * 100:5.1f}%] {msg}", file=sys.stderr)

        res = sweep(args.block_sizes, shape, name, repeats=args.repeats, seed=args.seed, progress=show)
    except ValueError as exc:              # FieldError (names the input) or a bad shape
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
        print(res.verdict_text())
        bound = "at most " if m.get("estimate_is_bound") else ""
        print(f"took {m['wall_s']:.1f} s against an estimate of {bound}{m['estimate_s']:.1f} s")
        if args.out:
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
