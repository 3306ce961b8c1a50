"""Compile the paged-attention kernels for an H200 (sm_90) on a machine without a GPU.

Triton can compile ahead of time for a named target: ``triton.compile`` on an ``ASTSource`` with
``GPUTarget("cuda", 90, 32)`` runs the whole pipeline (Triton IR -> LLVM -> PTX -> ptxas ->
cubin) with no GPU present. This module compiles **every launch the kernel page and
``kernels.gpu_check`` make on an H200** (:func:`launch_inventory`): the same
:func:`kernels.attention.paged_attention.launch_plan` builds the launches from ``meta`` tensors of the
real shapes, and each argument is specialised as Triton's runtime specialises it (an integer
equal to 1 becomes a constant, integers and pointers divisible by 16 are marked so; Triton's own
``native_specialize_impl`` decides), so the compiled code is the code that runs. (An earlier
version of this check typed every stride as a plain 64-bit integer; that code could not
vectorise or pipeline its loads, and its register counts described a kernel that never ran.)

For each distinct specialisation it records what the hardware must provide:

* registers per thread and the stack frame, from the cubin (``cuobjdump -res-usage``);
* bytes of register spill stores and loads, from ``ptxas -v`` on the same PTX for the same
  architecture (the ptxas Triton itself uses for sm_90);
* shared memory per program (Triton's own figure, bytes), and whether the loop's loads are
  asynchronous copies into shared memory (``cp.async`` in the PTX: software pipelining at work).

A spill means the kernel's working set did not fit in registers and goes through local memory
(slow); the check requires none. ``python -m kernels.compile_check [-o FILE] [--subset]``; it must
run in a process that has not imported Triton in interpreter mode, so it sets
``TRITON_INTERPRET=0`` before importing Triton (the tests run it in a subprocess). The full run
writes ``assets/kernel_compile_sm90.json``, which the kernel page shows; ``--subset`` compiles a
representative set (:func:`representative`) and is what the test suite runs.

Exit status: 0 when every launch compiled without spills; 1 when one spilled or failed;
3 when this Triton build has no CUDA backend (nothing was checked).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from allocator.common.errors import FieldError
from kernels.errors import read_json

#: The H200's compute capability and warp size, and its SM count (for the split choice).
TARGET = ("cuda", 90, 32)
H200_SMS = 132
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "assets" / "kernel_compile_sm90.json"
#: The same launches compiled with Triton 3.6, the version on the lent GPU machine (written by
#: running this module with that Triton first on ``PYTHONPATH``; see the README).
TRITON36_OUT = DEFAULT_OUT.with_name("kernel_compile_sm90_triton36.json")
#: Exit status when the Triton build cannot compile for CUDA.
EXIT_NO_CUDA_BACKEND = 3
#: Block sizes the suite's representative compile covers (None: the contiguous baseline):
#: one token per block, a multiple of nothing (24), a block smaller than the tile (16) and one
#: that holds whole tiles (256).
REPRESENTATIVE_BLOCKS = (1, 16, 24, 256, None)


def launch_inventory(num_sms: int = H200_SMS) -> list[dict]:
    """Every launch the page and ``gpu_check`` make on a GPU with ``num_sms`` SMs, as cases.

    Each case: ``source`` (who launches it), ``num_seqs``, ``max_len``, ``num_heads``,
    ``num_kv_heads``, ``head_dim``, ``dtype`` (torch dtype name), ``block_size`` (None for the
    contiguous kernel) and ``num_splits`` (None = the automatic choice).
    """
    from kernels import gpu_check as gc
    from kernels.attention.paged_attention import CHECK_CASE
    from kernels.sweep.data import CUDA_SHAPE, TINY_SHAPE
    from kernels.sweep.run import DEFAULT_BLOCK_SIZES

    cases = []
    for dtype in gc.VALIDATION_DTYPES:
        for head_dim in gc.VALIDATION_HEAD_DIMS:
            for bs in (*gc.VALIDATION_BLOCK_SIZES, None):
                for sp in gc.VALIDATION_SPLITS:
                    cases.append(dict(source="gpu_check correctness", num_seqs=len(gc.VALIDATION_SEQ_LENS),
                                      max_len=max(gc.VALIDATION_SEQ_LENS), num_heads=gc.VALIDATION_HEADS[0],
                                      num_kv_heads=gc.VALIDATION_HEADS[1], head_dim=head_dim, dtype=dtype,
                                      block_size=bs, num_splits=sp))
    h, hkv, d = gc.TIMING_HEADS
    for num_seqs, seq_len in gc.TIMING_SHAPES:
        for bs in (*gc.TIMING_BLOCK_SIZES, None):
            cases.append(dict(source="gpu_check timing", num_seqs=num_seqs, max_len=seq_len, num_heads=h,
                              num_kv_heads=hkv, head_dim=d, dtype=gc.TIMING_DTYPE, block_size=bs, num_splits=None))
    c = CHECK_CASE
    for sp in (1, 2):
        cases.append(dict(source="page correctness check", num_seqs=len(c["seq_lens"]), max_len=max(c["seq_lens"]),
                          num_heads=c["num_heads"], num_kv_heads=c["num_kv_heads"], head_dim=c["head_dim"],
                          dtype="float32", block_size=c["block_size"], num_splits=sp))
    for shape in (CUDA_SHAPE, TINY_SHAPE):
        for bs in (*DEFAULT_BLOCK_SIZES, None):
            cases.append(dict(source="page sweep", num_seqs=shape.num_seqs, max_len=shape.seq_len,
                              num_heads=shape.num_heads, num_kv_heads=shape.num_kv_heads, head_dim=shape.head_dim,
                              dtype=shape.dtype, block_size=bs, num_splits=None))
    return cases


def representative(case: dict) -> bool:
    """The suite's subset: bf16 and fp32 at head_dim 128 / the page check's, block sizes of
    :data:`REPRESENTATIVE_BLOCKS` (paged and contiguous, single pass, split and reduction)."""
    return case["dtype"] in ("bfloat16", "float32") and case["block_size"] in REPRESENTATIVE_BLOCKS \
        and case["head_dim"] in (128, 32)


_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def specialise(fn, launch, native_specialize_impl, base_backend) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attrs) of a launch, as Triton's runtime would specialise it."""
    sig, consts, attrs = {}, dict(launch.constexprs), {}
    for i, (name, arg) in enumerate(zip(fn.arg_names, launch.args)):
        kind, attr = native_specialize_impl(base_backend, arg, False, True, True)
        if kind == "constexpr":
            consts[name] = attr
            continue
        sig[name] = kind
        if attr == "D":
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
    return sig, consts, attrs


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


def run_check(subset: bool = False, progress=None) -> dict:
    """Compile every distinct launch of :func:`launch_inventory` (or its :func:`representative`
    part) for sm_90 and collect its resources.

    Returns:
        ``{"target", "triton_version", "date", "subset", "results": [...]}``; each result has
        ``kernel`` ("single_pass" | "split_kv" | "reduce_splits"), ``dtype`` ("fp16" | "bf16" |
        "fp32"), ``head_dim``, ``group``, ``block_size`` (None: contiguous or the reduction),
        ``paged``, ``tile``, ``num_warps``, ``num_stages``, ``used_by`` (sources), ``key`` (the
        specialisation, for comparing records), ``registers`` (per thread), ``stack_bytes``,
        ``local_bytes``, ``spill_store_bytes``, ``spill_load_bytes``, ``shared_bytes`` (per
        program), ``cp_async`` and ``compile_s``; or ``error`` (str) when a compile failed.

    Raises:
        RuntimeError: Triton has no CUDA backend or no ptxas/cuobjdump (see :func:`cuda_backend`).
    """
    os.environ["TRITON_INTERPRET"] = "0"
    triton, ASTSource, GPUTarget, ptxas, bin_dir = cuda_backend()
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend
    import torch
    from kernels.attention import triton_kernels as tk
    from kernels.attention.paged_attention import meta_plan

    target = GPUTarget(*TARGET)
    seen: dict[str, dict] = {}
    results = []
    for case in launch_inventory():
        if subset and not representative(case):
            continue
        dtype = getattr(torch, case["dtype"])
        plan = meta_plan(case["num_seqs"], case["max_len"], case["num_heads"], case["num_kv_heads"],
                         case["head_dim"], dtype, case["block_size"], case["num_splits"], H200_SMS)
        for launch in plan:
            fn = getattr(tk, launch.kernel)
            sig, consts, attrs = specialise(fn, launch, native_specialize_impl, BaseBackend)
            key = json.dumps([launch.kernel, sig, sorted((k, str(v)) for k, v in consts.items()),
                              sorted(str(k) for k in attrs), launch.num_warps, launch.num_stages])
            if key in seen:
                if case["source"] not in seen[key]["used_by"]:
                    seen[key]["used_by"].append(case["source"])
                continue
            paged = bool(consts.get("PAGED", False))
            row = {"kernel": launch.kernel, "dtype": _SHORT[case["dtype"]], "head_dim": case["head_dim"],
                   "group": case["num_heads"] // case["num_kv_heads"],
                   "block_size": case["block_size"] if (paged and launch.kernel != "reduce_splits") else None,
                   "paged": paged if launch.kernel != "reduce_splits" else None,
                   "tile": consts.get("TILE"), "num_warps": launch.num_warps, "num_stages": launch.num_stages,
                   "used_by": [case["source"]], "key": key}
            seen[key] = row
            t0 = time.perf_counter()
            try:
                src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
                ck = triton.compile(src, target=target,
                                    options={"num_warps": launch.num_warps, "num_stages": launch.num_stages})
                row.update(_resources(ck.asm["cubin"], ck.asm["ptx"], ptxas, bin_dir))
                row["shared_bytes"] = int(ck.metadata.shared)
                row["cp_async"] = "cp.async" in ck.asm["ptx"]
            except Exception as exc:  # noqa: BLE001 -- one failure must not hide the others
                msg = str(exc).strip()
                row["error"] = f"{type(exc).__name__}: {msg.splitlines()[0][:300] if msg else ''}"
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            results.append(row)
            if progress:
                progress(row)
    return {"target": {"backend": TARGET[0], "arch": f"sm_{TARGET[1]}", "gpu": "NVIDIA H200 (Hopper)",
                       "warp_size": TARGET[2], "sms": H200_SMS},
            "triton_version": triton.__version__, "date": _dt.date.today().isoformat(), "subset": subset,
            "results": results}


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


def block_label(row: dict) -> str:
    """"block 16", "contiguous" or "reduction" for a result row."""
    if row["kernel"] == "reduce_splits":
        return "reduction"
    return f"block {row['block_size']}" if row.get("paged") else "contiguous"


def failures(report: dict) -> list[str]:
    """One line per combination that failed to compile or spilled (empty: all clean)."""
    bad = []
    for r in report["results"]:
        what = f"{r['kernel']} {r['dtype']} head_dim {r['head_dim']} {block_label(r)}"
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
        FieldError (``file``; the message starts with the file's name): the file is not JSON with ``triton_version``, ``target`` and a ``results``
            list whose entries name ``kernel``, ``dtype`` and ``head_dim``.
    """
    path = Path(path)
    if not path.exists():
        return None
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list) \
            or "triton_version" not in data or "target" not in data:
        raise FieldError("file", ": expected an object with 'triton_version', 'target' and 'results'",
                         subject=path.name)
    for i, r in enumerate(data["results"]):
        if not isinstance(r, dict) or any(k not in r for k in ("kernel", "dtype", "head_dim")):
            raise FieldError("file", f": results[{i}] must name kernel, dtype and head_dim", subject=path.name)
    data["summary"] = summary(data)
    return data


#: Registers one thread may use, and shared memory one program may use, on sm_90 (H100/H200).
#: Source: NVIDIA CUDA C++ Programming Guide, "Technical Specifications per Compute Capability".
SM90_MAX_REGISTERS = 255
SM90_MAX_SHARED_KIB = 227


def facts_text(report: dict) -> str:
    """The compile facts in one paragraph of markdown; every number comes from ``report``."""
    s = summary(report)
    res = [r for r in report["results"] if "error" not in r]
    dtypes = sorted({r["dtype"] for r in res})
    dims = sorted({r["head_dim"] for r in res})
    blocks = sorted({r["block_size"] for r in res if r.get("paged") and r["block_size"] is not None})
    names = {"single_pass": "single pass", "split_kv": "split-KV pass", "reduce_splits": "reduction"}
    regs = "; ".join(f"{names[k]} {v['registers'][0]}–{v['registers'][1]}" for k, v in s["kernels"].items())
    shared = [v["shared_kib"] for v in s["kernels"].values()]
    lo, hi = min(x[0] for x in shared), max(x[1] for x in shared)
    spills = "no register spills" if s["spilling"] == 0 else f"{s['spilling']} spilling"
    failed = "" if s["failed"] == 0 else f", **{s['failed']} failed to compile**"
    loops = [r for r in res if r["kernel"] != "reduce_splits"]
    piped = sum(1 for r in loops if r.get("cp_async"))
    scope = ("a representative subset of the launches" if report.get("subset")
             else "every launch the page and `gpu_check` make")
    return (f"**Compiled for H200 / {report['target']['arch']}** with Triton {report['triton_version']} "
            f"(offline, on {report.get('date', 'an unknown date')}), {scope}: {s['compiled']} kernels "
            f"({', '.join(dtypes)}; head dim {', '.join(map(str, dims))}; block sizes "
            f"{', '.join(map(str, blocks))} and the contiguous baseline; single pass, split-KV and reduction) "
            f"with {spills}{failed}. Registers per thread: {regs} (the limit is {SM90_MAX_REGISTERS}). "
            f"Shared memory per program: {lo:g}–{hi:g} KiB (of {SM90_MAX_SHARED_KIB} KiB); "
            f"{piped} of {len(loops)} attention kernels load K/V with asynchronous copies into shared memory "
            f"(`cp.async`: the tile loop is software-pipelined).")


def compat_text(report: dict, other: dict) -> str:
    """One sentence comparing two records of the same launches (e.g. Triton 3.9 and 3.6), every
    number from the records: how many launches both hold, spills and failures in ``other``."""
    keys = {r["key"] for r in report["results"]}
    ok = [r for r in other["results"] if "error" not in r]
    same = sum(1 for r in ok if r["key"] in keys)
    s = summary(other)
    regs = [r["registers"] for r in ok]
    spills = "no register spills" if s["spilling"] == 0 else f"{s['spilling']} spilling"
    failed = "" if s["failed"] == 0 else f", {s['failed']} failed"
    return (f"**Also compiled with Triton {other['triton_version']}** (the GPU machine's version): "
            f"{s['compiled']} kernels, {same} of them the same launches as above, with {spills}{failed}; "
            f"registers per thread {min(regs)}–{max(regs)}.")


def main(argv: list[str] | None = None) -> int:
    """CLI: compile everything, print a table, write the JSON; see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m kernels.compile_check",
                                 description="Compile the paged-attention kernels for sm_90 (H200) without a GPU.")
    ap.add_argument("-o", "--out", default=str(DEFAULT_OUT), help="JSON file to write (default: %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no per-kernel lines")
    ap.add_argument("--subset", action="store_true", help="only the representative launches (the test suite's)")
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
            print(f"{r['kernel']:<14} {r['dtype']} d={r['head_dim']:<3} {block_label(r)}: ERROR {r['error']}")
        else:
            print(f"{r['kernel']:<14} {r['dtype']} d={r['head_dim']:<3} g={r['group']} {block_label(r):<10} "
                  f"regs={r['registers']:<3} spills={r['spill_store_bytes']}/{r['spill_load_bytes']} B "
                  f"shared={r['shared_bytes'] / 1024:.1f} KiB cp.async={r['cp_async']} ({r['compile_s']} s)",
                  flush=True)

    report = run_check(subset=args.subset, progress=show)
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
