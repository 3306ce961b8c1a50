"""Paged-attention kernel tests: Triton kernel (interpreter on CPU) and torch path vs the reference.

Shapes are tiny: on a CPU the Triton kernel runs in Triton's interpreter (``import kernels`` sets
TRITON_INTERPRET=1 before triton is imported). Every slot that holds no token is NaN, so a read
past a sequence's end turns the output NaN and fails the comparison.
"""
from __future__ import annotations

import json

import pytest
import torch

from kernels.attention.backend import detect
from kernels.attention.inputs import make_contiguous, make_paged_inputs, page_tokens
from kernels.attention.paged_attention import (check_correctness, paged_attention, paged_attention_reference,
                                               paged_attention_torch, paged_attention_triton)
from kernels.attention.validation import validate_inputs
from kernels.sweep.data import TINY_SHAPE, SweepResult, SweepShape, load_recorded
from kernels.sweep.__main__ import main
from kernels.sweep.run import sweep

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
NAN = float("nan")
TOL = {torch.float32: 1e-4, torch.float16: 2e-2}


def ragged_lens(block_size: int) -> list[int]:
    """seq_lens 1, exactly two blocks, and ragged (a partial last block; 7 for block size 1)."""
    ragged = 7 if block_size == 1 else block_size + block_size // 2 + 1
    return [1, 2 * block_size, ragged]


@pytest.mark.parametrize("heads", [(4, 4), (8, 2), (5, 1)], ids=lambda h: f"h{h[0]}kv{h[1]}")
@pytest.mark.parametrize("block_size", [1, 2, 16, 24, 256])
def test_triton_matches_reference(block_size, heads):
    num_heads, num_kv_heads = heads
    inp = make_paged_inputs(ragged_lens(block_size), num_heads, num_kv_heads, head_dim=16,
                            block_size=block_size, device=DEVICE, fill=NAN, spare_blocks=3,
                            seed=block_size * 10 + num_heads)
    # seq 0 has 1 token: every table entry after its first block is -1 padding, never read
    assert (inp.block_tables[0, 1:] == -1).all()
    ref = paged_attention_reference(*inp.args)
    out = paged_attention_triton(*inp.args)
    assert out.shape == inp.q.shape and out.dtype == inp.q.dtype
    assert torch.isfinite(out).all(), "kernel read a NaN slot (past seq_len or an unused block)"
    assert (out.float() - ref).abs().max().item() < TOL[torch.float32]
    # the torch CPU path computes the same thing
    assert (paged_attention_torch(*inp.args).float() - ref).abs().max().item() < TOL[torch.float32]


@pytest.mark.parametrize("block_size", [1, 24])
def test_fp16_and_padded_head_dim(block_size):
    # head_dim 40 pads to a 64-wide tile with masks; 6 query heads over 2 KV heads (group 3)
    inp = make_paged_inputs([3, 50], 6, 2, head_dim=40, block_size=block_size, dtype=torch.float16,
                            device=DEVICE, fill=NAN, spare_blocks=2, seed=7)
    ref = paged_attention_reference(*inp.args)
    out = paged_attention_triton(*inp.args)
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max().item() < TOL[torch.float16]


def test_block_table_is_really_permuted():
    inp = make_paged_inputs([64, 64], 4, 2, head_dim=16, block_size=4, seed=3)
    used = inp.block_tables[:, :16].flatten().tolist()
    assert sorted(used) == list(range(32)) and used != list(range(32))


def test_page_1_and_page_16_agree_and_match_contiguous():
    gen = torch.Generator().manual_seed(11)
    lens = torch.tensor([1, 16, 37], dtype=torch.int32)
    q = torch.randn(3, 8, 16, generator=gen)
    k = torch.randn(3, 37, 2, 16, generator=gen)
    v = torch.randn(3, 37, 2, 16, generator=gen)
    outs = {}
    for bs in (1, 16):
        kc, vc, tables = page_tokens(k, v, lens, bs, fill=NAN, spare_blocks=2, generator=gen)
        outs[bs] = paged_attention_triton(q, kc, vc, tables, lens)
    contig = paged_attention_triton(q, k, v, torch.arange(3, dtype=torch.int32).reshape(3, 1), lens)
    assert torch.allclose(outs[1], outs[16], atol=1e-5, rtol=0)
    assert torch.allclose(outs[16], contig, atol=1e-5, rtol=0)


def test_contiguous_baseline_is_the_same_tokens():
    inp = make_paged_inputs([5, 33], 4, 4, head_dim=16, block_size=8, fill=NAN, seed=5)
    c = make_contiguous(inp)
    assert c[1].shape == (2, 33, 4, 16) and c[3].tolist() == [[0], [1]]
    assert torch.allclose(paged_attention_torch(*c), paged_attention_torch(*inp.args), atol=1e-6)


def test_dispatch_and_check():
    inp = make_paged_inputs([9], 4, 2, head_dim=16, block_size=4, seed=1)
    for name in ("torch-cpu", detect("check").name):
        assert torch.isfinite(paged_attention(*inp.args, backend=name)).all()
    with pytest.raises(ValueError, match="backend"):
        paged_attention(*inp.args, backend="tpu")
    res = check_correctness()
    assert res["passed"] and res["backend"] == detect("check").name


@pytest.mark.skipif(CUDA, reason="CPU-only expectations")
def test_detect_on_cpu():
    assert detect("sweep").name == "torch-cpu"
    assert detect("check").name == "triton-interpreter"
    assert "interpreter" in detect("check").reason
    with pytest.raises(ValueError, match="purpose"):
        detect("train")


# ---------------------------------------------------------------- validation (each error)

def _case(**over):
    inp = make_paged_inputs([5, 12], 4, 2, head_dim=16, block_size=4, seed=2)
    args = dict(q=inp.q, k_cache=inp.k_cache, v_cache=inp.v_cache,
                block_tables=inp.block_tables, seq_lens=inp.seq_lens)
    args.update(over)
    return args


def _bad_table():
    t = _case()["block_tables"].clone()
    t[1, 2] = 10_000
    return t


@pytest.mark.parametrize("over, field", [
    (lambda a: {"block_tables": _bad_table()}, r"block_tables\[1, 2\] = 10000 is out of range"),
    (lambda a: {"block_tables": a["block_tables"].clone().fill_(-5)}, r"block_tables\[0, 0\] = -5"),
    # one token past what sequence 1's blocks hold: its 4th table entry is -1 padding
    (lambda a: {"seq_lens": torch.tensor([5, 13], dtype=torch.int32)}, r"block_tables\[1, 3\] = -1 is out of range"),
    (lambda a: {"seq_lens": torch.tensor([5, 65], dtype=torch.int32)}, r"seq_lens\[1\] = 65 needs 17 blocks"),
    (lambda a: {"seq_lens": torch.tensor([-1, 12], dtype=torch.int32)}, r"seq_lens\[0\] = -1 is negative"),
    (lambda a: {"seq_lens": torch.tensor([5], dtype=torch.int32)}, r"seq_lens has 1 entries"),
    (lambda a: {"seq_lens": a["seq_lens"].long()}, r"seq_lens must be int32"),
    (lambda a: {"block_tables": a["block_tables"].long()}, r"block_tables must be int32"),
    (lambda a: {"block_tables": a["block_tables"][:1]}, r"block_tables has 1 rows"),
    (lambda a: {"block_tables": a["block_tables"][0]}, r"block_tables must be \[num_seqs"),
    (lambda a: {"v_cache": a["v_cache"][:, :2]}, r"v_cache shape"),
    (lambda a: {"k_cache": a["k_cache"][0]}, r"k_cache must be \[num_blocks"),
    (lambda a: {"q": a["q"][0]}, r"q must be \[num_seqs"),
    (lambda a: {"q": a["q"][..., :8]}, r"head_dim of k_cache \(16\) must equal head_dim of q \(8\)"),
    (lambda a: {"q": a["q"][:, :3]}, r"num_heads \(3\) must be a multiple of num_kv_heads \(2\)"),
    (lambda a: {"k_cache": a["k_cache"].half()}, r"dtype of k_cache"),
    (lambda a: {"v_cache": a["v_cache"].double()}, r"dtype of v_cache"),
    (lambda a: {"q": a["q"].double(), "k_cache": a["k_cache"].double(),
                "v_cache": a["v_cache"].double()}, r"dtype of q must be float16, bfloat16 or float32"),
    (lambda a: {"q": a["q"].numpy()}, r"q must be a torch.Tensor"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_validation_errors_name_the_field(over, field):
    args = _case()
    args.update(over(args))
    with pytest.raises(ValueError, match=field):
        validate_inputs(**args)
    # every entry point validates before launching
    for fn in (paged_attention_triton, paged_attention_torch, paged_attention_reference):
        with pytest.raises(ValueError, match=field):
            fn(**args)



def test_bad_input_is_the_cores_field_error(tmp_path):
    """kernels/ raises the core's FieldError (a ValueError): ``.field`` names the input, so a page
    or a CLI never reads the message to know what was wrong; a refused run writes nothing."""
    from allocator.common.errors import FieldError
    from kernels import gpu_check
    from allocator.common.errors import FieldError as KernelsFieldError
    from kernels.sweep.stats import pair_stats
    from kernels.attention.triton_kernels import choose_config
    assert KernelsFieldError is FieldError                  # numpy is here: the core's own class

    def field(fn, *a, **k) -> str:
        with pytest.raises(FieldError) as err:
            fn(*a, **k)
        return err.value.field
    assert field(validate_inputs, **_case(seq_lens=torch.tensor([-1, 12], dtype=torch.int32))) == "seq_lens"
    assert field(validate_inputs, **_case(block_tables=_bad_table())) == "block_tables"
    assert field(validate_inputs, **dict(_case(), q=_case()["q"].double())) == "dtype"
    assert field(paged_attention, *make_paged_inputs([9], 4, 2, head_dim=16, block_size=4).args, backend="tpu") \
        == "backend"
    assert field(page_tokens, torch.zeros(1, 4, 1, 16), torch.zeros(1, 4, 1, 16), torch.tensor([4]), 0) \
        == "block_size"
    assert field(sweep, block_sizes=(0, 4), shape=TINY_SHAPE) == "block_sizes"
    assert field(sweep, block_sizes=("x",), shape=TINY_SHAPE) == "block_sizes"
    assert field(sweep, shape=TINY_SHAPE, backend="torch-cpu", repeats=2) == "repeats"
    assert field(SweepShape(1, 8, 3, 2, 16).validate) == "num_heads"
    assert field(SweepShape(1, 8, 4, 2, 16, dtype="int8").validate) == "dtype"
    assert field(pair_stats, [1.0], [1.0, 2.0]) == "b_s"
    assert field(pair_stats, [1.0, 0.0], [1.0, 2.0]) == "a_s"
    assert field(detect, "train") == "purpose"
    assert field(choose_config, 1, 1, 10, 64, tile=24) == "tile"
    assert field(gpu_check.run, tmp_path, dry=True, samples=2) == "samples"
    assert field(gpu_check.run, tmp_path, dry=True, budget_s=float("nan")) == "budget_s"
    assert not any(tmp_path.iterdir())
    (tmp_path / "kernel_gpu_check.json").write_text("{not json")
    assert field(load_recorded, assets=tmp_path) == "file"
    assert field(gpu_check.load_result, tmp_path / "kernel_gpu_check.json") == "file"

def test_table_entries_past_seq_len_are_ignored():
    args = _case()
    assert (args["block_tables"] == -1).any()          # padding is -1 and must not be read or rejected
    validate_inputs(**args)


# ---------------------------------------------------------------- sweep

@pytest.mark.parametrize("backend", ["torch-cpu", "triton-interpreter"])
def test_tiny_sweep_rows(backend):
    if CUDA and backend == "triton-interpreter":
        pytest.skip("interpreter not active on a CUDA machine")
    calls = []
    res = sweep(block_sizes=(1, 24), shape=TINY_SHAPE, backend=backend, repeats=3,
                progress=lambda f, m: calls.append(f))
    assert [r["block_size"] for r in res.rows] == [1, 24]
    for r in res.rows:
        assert r["paged_s"] > 0 and r["contiguous_s"] > 0 and r["pairs"] == 3
        assert r["paged_ms_q1"] <= r["paged_ms"] <= r["paged_ms_q3"]
        assert r["contiguous_ms_q1"] <= r["contiguous_ms"] <= r["contiguous_ms_q3"]
        assert r["overhead_ci_low"] <= r["overhead"] <= r["overhead_ci_high"]
        assert r["verdict"] in ("slower", "faster", "no measurable difference")
        assert r["paged_GBps"] == pytest.approx(TINY_SHAPE.kv_bytes / r["paged_s"] / 1e9)
        assert r["max_abs_diff"] < 1e-4
    assert res.meta["backend"] == backend and res.meta["kv_bytes"] == 2 * 2 * 64 * 2 * 16 * 4
    assert calls[-1] == 1.0 and calls == sorted(calls)
    again = SweepResult.from_json(res.to_json())
    assert again.rows == res.rows and "overhead" in again.table()
    assert res.meta["confidence"] == 0.95 and res.meta["row_confidence"] == pytest.approx(1 - 0.05 / 2)
    assert (res.meta["launch"] is None) == (backend == "torch-cpu")


def test_sweep_rejects_bad_input():
    with pytest.raises(ValueError, match="block_sizes"):
        sweep(block_sizes=(0, 4), shape=TINY_SHAPE)
    with pytest.raises(ValueError, match="num_heads"):
        sweep(shape=SweepShape(1, 8, 3, 2, 16))
    with pytest.raises(ValueError, match="backend"):
        sweep(shape=TINY_SHAPE, backend="tpu")
    if not CUDA:
        with pytest.raises(ValueError, match="triton-interpreter"):
            sweep(shape=SweepShape(8, 1024, 32, 8, 128), backend="triton-interpreter")
        with pytest.raises(ValueError, match="cuda"):
            sweep(shape=TINY_SHAPE, backend="cuda")


def test_cli_table_and_recorded_file(tmp_path, capsys):
    out = tmp_path / "kernel_gpu_results.json"
    if not CUDA:   # --out is for GPU results; refused on CPU without --allow-non-gpu
        assert main(["--tiny", "--block-sizes", "1,4", "--repeats", "3", "--out", str(out)]) == 2
        assert "GPU" in capsys.readouterr().err and not out.exists()
    assert main(["--tiny", "--block-sizes", "1,4", "--repeats", "3", "--out", str(out), "--allow-non-gpu"]) == 0
    text = capsys.readouterr().out
    assert "overhead" in text and "backend:" in text
    data = json.loads(out.read_text())
    assert {"device", "date", "versions", "shape", "backend"} <= set(data["meta"])
    assert {"torch", "triton"} <= set(data["meta"]["versions"])
    assert len(data["rows"]) == 2
    # the page's loader: nothing -> [], a non-GPU file -> a clear error naming the file
    assert load_recorded(assets=tmp_path / "empty") == []
    if not CUDA:
        with pytest.raises(ValueError, match="kernel_gpu_results.json: backend is 'torch-cpu'"):
            load_recorded(assets=tmp_path)
    data["meta"]["backend"] = "cuda"
    out.write_text(json.dumps(data))
    rec = load_recorded(assets=tmp_path)
    assert len(rec) == 1 and rec[0].meta["recorded"] and rec[0].meta["file"] == out.name
    (tmp_path / "kernel_gpu_results_bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="kernel_gpu_results_bad.json"):
        load_recorded(assets=tmp_path)


def test_cli_bad_input_is_one_line(capsys):
    assert main(["--tiny", "--block-sizes", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: block_sizes")


def test_bench_section_runs_tiny(capsys):
    from kernels.sweep.bench import bench_kernels
    from tests.tools.bench import kernel_page_seconds
    met = bench_kernels(full=False, page_seconds=kernel_page_seconds)
    assert len(met) == 7 and met[0] and met[5] and met[6]   # check passes; second ask cached; paged == contiguous
    out = capsys.readouterr().out
    assert "kernel page script, warm server" in out and "the time it took against the estimate it states" in out
    assert "kernels: targets" in out
