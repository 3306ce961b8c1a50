"""The Triton kernels of paged-attention decode, and how a launch is shaped.

Three ``@triton.jit`` kernels share one tile loop (:func:`_attend`):

* ``single_pass`` -- one program per (sequence, KV head) reads the whole context and writes the
  finished output.
* ``split_kv`` + ``reduce_splits`` -- flash-decoding: the context is cut into ``num_splits``
  stretches of ``split_len`` tokens; one program per (sequence, KV head, split) writes an
  unnormalised partial result (running max, sum of weights, weighted values) and a second kernel
  per (sequence, query head) combines them.

Each kernel is compiled twice over: ``PAGED=True`` reads token ``t`` through the block table
(row ``t % block_size`` of block ``table[t // block_size]``), ``PAGED=False`` is the contiguous
baseline (row ``t`` of the sequence's own run; no table, no lookup). Everything else -- tiles,
warps, stages, the split choice and the arithmetic -- is the same code, so paged time over
contiguous time is the price of the indirection alone.

Design for memory bandwidth (decode reads every cached key and value once and does little
arithmetic on them, so its speed is bytes per second). Each choice, and why:

1. **Query heads that share a KV head stay in one program** (grouped-query attention): the
   program loads the group's queries once and reads each K/V tile once for all of them, so K/V
   traffic is divided by the group size (4 for Llama 3 8B's 32 query / 8 KV heads).
2. **Tiles of :data:`TILE_TOKENS` (64) tokens whatever the block size**: with blocks smaller than
   a tile, one tile gathers several blocks (16 blocks of 4 tokens, 4 of 16, ...), so a small
   block size does not mean small loads: each iteration has 64 x head_dim x 2 (K and V) elements
   in flight (32 KiB at head_dim 128 in 16-bit). When the block size is a multiple of the tile,
   the tile lies inside one block and the kernel looks up one table entry per tile (a scalar)
   instead of one per token.
3. **Block-table entries for the next tile are loaded ahead of use**: the loop carries the next
   tile's entries, loaded before the current tile's keys, so the table read's latency is hidden
   behind a whole tile of work instead of standing in front of every K/V load.
4. **Software pipelining, ``num_stages`` = 3 on sm_90**: Triton's pipeliner copies the next two
   tiles' K and V into shared memory asynchronously (``cp.async``) while the current one is
   computed. Two 32 KiB tiles in flight need 70 KiB of shared memory per program (the compile
   record shows it), so three programs fit in an H200 SM's 228 KiB and keep about 190 KiB of
   loads in flight per SM -- what Little's law asks for at ~4 TB/s and ~1 µs of latency
   (:mod:`kernels.sweep.predict`). Four warps per program keep registers at or below 128 so
   registers do not cap that occupancy.
5. **Split-KV chosen from the batch, the context length and the SM count**
   (:func:`choose_config`): the number of stretches that minimises the time of the last wave
   (the grid is dealt out to ``num_sms x`` programs-per-SM slots) plus the reduction's extra
   traffic, so 16 sequences x 8 KV heads (128 programs) on 132 SMs do not leave two thirds of
   the slots idle, and 64 x 8 (512 programs, 1.3 waves) do not end on a third-full wave.
6. **fp16 and bf16** (and fp32 for tests): scores and the running softmax are fp32 (exp2 with
   log2(e) folded into the scale), P is cast to the value dtype for the second ``tl.dot``.

A sequence with no tokens attends to nothing: its output is 0 (never NaN). Sources: Kwon et al.,
PagedAttention (SOSP 2023); Dao et al., FlashAttention (2022) for the online softmax; the
flash-decoding split-KV design of FlashInfer and vLLM's Triton decode kernels, read for their
structure (no code taken); vLLM's cache layout ``[num_blocks, block_size, num_kv_heads, head_dim]``.
"""
from __future__ import annotations

from dataclasses import dataclass

from allocator.common.mathutils import cdiv
from allocator.common.errors import FieldError

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
#: Tokens per tile for 16-bit K/V at head_dim <= 128 (see the module docstring, choice 2).
TILE_TOKENS = 64
#: A split covers at least this many tiles (fewer would make the reduction dominate).
MIN_TILES_PER_SPLIT = 4
#: Never more stretches than this per sequence (the reduction loads them all at once).
MAX_SPLITS = 64
#: Shared memory one SM offers to resident programs on sm_90 (bytes; 228 KiB, of which one
#: program may take 227 KiB). Source: NVIDIA CUDA C++ Programming Guide, "Technical
#: Specifications per Compute Capability".
SM90_SHARED_PER_SM = 228 * 1024
#: Shared memory the compiler adds beside the K/V stage buffers (bytes; the compile record shows
#: 71,680 B at 3 stages where the buffers are 65,536 B).
SHARED_OVERHEAD = 6 * 1024
#: Cost of the split path's second kernel, in the units of :func:`choose_config`'s model
#: (token-rows of one program's work): a launch of a few microseconds is worth about this many.
REDUCTION_COST_TOKENS = 64


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


def default_tiling(head_dim: int, itemsize: int = 2) -> tuple[int, int, int]:
    """(tile, num_warps, num_stages) for a head dimension and K/V element size (bytes).

    16-bit K/V at head_dim <= 128: 64-token tiles, 4 warps, 3 stages (the module docstring says
    why; the offline compile, ``python -m kernels.compile_check``, records 64-154 registers and
    no spills for every configuration the page and ``gpu_check`` launch). fp32 (tests and the
    page's small check): 2 stages, so the doubled tile bytes stay within shared memory. Head
    dims above 128: 32-token tiles, 8 warps, 2 stages (not launched by the lab; compiled on
    demand).
    """
    if head_dim > 128:
        return 32, 8, 2
    return TILE_TOKENS, 4, (3 if itemsize <= 2 else 2)


def programs_per_sm(tile: int, head_dim: int, itemsize: int, num_stages: int) -> int:
    """Programs one sm_90 SM can hold, as shared memory allows (the binding limit here).

    Shared memory per program ~ (num_stages - 1) x K and V tiles (tile x head_dim_p x itemsize
    each) + :data:`SHARED_OVERHEAD`; registers (<= 128 per thread at 4 warps) allow 4 programs
    and warps allow 16, so shared memory decides. At least 1.
    """
    head_dim_p = max(16, next_pow2(head_dim))
    per = max(1, num_stages - 1) * 2 * tile * head_dim_p * itemsize + SHARED_OVERHEAD
    return max(1, min(4, SM90_SHARED_PER_SM // per))


def choose_config(num_seqs: int, num_kv_heads: int, max_seq_len: int, head_dim: int, *,
                  num_sms: int | None = None, num_splits: int | None = None, tile: int | None = None,
                  num_warps: int | None = None, num_stages: int | None = None, itemsize: int = 2,
                  num_heads: int | None = None) -> LaunchConfig:
    """Shape one launch.

    Args:
        num_seqs, num_kv_heads: the grid of the single pass is ``num_seqs x num_kv_heads``.
        max_seq_len: the longest context in the batch (tokens).
        head_dim, itemsize: decide the tiling (:func:`default_tiling`).
        num_sms: the GPU's streaming multiprocessors (None on the CPU interpreter: no split unless
            asked for).
        num_splits: force a number of splits (1 = single pass); None chooses the count ``s`` that
            minimises a simple model of the launch's time: the grid ``num_seqs x num_kv_heads x
            s`` is dealt to ``num_sms x`` :func:`programs_per_sm` slots in waves, each program
            reads ``ceil(max_seq_len / s)`` tokens plus a fixed one tile (the pipeline's fill
            and the epilogue) plus, when split, its partial results written and read again
            (converted to token reads), so the time is waves x that; a split launch adds
            :data:`REDUCTION_COST_TOKENS` for the reduction kernel. Stretches are never shorter
            than :data:`MIN_TILES_PER_SPLIT` tiles, never more than :data:`MAX_SPLITS`; ties go
            to fewer splits.
        tile, num_warps, num_stages: override :func:`default_tiling`.
        num_heads: query heads (the partials' size depends on the group); default num_kv_heads.

    Raises:
        FieldError (``tile``, ``num_warps``, ``num_stages``, ``num_splits``): ``tile`` not a power
            of two >= 16, or a count below 1.
    """
    d_tile, d_warps, d_stages = default_tiling(head_dim, itemsize)
    tile = d_tile if tile is None else int(tile)
    num_warps = d_warps if num_warps is None else int(num_warps)
    num_stages = d_stages if num_stages is None else int(num_stages)
    if tile < 16 or tile & (tile - 1):
        raise FieldError("tile", f" must be a power of two >= 16, got {tile}")
    if num_warps < 1 or num_stages < 1:
        raise FieldError("num_warps" if num_warps < 1 else "num_stages", f" must be >= 1, got {num_warps} and {num_stages}",
                         subject="num_warps and num_stages")
    max_seq_len = max(1, int(max_seq_len))
    tiles = cdiv(max_seq_len, tile)
    if num_splits is None:
        num_splits = 1
        if num_sms:
            slots = num_sms * programs_per_sm(tile, head_dim, itemsize, num_stages)
            grid = max(1, num_seqs * num_kv_heads)
            group = max(1, (num_heads or num_kv_heads) // max(1, num_kv_heads))
            head_dim_p = max(16, next_pow2(head_dim))
            # partials per split program: group x (acc row + max + sum) fp32, written then read
            partial_tokens = group * (head_dim_p * 4 + 8) * 2 / (2 * head_dim * itemsize)
            best = None
            for s in range(1, min(MAX_SPLITS, max(1, tiles // MIN_TILES_PER_SPLIT)) + 1):
                per_prog = cdiv(tiles, s) * tile + tile + (partial_tokens if s > 1 else 0)
                cost = cdiv(grid * s, slots) * per_prog + (REDUCTION_COST_TOKENS if s > 1 else 0)
                if best is None or cost < best[0]:
                    best = (cost, s)
            num_splits = best[1]
    num_splits = int(num_splits)
    if num_splits < 1:
        raise FieldError("num_splits", f" must be >= 1, got {num_splits}")
    split_len = cdiv(tiles, num_splits) * tile
    num_splits = cdiv(max_seq_len, split_len)       # no stretch starts past the longest context
    return LaunchConfig(tile, num_warps, num_stages, num_splits, split_len)


if HAVE_TRITON:
    @triton.jit
    def _table_ids(table_row, stride_btb, start, offs_t, hi, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                   PAGED: tl.constexpr):
        """Block-table entries of the tile that starts at token ``start`` (0 past ``hi``).

        ``BLOCK_SIZE`` a multiple of ``TILE``: the tile lies inside one block, one entry (a scalar).
        Smaller blocks: one entry per token, [TILE] (several blocks per tile). Not paged: nothing to
        look up (a zero the compiler drops)."""
        if PAGED:
            if BLOCK_SIZE % TILE == 0:
                ids = tl.load(table_row + (start // BLOCK_SIZE) * stride_btb, mask=start < hi, other=0)
            else:
                tok = start + offs_t
                ids = tl.load(table_row + (tok // BLOCK_SIZE).to(tl.int64) * stride_btb, mask=tok < hi, other=0)
        else:
            ids = tl.zeros([TILE], tl.int32)
        return ids

    @triton.jit
    def _attend(q, k_ptr, v_ptr, table_row, stride_btb, seq, kv_head, stride_kb, stride_kt, stride_kh,
                stride_vb, stride_vt, stride_vh, d_k, d_v, mask_d, lo, hi, qk_scale, m_i, l_i, acc,
                BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                NUM_STAGES: tl.constexpr, PAGED: tl.constexpr):
        """Online softmax over tokens lo..hi-1 of one sequence for one KV head's query group.

        Paged (``PAGED``): token ``t`` is row ``t % BLOCK_SIZE`` of block ``table[t // BLOCK_SIZE]``
        (``stride_kb`` steps a block). Contiguous: token ``t`` is row ``t`` of sequence ``seq``
        (``stride_kb`` steps a sequence). Everything else -- tiles, loads, arithmetic -- is the same
        code, so the two differ only by the block-table lookup.

        Returns the updated running max ``m_i`` [G], sum of weights ``l_i`` [G] and weighted
        values ``acc`` [G, D] (all fp32, unnormalised).
        """
        offs_t = tl.arange(0, TILE)
        nxt = _table_ids(table_row, stride_btb, lo, offs_t, hi, BLOCK_SIZE, TILE, PAGED)
        for start in tl.range(lo, hi, TILE, num_stages=NUM_STAGES):
            ids = nxt
            # The next tile's block-table entries, loaded now so their latency hides behind this tile.
            nxt = _table_ids(table_row, stride_btb, start + TILE, offs_t, hi, BLOCK_SIZE, TILE, PAGED)
            tok = start + offs_t                                    # token positions [T]
            mask_t = tok < hi
            if PAGED:
                blk = ids.to(tl.int64)
                k_row = blk * stride_kb + (tok % BLOCK_SIZE).to(tl.int64) * stride_kt + kv_head * stride_kh
                v_row = blk * stride_vb + (tok % BLOCK_SIZE).to(tl.int64) * stride_vt + kv_head * stride_vh
            else:
                k_row = seq * stride_kb + tok.to(tl.int64) * stride_kt + kv_head * stride_kh
                v_row = seq * stride_vb + tok.to(tl.int64) * stride_vt + kv_head * stride_vh
            kv_mask = mask_t[:, None] & mask_d[None, :]
            k = tl.load(k_ptr + (k_row[:, None] + d_k), mask=kv_mask, other=0.0)         # [T, D]
            v = tl.load(v_ptr + (v_row[:, None] + d_v), mask=kv_mask, other=0.0)         # [T, D]
            if IS_FP32:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")                     # [G, T]
            else:
                s = tl.dot(q, tl.trans(k))
            s = tl.where(mask_t[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
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
                      NUM_STAGES: tl.constexpr, PAGED: tl.constexpr):
        """Tokens lo..hi-1 of one sequence for one KV head's query group, from a fresh start:
        loads the queries, runs :func:`_attend`, returns (m_i, l_i, acc) unnormalised."""
        offs_d = tl.arange(0, HEAD_DIM_P)
        q = _load_q(q_ptr, seq, kv_head, stride_qs, stride_qh, stride_qd, HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P)
        m_i = tl.full([GROUP_P], float("-inf"), tl.float32)
        l_i = tl.zeros([GROUP_P], tl.float32)
        acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
        d_k = offs_d[None, :].to(tl.int64) * stride_kd
        d_v = offs_d[None, :].to(tl.int64) * stride_vd
        return _attend(q, k_ptr, v_ptr, block_tables_ptr + seq * stride_bts, stride_btb, seq, kv_head,
                       stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh, d_k, d_v,
                       offs_d < HEAD_DIM, lo, hi, qk_scale, m_i, l_i, acc, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES,
                       PAGED)

    @triton.jit
    def single_pass(out_ptr, q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr, qk_scale,
                    stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                    stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb,
                    stride_os, stride_oh, stride_od,
                    HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr,
                    BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                    NUM_STAGES: tl.constexpr, PAGED: tl.constexpr):
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
                                      HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES,
                                      PAGED)
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]            # an empty sequence: 0, not 0/0
        heads = (kv_head * GROUP + offs_g).to(tl.int64)
        o_off = seq * stride_os + heads[:, None] * stride_oh + offs_d[None, :].to(tl.int64) * stride_od
        tl.store(out_ptr + o_off, out.to(out_ptr.dtype.element_ty),
                 mask=(offs_g[:, None] < GROUP) & mask_d[None, :])

    @triton.jit
    def split_kv(part_acc_ptr, part_ml_ptr, q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr, qk_scale,
                 stride_qs, stride_qh, stride_qd, stride_kb, stride_kt, stride_kh, stride_kd,
                 stride_vb, stride_vt, stride_vh, stride_vd, stride_bts, stride_btb, split_len,
                 num_splits, num_heads,
                 HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr, GROUP: tl.constexpr, GROUP_P: tl.constexpr,
                 BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, IS_FP32: tl.constexpr,
                 NUM_STAGES: tl.constexpr, PAGED: tl.constexpr):
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
                                      HEAD_DIM, HEAD_DIM_P, GROUP, GROUP_P, BLOCK_SIZE, TILE, IS_FP32, NUM_STAGES,
                                      PAGED)
        heads = (kv_head * GROUP + offs_g).to(tl.int64)
        row = (seq * num_splits + split) * num_heads + heads                               # [G]
        keep = offs_g < GROUP
        tl.store(part_acc_ptr + row[:, None] * HEAD_DIM_P + offs_d[None, :], acc, mask=keep[:, None])
        tl.store(part_ml_ptr + row * 2, m_i, mask=keep)
        tl.store(part_ml_ptr + row * 2 + 1, l_i, mask=keep)

    @triton.jit
    def reduce_splits(out_ptr, part_acc_ptr, part_ml_ptr, stride_os, stride_oh, stride_od, num_splits, num_heads,
                      NUM_SPLITS_P: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr):
        """One program = one (sequence, query head): combine its splits' partials into the output.
        Splits past the end of a short sequence hold max -inf and weight 0, and count for nothing."""
        seq = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1).to(tl.int64)
        offs_s = tl.arange(0, NUM_SPLITS_P)
        offs_d = tl.arange(0, HEAD_DIM_P)
        keep = offs_s < num_splits
        row = (seq * num_splits + offs_s) * num_heads + head                                # [P]
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
