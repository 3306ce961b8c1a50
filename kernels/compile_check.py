"""Compile the paged-attention kernels for an H200 (sm_90) on a machine without a GPU.

Triton can compile ahead of time for a named target: ``triton.compile`` on an ``ASTSource`` with
``GPUTarget("cuda", 90, 32)`` runs the whole pipeline (Triton IR -> LLVM -> PTX -> ptxas ->
cubin) with no GPU present. This module does that for every combination the lab claims works --
fp16 and bf16, head_dim 64 and 128, block sizes 1, 8, 16, 24, 32, 64, 128 and 256, the single
pass, the split-KV pass and its reduction -- with the launch shape :func:`default_tiling` gives,
and reads what the hardware would have to provide:

* registers per thread and the stack frame, from the cubin (``cuobjdump -res-usage``);
* bytes of register spill stores and loads, from ``ptxas -v`` on the same PTX for the same
  architecture (the ptxas Triton itself uses for sm_90);
* shared memory per program (Triton's own figure, bytes).

A spill means the kernel's working set did not fit in registers and goes through local memory
(slow); the check requires none. Run it as ``python -m kernels.compile_check [-o FILE]``; it must
run in a process that has not imported Triton in interpreter mode, so it sets
``TRITON_INTERPRET=0`` before importing Triton (the test runs it in a subprocess). The result
is ``assets/kernel_compile_sm90.json``, which the kernel page shows.

Exit status: 0 when every combination compiled without spills; 1 when one spilled or failed;
3 when this Triton build has no CUDA backend (nothing was checked).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
BLOCK_SIZES = (1, 8, 16, 24, 32, 64, 128, 256)
#: Query heads per KV head in the checked shape (Llama-3-8B: 32 query heads over 8 KV heads).
GROUP = 4
#: Splits in the checked split-KV shape (the reduction's loop length; any value compiles alike).
NUM_SPLITS = 8
#: The H200's compute capability and warp size.
TARGET = ("cuda", 90, 32)
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "assets" / "kernel_compile_sm90.json"
#: Exit status when the Triton build cannot compile for CUDA.
EXIT_NO_CUDA_BACKEND = 3


def _signature(fn, consts: dict, ptr_types: dict) -> dict:
    """Triton type strings for every parameter of a jitted kernel (pointers, i64 strides)."""
    sig = {}
    for name in inspect.signature(fn.fn).parameters:
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = ptr_types[name]
        elif name == "qk_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i64"
    return sig


def _resources(cubin: bytes, ptx: str, ptxas: str, bin_dir: str) -> dict:
    """Registers and stack from the cubin; spill bytes from ``ptxas -v`` on the same PTX."""
    with tempfile.TemporaryDirectory() as tmp:
        cub = os.path.join(tmp, "k.cubin")
        ptx_path = os.path.join(tmp, "k.ptx")
        Path(cub).write_bytes(cubin)
        Path(ptx_path).write_text(ptx)
        usage = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-res-usage", cub],
                               capture_output=True, text=True, check=True).stdout
        verbose = subprocess.run([ptxas, "-v", "--gpu-name", "sm_90a", ptx_path, "-o", os.path.join(tmp, "o.cubin")],
                                 capture_output=True, text=True, check=True)
    fn_line = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", usage)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", verbose.stdout + verbose.stderr)
    if not fn_line or not spills:
        raise RuntimeError(f"could not read resource usage:\n{usage}\n{verbose.stdout}{verbose.stderr}")
    return {"registers": int(fn_line.group(1)), "stack_bytes": int(fn_line.group(2)),
            "local_bytes": int(fn_line.group(4)),
            "spill_store_bytes": int(spills.group(1)), "spill_load_bytes": int(spills.group(2))}


def run_check(dtypes=DTYPES, head_dims=HEAD_DIMS, block_sizes=BLOCK_SIZES, progress=None) -> dict:
    """Compile every combination for sm_90 and collect its resources.

    Returns:
        ``{"target", "triton_version", "date", "group", "num_splits", "results": [...]}``; each
        result has ``kernel`` ("single_pass" | "split_kv" | "reduce_splits"), ``dtype``,
        ``head_dim``, ``block_size`` (None for the reduction, which never reads the cache),
        ``tile``, ``num_warps``, ``num_stages``, ``registers`` (per thread), ``stack_bytes``,
        ``local_bytes``, ``spill_store_bytes``, ``spill_load_bytes``, ``shared_bytes`` (per
        program) and ``compile_s``; or ``error`` (str) when a compile failed.

    Raises:
        RuntimeError: Triton has no CUDA backend or no ptxas/cuobjdump (see :func:`cuda_backend`).
    """
    os.environ["TRITON_INTERPRET"] = "0"
    triton, ASTSource, GPUTarget, ptxas, bin_dir = cuda_backend()
    from kernels import triton_kernels as tk

    target = GPUTarget(*TARGET)
    results = []

    def compile_one(fn, consts, ptr_types, meta, num_warps, num_stages):
        t0 = time.perf_counter()
        row = dict(meta, num_warps=num_warps, num_stages=num_stages)
        try:
            src = ASTSource(fn=fn, signature=_signature(fn, consts, ptr_types), constexprs=consts)
            ck = triton.compile(src, target=target, options={"num_warps": num_warps, "num_stages": num_stages})
            row.update(_resources(ck.asm["cubin"], ck.asm["ptx"], ptxas, bin_dir))
            row["shared_bytes"] = int(ck.metadata.shared)
        except Exception as exc:  # noqa: BLE001 -- one failure must not hide the others
            row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        row["compile_s"] = round(time.perf_counter() - t0, 2)
        results.append(row)
        if progress:
            progress(row)

    for dtype in dtypes:
        for head_dim in head_dims:
            tile, warps, stages = tk.default_tiling(head_dim)
            head_dim_p = max(16, tk.next_pow2(head_dim))
            shape = dict(HEAD_DIM=head_dim, HEAD_DIM_P=head_dim_p, GROUP=GROUP, GROUP_P=max(16, tk.next_pow2(GROUP)),
                         TILE=tile, IS_FP32=False, NUM_STAGES=stages)
            io = {"q_ptr": f"*{dtype}", "k_ptr": f"*{dtype}", "v_ptr": f"*{dtype}",
                  "block_tables_ptr": "*i32", "seq_lens_ptr": "*i32"}
            for block_size in block_sizes:
                meta = dict(dtype=dtype, head_dim=head_dim, block_size=block_size, tile=tile)
                compile_one(tk.single_pass, dict(shape, BLOCK_SIZE=block_size),
                            dict(io, out_ptr=f"*{dtype}"), dict(meta, kernel="single_pass"), warps, stages)
                compile_one(tk.split_kv, dict(shape, BLOCK_SIZE=block_size, NUM_SPLITS=NUM_SPLITS,
                                              NUM_HEADS=GROUP * 8),
                            dict(io, part_acc_ptr="*fp32", part_ml_ptr="*fp32"),
                            dict(meta, kernel="split_kv"), warps, stages)
            compile_one(tk.reduce_splits,
                        dict(NUM_SPLITS=NUM_SPLITS, NUM_SPLITS_P=tk.next_pow2(NUM_SPLITS), NUM_HEADS=GROUP * 8,
                             HEAD_DIM=head_dim, HEAD_DIM_P=head_dim_p),
                        {"out_ptr": f"*{dtype}", "part_acc_ptr": "*fp32", "part_ml_ptr": "*fp32"},
                        dict(dtype=dtype, head_dim=head_dim, block_size=None, tile=None, kernel="reduce_splits"),
                        4, 1)
    return {"target": {"backend": TARGET[0], "arch": f"sm_{TARGET[1]}", "gpu": "NVIDIA H200 (Hopper)",
                       "warp_size": TARGET[2]},
            "triton_version": triton.__version__, "date": _dt.date.today().isoformat(),
            "group": GROUP, "num_splits": NUM_SPLITS, "results": results}


def cuda_backend():
    """Triton's compiler pieces for an offline CUDA compile.

    Returns:
        ``(triton, ASTSource, GPUTarget, ptxas_path, bin_dir)``.

    Raises:
        RuntimeError: Triton is missing, has no NVIDIA backend, or lacks its bundled ptxas or
            cuobjdump (the message says which).
    """
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from triton.backends.nvidia.compiler import get_ptxas
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"this Triton build has no CUDA backend ({type(exc).__name__}: {exc})") from exc
    bin_dir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    try:
        ptxas = get_ptxas(TARGET[1]).path
    except Exception as exc:  # noqa: BLE001
        raise RuntimeError(f"this Triton build has no ptxas for sm_{TARGET[1]} ({exc})") from exc
    if not os.path.exists(os.path.join(bin_dir, "cuobjdump")):
        raise RuntimeError(f"this Triton build has no cuobjdump in {bin_dir}")
    return triton, ASTSource, GPUTarget, ptxas, bin_dir


def failures(report: dict) -> list[str]:
    """One line per combination that failed to compile or spilled (empty: all clean)."""
    bad = []
    for r in report["results"]:
        what = f"{r['kernel']} {r['dtype']} head_dim {r['head_dim']} block {r['block_size']}"
        if "error" in r:
            bad.append(f"{what}: did not compile: {r['error']}")
        elif r["spill_store_bytes"] or r["spill_load_bytes"] or r["stack_bytes"]:
            bad.append(f"{what}: spills ({r['spill_store_bytes']} B stored, {r['spill_load_bytes']} B loaded, "
                       f"{r['stack_bytes']} B stack) with {r['registers']} registers")
    return bad


def summary(report: dict) -> dict:
    """Headline figures for the page: counts, register and shared-memory ranges per kernel.

    Returns:
        ``{"compiled": n, "failed": n, "spilling": n, "kernels": {name: {"registers": [min, max],
        "shared_kib": [min, max], "configs": n}}}`` over the combinations that compiled.
    """
    ok = [r for r in report["results"] if "error" not in r]
    out = {"compiled": len(ok), "failed": len(report["results"]) - len(ok),
           "spilling": sum(1 for r in ok if r["spill_store_bytes"] or r["spill_load_bytes"] or r["stack_bytes"]),
           "kernels": {}}
    for name in ("single_pass", "split_kv", "reduce_splits"):
        rows = [r for r in ok if r["kernel"] == name]
        if rows:
            regs = [r["registers"] for r in rows]
            shared = [r["shared_bytes"] / 1024 for r in rows]
            out["kernels"][name] = {"registers": [min(regs), max(regs)],
                                    "shared_kib": [round(min(shared), 1), round(max(shared), 1)],
                                    "configs": len(rows)}
    return out


def load_report(path: str | Path = DEFAULT_OUT) -> dict | None:
    """Read a report written by :func:`main` (None when the file does not exist).

    Raises:
        ValueError: the file is not JSON with ``triton_version``, ``target`` and a ``results``
            list whose entries name ``kernel``, ``dtype`` and ``head_dim`` (message names the file).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path.name}: not readable JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list) \
            or "triton_version" not in data or "target" not in data:
        raise ValueError(f"{path.name}: expected an object with 'triton_version', 'target' and 'results'")
    for i, r in enumerate(data["results"]):
        if not isinstance(r, dict) or any(k not in r for k in ("kernel", "dtype", "head_dim")):
            raise ValueError(f"{path.name}: results[{i}] must name kernel, dtype and head_dim")
    data["summary"] = summary(data)
    return data


#: Registers one thread may use, and shared memory one program may use, on sm_90 (H100/H200).
#: Source: NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute Capability".
SM90_MAX_REGISTERS = 255
SM90_MAX_SHARED_KIB = 227


def facts_text(report: dict) -> str:
    """The compile facts in one paragraph of markdown; every number comes from ``report``."""
    s = summary(report)
    res = report["results"]
    dtypes = sorted({r["dtype"] for r in res})
    dims = sorted({r["head_dim"] for r in res})
    blocks = sorted({r["block_size"] for r in res if r["block_size"] is not None})
    names = {"single_pass": "single pass", "split_kv": "split-KV pass", "reduce_splits": "reduction"}
    regs = "; ".join(f"{names[k]} {v['registers'][0]}–{v['registers'][1]}" for k, v in s["kernels"].items())
    shared = [v["shared_kib"] for v in s["kernels"].values()]
    lo, hi = min(x[0] for x in shared), max(x[1] for x in shared)
    spills = "no register spills" if s["spilling"] == 0 else f"{s['spilling']} spilling"
    failed = "" if s["failed"] == 0 else f", **{s['failed']} failed to compile**"
    return (f"**Compiled for H200 / {report['target']['arch']}** with Triton {report['triton_version']} "
            f"(offline, on {report.get('date', 'an unknown date')}): {s['compiled']} kernels "
            f"({', '.join(dtypes)}; head dim {', '.join(map(str, dims))}; block sizes "
            f"{', '.join(map(str, blocks))}; single pass, split-KV and reduction) with {spills}{failed}. "
            f"Registers per thread: {regs} (the limit is {SM90_MAX_REGISTERS}). Shared memory per program: "
            f"{lo:g}–{hi:g} KiB (of {SM90_MAX_SHARED_KIB} KiB).")


def main(argv: list[str] | None = None) -> int:
    """CLI: compile everything, print a table, write the JSON; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m kernels.compile_check",
                                 description="Compile the paged-attention kernels for sm_90 (H200) without a GPU.")
    ap.add_argument("-o", "--out", default=str(DEFAULT_OUT), help="JSON file to write (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no per-kernel lines")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        # Importing the `kernels` package on a CPU machine turned on Triton's interpreter, which
        # cannot compile: run again in a fresh process with it off.
        env = dict(os.environ, TRITON_INTERPRET="0")
        return subprocess.run([sys.executable, "-m", "kernels.compile_check", *(argv if argv is not None else sys.argv[1:])],
                              env=env, cwd=str(DEFAULT_OUT.parent.parent)).returncode
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")       # Triton 3.9's default, stated
    try:
        cuda_backend()
    except RuntimeError as exc:
        print(f"compile check skipped: {exc}", file=sys.stderr)
        return EXIT_NO_CUDA_BACKEND

    def show(r):
        if args.quiet:
            return
        if "error" in r:
            print(f"{r['kernel']:<14} {r['dtype']} d={r['head_dim']:<3} block={r['block_size']}: ERROR {r['error']}")
        else:
            print(f"{r['kernel']:<14} {r['dtype']} d={r['head_dim']:<3} block={str(r['block_size']):<4} "
                  f"regs={r['registers']:<3} spills={r['spill_store_bytes']}/{r['spill_load_bytes']} B "
                  f"shared={r['shared_bytes'] / 1024:.1f} KiB ({r['compile_s']} s)", flush=True)

    report = run_check(progress=show)
    report["summary"] = summary(report)
    out = Path(args.out)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    os.replace(tmp, out)
    bad = failures(report)
    s = report["summary"]
    print(f"{s['compiled']} compiled for sm_90 with Triton {report['triton_version']}, "
          f"{s['spilling']} spilling, {s['failed']} failed -> {out}")
    for line in bad:
        print("  " + line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
