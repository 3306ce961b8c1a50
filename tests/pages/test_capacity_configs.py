"""The Capacity page with a model read from its config.json: every new number on screen is the one
computed beside it (the variant rows of allocator.accounting.kv_configs), the texts quote only numbers
of the config and the result, and the presets' figures are as before."""
from __future__ import annotations

import json

import pytest

from allocator.accounting import kv_configs as kc
from allocator.viz.claims.capacity import (alternatives_rows, factors_text, fp8_scale_text, per_sequence_text,
                                           variant_label, window_note)
from tests.conftest import open_page
from tests.pages.test_claims import NUMBER, _forms

GIB = 1 << 30
PAGE = "pages/capacity.py"


def _config_numbers(m: kc.ModelKV, r: kc.KVVariant) -> set[str]:
    nums = set()
    for v in (m.layers, m.heads, m.kv_heads, m.k_head_dim, m.v_head_dim, m.kv_lora_rank, m.qk_rope_head_dim,
              m.window_layers, m.sliding_window, r.bytes_per_element, 2, r.bytes_per_token,
              r.elements_per_layer * r.bytes_per_element, r.window):
        nums |= _forms(v)
    return nums


@pytest.mark.parametrize("key", kc.CONFIG_KEYS)
@pytest.mark.parametrize("dtype", kc.KV_CACHE_DTYPES)
def test_every_number_of_the_texts_comes_from_the_config_and_the_result(key, dtype):
    m = kc.model_kv(key)
    rows = kc.kv_alternatives(m, dtype, 66 * GIB, 2048, 350, 16)
    for r in rows:
        allowed = _config_numbers(m, r)
        for text in (factors_text(m, r), variant_label(m, r)):
            assert set(NUMBER.findall(text)) <= allowed, (text, set(NUMBER.findall(text)) - allowed)
        assert factors_text(m, r).endswith(f"= {r.bytes_per_token:,} bytes")
        seq = per_sequence_text(m, r, 2048)
        assert seq.endswith(f"= {r.full_bytes_per_token * 2048 + r.window_bytes_per_token * min(2048, r.window):,} bytes")
        assert set(NUMBER.findall(seq)) <= allowed | _forms(2048) | _forms(m.full_layers) | \
            _forms(r.full_bytes_per_token * 2048 + r.window_bytes_per_token * min(2048, r.window)), seq
    fp8 = next(r for r in rows if r.kv_cache_dtype == "fp8")
    text = fp8_scale_text(m, fp8)
    assert f"{m.layers} × 8 = {kc.fp8_scale_bytes(m):,} bytes" in text and f"{fp8.bytes_per_token:,} bytes" in text
    table = alternatives_rows(m, rows, 2048)
    assert [list(t.values())[1:] for t in table] == [[r.bytes_per_token, r.reserved_bytes, r.paged_bytes,
                                                     r.fit_reserve, r.fit_paged] for r in rows]


def test_the_factors_as_the_page_writes_them():
    ds = kc.model_kv("deepseek-v3")
    row = kc.kv_alternatives(ds, "auto", GIB, 2048, 350, 16)[0]
    assert factors_text(ds, row) == ("61 layers × (512 latent + 64 rotary key) × 2 bytes (one latent per token "
                                     "per layer: no × 2, no heads) = 70,272 bytes")
    llama = kc.model_kv("llama3.1-70b")
    row = kc.kv_alternatives(llama, "auto", GIB, 2048, 350, 16)[0]
    assert factors_text(llama, row) == "80 layers × 8 K/V heads × 128 dims × 2 bytes × 2 (K and V) = 327,680 bytes"
    assert window_note(llama, row.bytes_per_token) is None


@pytest.mark.parametrize("key", kc.CONFIG_KEYS)
def test_the_page_shows_the_configs_figures(key):
    at = open_page(PAGE, timeout=60)
    at.selectbox(key="cap_model").set_value(key).run()
    assert not at.exception and not at.error
    m = kc.model_kv(key)
    rows = kc.kv_alternatives(m, "auto", 66 * GIB, 2048, 350, 16)
    metrics = {x.label: x for x in at.metric}
    assert metrics["KV cache per token"].proto.help == f"{rows[0].bytes_per_token:,} bytes"
    captions = [c.value for c in at.caption]
    assert any(c.startswith(f"{rows[0].bytes_per_token:,} bytes = {factors_text(m, rows[0])}. Source:")
               and m.source in c and m.read in c for c in captions)
    for field in m.unconfirmed:
        assert any(c.startswith(f"Not confirmed — {field}:") for c in captions)
    for r in rows:
        assert any(c.startswith(f"{variant_label(m, r)} — {factors_text(m, r)}") for c in captions)
    assert fp8_scale_text(m, next(r for r in rows if r.kv_cache_dtype == "fp8")) in captions
    table = at.dataframe[0].value
    assert table.to_dict("records") == alternatives_rows(m, rows, 2048)
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    assert [d["x"] for d in chart["data"]] == [[r.fit_reserve for r in rows], [r.fit_paged for r in rows]]
    notes = [i.value for i in at.info if "keep only the last" in i.value]
    assert notes == ([window_note(m, rows[0].bytes_per_token)] if m.window_layers else [])
    # the lesson's sections below price a slot at the model's bytes per token
    assert metrics["Sequences, reserve-max"].value == f"{(66 * GIB) // (rows[0].bytes_per_token * 2048):,}"


def test_fp8_on_the_page_halves_the_bytes_per_token():
    at = open_page(PAGE, timeout=60)
    at.selectbox(key="cap_model").set_value("deepseek-v3").run()
    at.selectbox(key="cap_kv_dtype").set_value("fp8").run()
    assert not at.exception and not at.error
    assert {x.label: x for x in at.metric}["KV cache per token"].proto.help == "35,136 bytes"
    table = at.dataframe[0].value.to_dict("records")
    assert [t["KV bytes per token (every layer)"] for t in table] == [35_136, 61 * 128 * 320, 70_272]


def _alternatives_tables(at) -> list:
    """The page's tables other than the speculation table (drawn for every model)."""
    return [d for d in at.dataframe if "lookahead slots" not in d.value.columns]


def test_the_presets_are_as_before_and_a_bad_input_is_said_once():
    at = open_page(PAGE, timeout=60)
    assert not _alternatives_tables(at) and not [c for c in at.caption if c.value.startswith("Not confirmed")]
    metrics = {x.label: x.value for x in at.metric}
    assert (metrics["KV cache per token"], metrics["Sequences, reserve-max"], metrics["Sequences, paged"]) == \
        ("512 KiB", "66", "384")
    at.selectbox(key="cap_model").set_value("gpt-oss-120b").run()
    at.number_input(key="cap_block_size").set_value(2.5).run()
    assert not at.exception
    assert [e.value for e in at.error].count("Block size \\= 2\\.5 is not a whole number\\.") == 1
    assert not at.dataframe                         # no figures from a refused block size, speculation's neither
