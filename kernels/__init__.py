"""Paged-attention decode: a Triton kernel, a torch CPU path, a torch reference and a sweep.

What this package measures: the cost that paging adds to the attention kernel itself — reading
each sequence's keys and values through a block table (a gather) instead of from one contiguous
run of memory — as the block size changes. Sources: Kwon et al., "Efficient Memory Management for
Large Language Model Serving with PagedAttention" (SOSP 2023), and vLLM's cache layout
``[num_blocks, block_size, num_kv_heads, head_dim]``.

Importing this package on a machine without CUDA sets ``TRITON_INTERPRET=1`` in ``os.environ``
(unless the variable is already set) *before* Triton is imported, so the Triton kernel runs in
Triton's CPU interpreter (tiny shapes, for correctness). With CUDA the variable is left alone and
the kernel is compiled. Never imports streamlit.

Modules:
    backend         -- :func:`detect` picks "cuda", "torch-cpu" or "triton-interpreter".
    triton_kernels  -- the Triton kernels (single pass, split-KV, reduction; paged, or the
                       contiguous baseline with the table compiled out) and the launch choice.
    paged_attention -- the Triton wrappers (paged and contiguous), the torch CPU path, the
                       reference, launch plans, the quick correctness check.
    validation      -- the input checks (FieldError naming the input).
    inputs          -- dense tokens paged into a shuffled block pool; the contiguous baseline.
    sweep           -- the block-size sweep's runner (paged vs contiguous, paired timing, a time
                       budget), shared between sessions (:func:`kernels.sweep.run.shared_sweep`);
                       re-exports the names of the three modules below.
    stats           -- paired-timing statistics: median ratio, bootstrap interval, verdict.
    sweep_data      -- the sweep's shape and result types; recorded GPU results in assets/.
    sweep_cli       -- ``python -m kernels.sweep``.
    figures         -- the kernel page's figures, tables and sentences (plotly, pandas; never
                       streamlit), built from the results above.
    errors          -- :class:`FieldError`, the core's bad-input error (with a numpy-free
                       stand-in for GPU machines).
    compile_check   -- offline compile for an H200 (sm_90) without a GPU of every launch the page
                       and gpu_check make: registers, spills, shared memory, pipelining
                       (``assets/kernel_compile_sm90.json``; ``make compile-check``).
    predict         -- the bandwidth each launch should reach on an H200, from the compile record
                       (a prediction, labelled as one wherever it is shown).
    gpu_check       -- ``python3 -m kernels.gpu_check -o DIR``: on a CUDA machine (no install),
                       check, time paged vs contiguous vs SDPA, write ``kernel_gpu_check.json``;
                       ``--dry`` does the same on a CPU without timing.
    bench           -- ``bench_kernels()``: the kernels section of ``make bench``.
"""
from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    # Must happen before `import triton` (the @triton.jit decorator picks the interpreter then).
    os.environ.setdefault("TRITON_INTERPRET", "1")
