"""The shipped model configs: KV bytes per token against a hand computation for every model, each
alternative's factors (MHA / GQA / MLA, bf16 / FP8, full / sliding-window layers), and the
sequences that fit each way, written out as arithmetic."""
from __future__ import annotations

import json
import math
import os

import pytest

from allocator import accounting as acc
from allocator.accounting import kv_configs as kc
from allocator.common.errors import FieldError

GIB = 1 << 30

# Hand computations (bf16 = 2 bytes; x 2 for K and V; MLA: latent + rope key, no x 2, no heads).
HAND = {
    "llama3.1-8b": 32 * 8 * 128 * 2 * 2,            # 131,072 = 128 KiB
    "llama3.1-70b": 80 * 8 * 128 * 2 * 2,           # 327,680 = 320 KiB
    "qwen3-32b": 64 * 8 * 128 * 2 * 2,              # 262,144 = 256 KiB
    "deepseek-v3": 61 * (512 + 64) * 2,             # 70,272 = 68.625 KiB
    "gpt-oss-120b": 36 * 8 * 64 * 2 * 2,            # 73,728 = 72 KiB, every layer keeping every token
}


@pytest.mark.parametrize("key", kc.CONFIG_KEYS)
def test_bytes_per_token_of_every_shipped_config_is_the_hand_computation(key):
    model = kc.model_kv(key)
    row = kc.kv_variant(model, model.scheme, "auto", False, 66 * GIB, 2048, 350, 16)
    assert row.bytes_per_token == HAND[key]
    assert row.elements_per_layer * model.layers * 2 == HAND[key]


def test_the_numbers_written_out():
    assert HAND == {"llama3.1-8b": 131_072, "llama3.1-70b": 327_680, "qwen3-32b": 262_144,
                    "deepseek-v3": 70_272, "gpt-oss-120b": 73_728}
    # Llama 3.1 70B is R6's 320 KiB, the 70B preset the lesson already had
    assert HAND["llama3.1-70b"] == acc.PRESETS["llama3-70b"].bytes_per_token == 320 * 1024


def test_the_configs_read_as_published():
    ds = kc.model_kv("deepseek-v3")
    assert (ds.layers, ds.kv_lora_rank, ds.qk_rope_head_dim, ds.heads, ds.kv_heads) == (61, 512, 64, 128, 128)
    assert (ds.k_head_dim, ds.v_head_dim, ds.scheme, ds.window_layers) == (128 + 64, 128, "mla", 0)
    oss = kc.model_kv("gpt-oss-120b")
    assert (oss.layers, oss.window_layers, oss.full_layers, oss.sliding_window) == (36, 18, 18, 128)
    assert (oss.heads, oss.kv_heads, oss.k_head_dim, oss.scheme) == (64, 8, 64, "gqa")
    q = kc.model_kv("qwen3-32b")
    assert (q.window_layers, q.sliding_window, q.max_context) == (0, 0, 40_960)
    assert kc.model_kv("llama3.1-8b").k_head_dim == 4096 // 32 == 128
    for key in kc.CONFIG_KEYS:
        m = kc.model_kv(key)
        assert m.source.startswith("https://huggingface.co/") and m.source.endswith("/config.json")
        assert m.read == "2026-12-03" and m.bytes_per_element == 2


def test_every_config_is_in_the_readme_with_its_source():
    readme = open(os.path.join(kc.CONFIG_DIR, "README.md"), encoding="utf-8").read()
    for key in kc.CONFIG_KEYS:
        assert f"`{key}.json`" in readme and kc.model_kv(key).source in readme


def test_mha_gqa_mla_side_by_side():
    llama = kc.model_kv("llama3.1-70b")
    assert kc.elements_per_layer(llama, "mha") == 64 * 128 * 2          # one K/V head per query head
    assert kc.elements_per_layer(llama, "gqa") == 8 * 128 * 2           # its 8 K/V heads
    assert kc.elements_per_layer(llama, "mla") is None                  # no latent in its weights
    ds = kc.model_kv("deepseek-v3")
    assert kc.elements_per_layer(ds, "mla") == 512 + 64
    assert kc.elements_per_layer(ds, "mha") == 128 * ((128 + 64) + 128)   # decompressed K 192, V 128
    # MHA would cache 61 x 40,960 x 2 = 4,997,120 bytes per token: 71.1 times the latent's 70,272
    assert 61 * 40_960 * 2 == 4_997_120
    with pytest.raises(FieldError) as err:
        kc.elements_per_layer(ds, "mqa")
    assert err.value.field == "scheme"


def test_fp8_halves_the_bytes_and_adds_eight_bytes_of_scales_per_layer_not_per_token():
    ds = kc.model_kv("deepseek-v3")
    row = kc.kv_variant(ds, "mla", "fp8", False, 66 * GIB, 2048, 350, 16)
    assert row.bytes_per_element == 1 and row.bytes_per_token == 61 * 576 * 1 == 35_136
    assert kc.fp8_scale_bytes(ds) == 61 * (4 + 4) == 488
    with pytest.raises(FieldError) as err:
        kc.kv_dtype_bytes(ds, "int4")
    assert err.value.field == "kv_cache_dtype"


def test_a_windowed_layer_stops_growing_at_its_window():
    oss = kc.model_kv("gpt-oss-120b")
    per_layer = 8 * 64 * 2 * 2                                           # 2,048 bytes per token per layer
    row = kc.kv_variant(oss, "gqa", "auto", True, 66 * GIB, 2048, 350, 16)
    assert (row.full_bytes_per_token, row.window_bytes_per_token) == (18 * per_layer, 18 * per_layer) == (36_864,) * 2
    # reserve-max: 2,048 tokens in the 18 full layers, min(2048, 128) = 128 in the 18 windowed ones
    assert row.reserved_bytes == 36_864 * 2048 + 36_864 * 128 == 80_216_064
    assert row.used_bytes == 36_864 * 350 + 36_864 * 128
    # paged: ceil(350 / 16) = 22 blocks = 352 slots per full layer; a windowed layer keeps at most
    # ceil(127 / 16) + 1 = 9 blocks = 144 slots
    assert (row.paged_slots, row.window_paged_slots) == (352, 144)
    assert row.paged_bytes == 36_864 * 352 + 36_864 * 144 == 18_284_544
    assert row.fit_reserve == (66 * GIB) // 80_216_064 == 883
    assert row.fit_paged == (66 * GIB) // 18_284_544 == 3875
    full = kc.kv_variant(oss, "gqa", "auto", False, 66 * GIB, 2048, 350, 16)
    assert full.reserved_bytes == 73_728 * 2048 and full.paged_bytes == 73_728 * 352
    assert full.fit_reserve == (66 * GIB) // (73_728 * 2048) == 469
    assert full.fit_paged == (66 * GIB) // (73_728 * 352) == 2730


@pytest.mark.parametrize("mean, block, slots", [(100, 16, 112), (128, 16, 128), (129, 16, 144),
                                                (5000, 16, 144), (5000, 128, 256), (1, 1, 1), (5000, 1, 128)])
def test_window_paged_slots(mean, block, slots):
    assert kc.window_paged_slots(mean, 128, block) == slots


@pytest.mark.parametrize("key", kc.CONFIG_KEYS)
def test_without_windows_a_variant_is_the_lessons_capacity(key):
    model = kc.model_kv(key)
    row = kc.kv_variant(model, model.scheme, "auto", False, 66 * GIB, 2048, 350, 16)
    cap = acc.capacity(row.bytes_per_token, 66 * GIB, 2048, 350, 16)
    assert (row.reserved_bytes, row.paged_bytes) == (cap.reserved_bytes, cap.paged_bytes)
    assert (row.fit_reserve, row.fit_paged) == (cap.fit_reserve, cap.fit_paged)


def test_the_alternatives_each_change_one_factor():
    rows = kc.kv_alternatives(kc.model_kv("gpt-oss-120b"), "auto", 66 * GIB, 2048, 350, 16)
    assert [r.change for r in rows] == ["as configured", "mha", "dtype", "no window"]
    assert [r.scheme for r in rows] == ["gqa", "mha", "gqa", "gqa"]
    assert [r.windowed for r in rows] == [True, True, True, False]
    assert rows[1].bytes_per_token == 36 * 64 * 64 * 2 * 2 == 589_824
    assert rows[2].kv_cache_dtype == "fp8" and rows[2].bytes_per_token == 36_864
    ds = kc.kv_alternatives(kc.model_kv("deepseek-v3"), "fp8", 66 * GIB, 2048, 350, 16)
    assert [r.change for r in ds] == ["as configured", "mha", "dtype"]      # GQA = MHA: 128 K/V heads
    assert ds[2].kv_cache_dtype == "auto" and ds[2].bytes_per_token == 70_272
    llama = kc.kv_alternatives(kc.model_kv("llama3.1-8b"), "auto", 66 * GIB, 2048, 350, 16)
    assert [r.change for r in llama] == ["as configured", "mha", "dtype"]
    assert llama[1].bytes_per_token == 32 * 32 * 128 * 2 * 2 == 524_288   # R5's 7B figure: same shape, no GQA
    # the sequences that fit: GQA's 128 KiB per token against MHA's 512 KiB
    assert llama[0].fit_reserve == (66 * GIB) // (131_072 * 2048) == 264
    assert llama[1].fit_reserve == 66 and llama[1].fit_paged == 384         # R5's counts


def test_bad_input_names_its_field():
    m = kc.model_kv("llama3.1-8b")
    for kwargs, field in [({"free_bytes": -1}, "free_bytes"), ({"max_context": 0}, "max_context"),
                          ({"mean_tokens": 3000}, "mean_tokens"), ({"block_size": 0}, "block_size")]:
        args = {"free_bytes": GIB, "max_context": 2048, "mean_tokens": 350, "block_size": 16, **kwargs}
        with pytest.raises(FieldError) as err:
            kc.kv_variant(m, "gqa", "auto", False, **args)
        assert err.value.field == field
    with pytest.raises(FieldError) as err:
        kc.kv_variant(m, "mla", "auto", False, GIB, 2048, 350, 16)
    assert err.value.field == "scheme"
    with pytest.raises(FieldError) as err:
        kc.model_kv("gpt-5")
    assert err.value.field == "model"


def test_a_damaged_config_is_named(tmp_path, monkeypatch):
    bad = {"name": "x", "config": {"num_hidden_layers": "many", "num_attention_heads": 8}}
    with pytest.raises(FieldError) as err:
        kc._parse("x", bad)
    assert err.value.field == "model" and "num_hidden_layers" in str(err.value)
    with pytest.raises(FieldError) as err:
        kc._parse("x", {"config": {"num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 4,
                                   "sliding_window": 8, "layer_types": ["full_attention"],
                                   "max_position_embeddings": 16}})
    assert "layer_types" in str(err.value)
    for key in kc.CONFIG_KEYS:                          # every shipped file parses as JSON with a config
        with open(os.path.join(kc.CONFIG_DIR, f"{key}.json"), encoding="utf-8") as f:
            assert isinstance(json.load(f)["config"], dict)
    assert math.isclose(HAND["deepseek-v3"] / 1024, 68.625)
