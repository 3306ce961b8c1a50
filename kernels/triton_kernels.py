"""The Triton kernels of paged-attention decode, and how a launch is shaped.

Three ``@triton.jit`` kernels share one tile loop (:func:`_attend`):

* ``single_pass`` -- one program per (sequence, KV head) reads the whole sequence and writes the
  finished output. Enough when there are at least as many (sequence, KV head) pairs as
  streaming multiprocessors and contexts are short.
* ``split_kv`` + ``reduce_splits`` -- flash-decoding: the sequence is cut into ``num_splits``
  stretches of ``split_len`` tokens; one program per (sequence, KV head, split) writes an
  unnormalised partial result (running max, sum of weights, weighted values); a second kernel
  per (sequence, query head) combines the partials. Used when the grid of the single pass would
  leave SMs idle (batch 16 x 8 KV heads = 128 programs on a 132-SM H200) or contexts are long.

Every program serves the whole group of query heads that share its KV head (grouped-query
attention), so each KV head is read once per group. Tokens are processed ``tile`` at a time with
an online softmax in fp32 (Milakov & Gimelshein 2018; the FlashAttention recurrence); each
token's physical block is looked up in the block table -- the gather paging adds -- so any block
size from 1 up (24 included) uses the same tile shapes. ``num_stages`` pipelines the loop's loads.
A sequence with no tokens attends to nothing: its output is 0 (never NaN).

Sources: Kwon et al., PagedAttention (SOSP 2023); vLLM's Triton decode kernels and FlashInfer's
split-KV ("flash-decoding") design, read for their structure (no code taken); the layout is
vLLM's ``[num_blocks, block_size, num_kv_heads, head_dim]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

try:  # Triton is optional: without it only the torch paths run.
    import triton
    import triton.language as tl
    HAVE_TRITON = True
except Exception:  # pragma: no cover - depends on the install
    triton = None
    tl = None
    HAVE_TRITON = False

#: log2(e): the kernels use exp2, so scores are scaled by softmax_scale * log2(e).
LOG2E = 1.4426950408889634
#: Contexts at least this long are split even when the grid already fills the GPU.
LONG_CONTEXT = 8192
#: A split covers at least this many tiles (fewer would make the reduction dominate).
MIN_TILES_PER_SPLIT = 4


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (>= 1)."""
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass(frozen=True)
class LaunchConfig:
    """How one call is launched (all sizes in tokens unless stated).

    Attributes:
        tile: tokens per loop iteration (a power of two >= 16, GPU-legal for ``tl.dot``).
        num_warps: warps per program.
        num_stages: software-pipelining stages of the tile loop's loads.
        num_splits: 1 for the single pass, else the number of stretches per sequence.
        split_len: tokens per stretch (a multiple of ``tile``; the whole context when unsplit).
    """

    tile: int
    num_warps: int
    num_stages: int
    num_splits: int
    split_len: int


def default_tiling(head_dim: int) -> tuple[int, int, int]:
    """(tile, num_warps, num_stages) for a head dimension: chosen so the kernels compile for
    sm_90 without register spills (``kernels.compile_check`` checks every combination CI uses).

    Each program holds a ``[tile, head_dim]`` tile of K (then V) addressed through the block
    table, one 64-bit address per element, so a wider head needs a shorter tile or more warps.
    Measured with the offline compile (``python -m kernels.compile_check``, Triton 3.9, sm_90):
    at head_dim 128 a 32-token tile on 4 warps needs 255 registers and spills in the split pass
    at block size 24, and 3 stages spill at block 16; 32 tokens on 8 warps use 128-177 registers
    with no spills; at head_dim 64 the same tiling uses 80-109.
    """
    if head_dim <= 128:
        return 32, 8, 2
    return 16, 8, 2


def choose_config(num_seqs: int, num_kv_heads: int, max_seq_len: int, head_dim: int, *,
                  num_sms: int | None = None, num_splits: int | None = None, tile: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None) -> LaunchConfig:
    """Shape one launch.

    Args:
        num_seqs, num_kv_heads: the grid of the single pass is ``num_seqs x num_kv_heads``.
        max_seq_len: the longest context in the batch (tokens).
        head_dim: decides the tiling (:func:`default_tiling`).
        num_sms: the GPU's streaming multiprocessors (None on the CPU interpreter: no split unless
            asked for).
        num_splits: force a number of splits (1 = single pass); None chooses: when the
            single-pass grid is smaller than ``num_sms``, enough stretches to give each SM about
            two programs; when the context is at least :data:`LONG_CONTEXT`, stretches of at most
            half that many tokens (one long sequence should not hold one SM while the others finish);
            never stretches shorter than :data:`MIN_TILES_PER_SPLIT` tiles.
        tile, num_warps, num_stages: override :func:`default_tiling`.

    Raises:
        ValueError: ``tile`` not a power of two >= 16, or a count below 1.
    """
    d_tile, d_warps, d_stages = default_tiling(head_dim)
    tile = d_tile if tile is None else int(tile)
    num_warps = d_warps if num_warps is None else int(num_warps)
    num_stages = d_stages if num_stages is None else int(num_stages)
    if tile < 16 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 16, got {tile}")
    if num_warps < 1 or num_stages < 1:
        raise ValueError(f"num_warps and num_stages must be >= 1, got {num_warps} and {num_stages}")
    max_seq_len = max(1, int(max_seq_len))
    tiles = math.ceil(max_seq_len / tile)
    if num_splits is None:
        grid = max(1, num_seqs * num_kv_heads)
        want = 1
        if num_sms and grid < num_sms:
            want = math.ceil(2 * num_sms / grid)
        if num_sms and max_seq_len >= LONG_CONTEXT:
            want = max(want, math.ceil(max_seq_len / (LONG_CONTEXT // 2)))
        num_splits = max(1, min(want, tiles // MIN_TILES_PER_SPLIT or 1))
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    split_len = math.ceil(tiles / num_splits) * tile
    num_splits = math.ceil(max_seq_len / split_len)       # no stretch starts past the longest context
    return LaunchConfig(tile, num_warps, num_stages, num_splits, split_len)


if HAVE_TRITON:
    @triton.jit
    def _attend(q, k_ptr, v_ptr, table_row, stride_btb, kv_head, stride_kb, stride_kt, stride_kh,
                stride_vb, stride_vt, stride_vh, d_k, d_v, mask_d, lo, hi, qk_scale, m_i, l_i, acc,
                BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                NUM_STAGES: tl.constexpr):
        """Online softmax over tokens lo..hi-1 of one sequence for one KV head's query group.

        Returns the updated running max ``m_i`` [G], sum of weights ``l_i`` [G] and weighted
        values ``acc`` [G, D] (all fp32, unnormalised).
        """
        offs_t = tl.arange(0, TILE)
        for start in tl.range(lo, hi, TILE, num_stages=NUM_STAGES):
            tok = start + offs_t                                    # token positions [T]
            mask_t = tok < hi
            # The gather: each token's physical block comes from the block table.
            block_id = tl.load(table_row + (tok // BLOCK_SIZE).to(tl.int64) * stride_btb,
                               mask=mask_t, other=0).to(tl.int64)
            row = block_id * stride_kb + (tok % BLOCK_SIZE).to(tl.int64) * stride_kt + kv_head * stride_kh
            kv_mask = mask_t[:, None] & mask_d[None, :]
            k = tl.load(k_ptr + (row[:, None] + d_k), mask=kv_mask, other=0.0)           # [T, D]
            if IS_FP32:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")                     # [G, T]
            else:
                s = tl.dot(q, tl.trans(k))
            s = tl.where(mask_t[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            vrow = block_id * stride_vb + (tok % BLOCK_SIZE).to(tl.int64) * stride_vt + kv_head * stride_vh
            v = tl.load(v_ptr + (vrow[:, None] + d_v), mask=kv_mask, other=0.0)          # [T, D]
            if IS_FP32:
                acc = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        return m_i, l_i, acc

    @triton.jit
    def _load_q(q_ptr, seq, kv_head, stride_qs, stride_qh, stride_qd,
                HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr):
        """The GROUP query heads of one KV head, [GROUP_P, HEAD_DIM_P] (padding rows/columns 0)."""
        offs_g = tl.arange(0, GROUP_P)
        offs_d = tl.arange(0, HEAD_DIM_P)
        heads = (kv_head * GROUP + offs_g).to(tl.int64)
        off = seq * stride_qs + heads[:, None] * stride_qh + offs_d[None, :].to(tl.int64) * stride_qd
        return tl.load(q_ptr + off, mask=(offs_g[:, None] < GROUP) & (offs_d[None, :] < HEAD_DIM), other=0.0)

    @triton.jit
    def _attend_range(q_ptr, k_ptr, v_ptr, block_tables_ptr, seq, kv_head, lo, hi, qk_scale,
                      stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                      stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb,
                      HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr,
                      BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                      NUM_STAGES: tl.constexpr):
        """Tokens lo..hi-1 of one sequence for one KV head's query group, from a fresh start:
        loads the queries, runs :func:`_attend`, returns (m_i, l_i, acc) unnormalised."""
        offs_d = tl.arange(0, HEAD_DIM_P)
        q = _load_q(q_ptr, seq, kv_head, stride_qs, stride_qh, stride_qd, HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P)
        m_i = tl.full([GROUP_P], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_P], tl.float32)
        acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
        d_k = offs_d[None, :].to(tl.int64) * stride_kd
        d_v = offs_d[None, :].to(tl.int64) * stride_vd
        return _attend(q, k_ptr, v_ptr, block_tables_ptr + seq * stride_bts, stride_btb, kv_head,
                       stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, d_k, d_v,
                       offs_d < HEAD_DIM, lo, hi, qk_scale, m_i, l_i, acc, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES)

    @triton.jit
    def single_pass(out_ptr, q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr, qk_scale,
                    stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                    stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb,
                    stride_os, stride_oh, stride_od,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                    NUM_STAGES: tl.constexpr):
        """One program = one (sequence, KV head): the whole context, normalised output."""
        seq = tl.program_id(0).to(tl.int64)
        kv_head = tl.program_id(1).to(tl.int64)
        seq_len = tl.load(seq_lens_ptr + seq)
        offs_g = tl.arange(0, GROUP_P)
        offs_d = tl.arange(0, HEAD_DIM_P)
        mask_d = offs_d < HEAD_DIM
        m_i, l_i, acc = _attend_range(q_ptr, k_ptr, v_ptr, block_tables_ptr, seq, kv_head, 0, seq_len, qk_scale,
                                      stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                                      stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb,
                                      HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES)
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]            # an empty sequence: 0, not 0/0
        heads = (kv_head * GROUP + offs_g).to(tl.int64)
        o_off = seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :].to(tl.int64) * stride_od
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty),
                 mask=(offs_g[:, None] < GROUP) & mask_d[None, :])

    @triton.jit
    def split_kv(part_acc_ptr, part_ml_ptr, q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr, qk_scale,
                 stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                 stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb, split_len,
                 NUM_SPLITS: tl.constexpr, NUM_HEADS: tl.constexpr,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr,
                 BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                 NUM_STAGES: tl.constexpr):
        """One program = one (sequence, KV head, split): tokens [split x split_len, +split_len) of
        the context, written unnormalised to the partials (acc [S, splits, H, D]; max and sum of
        weights [S, splits, H, 2]), fp32, contiguous."""
        seq = tl.program_id(0).to(tl.int64)
        kv_head = tl.program_id(1).to(tl.int64)
        split = tl.program_id(2).to(tl.int64)
        seq_len = tl.load(seq_lens_ptr + seq).to(tl.int64)
        lo = split * split_len
        hi = tl.minimum(lo + split_len, seq_len)
        offs_g = tl.arange(0, GROUP_P)
        offs_d = tl.arange(0, HEAD_DIM_P)
        m_i, l_i, acc = _attend_range(q_ptr, k_ptr, v_ptr, block_tables_ptr, seq, kv_head, lo, hi, qk_scale,
                                      stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                                      stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb,
                                      HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES)
        heads = (kv_head * GROUP + offs_g).to(tl.int64)
        row = (seq * NUM_SPLITS + split) * NUM_HEADS + heads                               # [G]
        keep = offs_g < GROUP
        tl.store(part_acc_ptr + row[:, None] * HEAD_DIM_P + offs_d[None, :], acc, mask=keep[:, None])
        tl.store(part_ml_ptr + row * 2, m_i, mask=keep)
        tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=keep)

    @triton.jit
    def reduce_splits(out_ptr, part_acc_ptr, part_ml_ptr, stride_os, stride_oh, stride_od,
                      NUM_SPLITS: tl.constexpr, NUM_SPLITS_P: tl.constexpr, NUM_HEADS: tl.constexpr,
                      HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr):
        """One program = one (sequence, query head): combine its splits' partials into the output.
        Splits past the end of a short sequence hold max -inf and weight 0, and count for nothing."""
        seq = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1).to(tl.int64)
        offs_s = tl.arange(0, NUM_SPLITS_P)
        offs_d = tl.arange(0, HEAD_DIM_P)
        keep = offs_s < NUM_SPLITS
        row = (seq * NUM_SPLITS + offs_s) * NUM_HEADS + head                                # [P]
        m = tl.load(part_ml_ptr + row * 2, mask=keep, other=float("-inf"))
        l_s = tl.load(part_ml_ptr + row * 2 + 1, mask=keep, other=0.0)
        acc = tl.load(part_acc_ptr + row[:, None] * HEAD_DIM_P + offs_d[None, :], mask=keep[:, None], other=0.0)
        m_max = tl.max(m, axis=0)
        m_max = tl.where(m_max == float("-inf"), 0.0, m_max)                  # every split empty
        w = tl.exp2(m - m_max)                                                 # exp2(-inf) = 0
        total = tl.sum(w * l_s, axis=0)
        out = tl.sum(w[:, None] * acc, axis=0) / tl.where(total > 0, total, 1.0)
        o_off = seq * stride_os + head * stride_oh + offs_d.to(tl.int64) * stride_od
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)
