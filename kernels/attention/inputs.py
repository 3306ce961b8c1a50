"""Inputs of one decode step: dense tokens paged into a shuffled block pool, and the contiguous baseline.

:func:`page_tokens` scatters each sequence's keys and values into randomly permuted blocks of a
pool (vLLM's layout, ``[num_blocks, block_size, num_kv_heads, head_dim]``, described in
:mod:`kernels.attention.paged_attention`) and writes the block tables; :func:`make_paged_inputs` draws
random tokens and pages them; :func:`make_contiguous` gives the same tokens as one run of memory
per sequence. The sweep, the checks and the tests build every case here. Needs only torch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from allocator.common.mathutils import cdiv, round_up
from allocator.common.errors import FieldError

#: Block-table rows built here are padded (with ``table_pad``) to a multiple of this many columns,
#: so the row stride is divisible by 16 for every shape: Triton then compiles one specialisation
#: per block size (it specialises integer arguments on divisibility by 16), and the offline
#: compile check covers what runs.
TABLE_COLUMN_MULTIPLE = 16


@dataclass
class PagedInputs:
    """Tensors for one decode step (shapes in the module docstring), plus the dense tokens.

    ``k_dense``/``v_dense`` [num_seqs, max_len, num_kv_heads, head_dim] hold the same tokens the
    paged cache holds, so the contiguous baseline and the check see identical data.
    """

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    block_tables: torch.Tensor
    seq_lens: torch.Tensor
    k_dense: torch.Tensor
    v_dense: torch.Tensor

    @property
    def args(self) -> tuple[torch.Tensor, ...]:
        """``(q, k_cache, v_cache, block_tables, seq_lens)`` for the kernels."""
        return self.q, self.k_cache, self.v_cache, self.block_tables, self.seq_lens

    @property
    def kv_bytes(self) -> int:
        """Bytes of K and V a decode step must read: 2 x sum(seq_lens) x num_kv_heads x head_dim x itemsize."""
        _, _, h, d = self.k_dense.shape
        return 2 * int(self.seq_lens.sum()) * h * d * self.k_dense.element_size()


def page_tokens(k_dense: torch.Tensor, v_dense: torch.Tensor, seq_lens: torch.Tensor, block_size: int,
                fill: float = 0.0, spare_blocks: int = 0, generator: torch.Generator | None = None,
                table_pad: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scatter dense tokens into a paged cache with randomly permuted block tables.

    Args:
        k_dense, v_dense: [num_seqs, max_len, num_kv_heads, head_dim].
        seq_lens: int32 [num_seqs]; only the first ``seq_lens[s]`` tokens of row ``s`` are kept.
        block_size: slots per block (>= 1).
        fill: value for every slot holding no token (NaN in tests: any read past seq_len shows).
        spare_blocks: extra unused blocks in the pool (also filled with ``fill``).
        generator: torch RNG for the block permutation (CPU).
        table_pad: value of block-table entries past each sequence's last block.

    Returns:
        ``(k_cache, v_cache, block_tables)`` with k/v_cache
        [num_blocks, block_size, num_kv_heads, head_dim] and block_tables int32
        [num_seqs, ceil(max_len / block_size) rounded up to a multiple of
        :data:`TABLE_COLUMN_MULTIPLE`], on k_dense's device.

    Raises:
        FieldError: ``block_size`` < 1.
    """
    if block_size < 1:
        raise FieldError("block_size", f" must be >= 1, got {block_size}")
    num_seqs, max_len, h, d = k_dense.shape
    dev = k_dense.device
    lens = [int(x) for x in seq_lens.tolist()]
    per_seq = [cdiv(n, block_size) for n in lens]
    num_used = sum(per_seq)
    num_blocks = num_used + spare_blocks
    perm = torch.randperm(num_blocks, generator=generator).to(dev)
    max_blocks = round_up(max(1, cdiv(max_len, block_size)), TABLE_COLUMN_MULTIPLE)
    tables = torch.full((num_seqs, max_blocks), table_pad, dtype=torch.int32, device=dev)
    k_cache = torch.full((num_blocks, block_size, h, d), fill, dtype=k_dense.dtype, device=dev)
    v_cache = torch.full_like(k_cache, fill)
    nxt = 0
    for s, (n, nb) in enumerate(zip(lens, per_seq)):
        if nb == 0:
            continue
        ids = perm[nxt:nxt + nb]
        nxt += nb
        tables[s, :nb] = ids.to(torch.int32)
        full = n // block_size                     # completely filled blocks
        if full:
            k_cache[ids[:full]] = k_dense[s, :full * block_size].reshape(full, block_size, h, d)
            v_cache[ids[:full]] = v_dense[s, :full * block_size].reshape(full, block_size, h, d)
        rest = n - full * block_size
        if rest:
            k_cache[ids[full], :rest] = k_dense[s, full * block_size:n]
            v_cache[ids[full], :rest] = v_dense[s, full * block_size:n]
    return k_cache, v_cache, tables


def make_paged_inputs(seq_lens: list[int], num_heads: int, num_kv_heads: int, head_dim: int,
                      block_size: int, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                      fill: float = 0.0, spare_blocks: int = 0, seed: int = 0,
                      max_len: int | None = None) -> PagedInputs:
    """Random q and tokens, paged into a randomly permuted block pool.

    Args:
        seq_lens: tokens per sequence (each >= 0, at least one > 0; a 0 has no blocks).
        num_heads, num_kv_heads, head_dim: attention shape (num_heads a multiple of num_kv_heads).
        block_size: slots per block.
        dtype: torch.float16 or torch.float32.
        device: where the tensors live.
        fill: value in slots that hold no token (NaN in tests).
        spare_blocks: unused blocks added to the pool.
        seed: RNG seed (values ~ N(0, 1), generated on the CPU for reproducibility).
        max_len: columns of the dense tensors (default max(seq_lens)).

    Returns:
        :class:`PagedInputs`.

    Raises:
        FieldError: ``seq_lens`` empty, negative or all 0, ``block_size`` < 1.
    """
    if not seq_lens or min(seq_lens) < 0 or max(seq_lens) < 1:
        raise FieldError("seq_lens", f" must be a non-empty list of values >= 0, not all 0, got {seq_lens}")
    gen = torch.Generator().manual_seed(seed)
    n = len(seq_lens)
    max_len = max_len or max(seq_lens)
    q = torch.randn(n, num_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    k_dense = torch.randn(n, max_len, num_kv_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    v_dense = torch.randn(n, max_len, num_kv_heads, head_dim, generator=gen).to(device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    k_cache, v_cache, tables = page_tokens(k_dense, v_dense, lens, block_size, fill=fill,
                                           spare_blocks=spare_blocks, generator=gen)
    return PagedInputs(q, k_cache, v_cache, tables, lens, k_dense, v_dense)


def make_contiguous(inputs: PagedInputs) -> tuple[torch.Tensor, ...]:
    """The contiguous baseline for the same tokens: each sequence is one block of ``max_len``.

    Returns:
        ``(q, k_cache, v_cache, block_tables, seq_lens)`` with k/v_cache
        ``[num_seqs, max_len, num_kv_heads, head_dim]`` (the dense tensors themselves, no copy)
        and block_tables ``[[0], [1], ...]`` int32 -- ready for the same kernel.
    """
    n = inputs.k_dense.shape[0]
    tables = torch.arange(n, dtype=torch.int32, device=inputs.q.device).reshape(n, 1)
    return inputs.q, inputs.k_dense, inputs.v_dense, tables, inputs.seq_lens
