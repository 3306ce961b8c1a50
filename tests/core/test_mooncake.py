"""The Mooncake trace: loader (bad input by kind), token ids derived from hash ids, prefix keys."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from allocator.memory.block_hash import prefix_block_keys
from allocator.workloads.mooncake import (MOONCAKE_TRACE, TRACE_BLOCK, load_mooncake, mooncake_workload,
                                          prompt_token_ids, shipped_mooncake)
from allocator.common.errors import FieldError

GOOD = [{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 250, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]}]


def _jsonl(rows) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def test_loads_the_schema():
    df = load_mooncake(_jsonl(GOOD))
    assert df["prompt_tokens"].tolist() == [600, 1100] and df["output_tokens"].tolist() == [5, 7]
    assert df["arrival_s"].tolist() == [0.0, 0.25]                    # milliseconds -> seconds
    assert df["hash_ids"].tolist() == [(0, 1), (0, 1, 2)]
    # gzip, a BOM, CRLF line ends and blank lines are all fine
    assert load_mooncake(gzip.compress(_jsonl(GOOD))).equals(df)
    assert load_mooncake(b"\xef\xbb\xbf" + _jsonl(GOOD).replace(b"\n", b"\r\n\r\n")).equals(df)


def test_shipped_trace_is_the_whole_conversation_trace():
    df = shipped_mooncake()
    assert len(df) == 12_031
    assert round(df["prompt_tokens"].mean()) == 12_035 and round(df["output_tokens"].mean()) == 343
    assert round(df["arrival_s"].iloc[-1]) == 3_537


def _bad(rows_or_bytes, match: str, field: str | None = None):
    data = rows_or_bytes if isinstance(rows_or_bytes, bytes) else _jsonl(rows_or_bytes)
    with pytest.raises(FieldError, match=match) as info:
        load_mooncake(data)
    if field:
        assert info.value.field == field
    return info.value


def _with(i: int, **change):
    rows = [dict(r) for r in GOOD]
    rows[i].update(change)
    for k, v in list(change.items()):
        if v is ...:
            del rows[i][k]
    return rows


@pytest.mark.parametrize("rows, match, field", [
    (b"", "the file has no requests", "trace"),
    (b"\n\n", "the file has no requests", "trace"),
    (b'{"timestamp": 0, "input_length": 5\n', r"line 1 is not valid JSON", "trace"),
    (b"[1, 2, 3]\n", "line 1 is not a JSON object", "trace"),
    (_with(1, hash_ids=...), r"line 2, field hash_ids: is missing", "hash_ids"),
    (_with(0, input_length="600"), r'line 1, field input_length: "600" is not a whole number', "input_length"),
    (_with(0, input_length=600.5), r"line 1, field input_length: 600.5 is not a whole number", "input_length"),
    (_with(0, input_length=0), r"line 1, field input_length: 0 is below the minimum 1", "input_length"),
    (_with(0, output_length=True), r"line 1, field output_length: true is not a whole number", "output_length"),
    (_with(0, output_length=10 ** 9), r"output_length: 1000000000 is above the maximum", "output_length"),
    (_with(0, timestamp=-1), r"line 1, field timestamp: -1 is not a non-negative number", "timestamp"),
    (_with(0, timestamp=float("nan")), r"line 1, field timestamp: NaN is not", "timestamp"),
    (_with(1, timestamp=-0.5), r"line 2, field timestamp", "timestamp"),
    (_with(1, timestamp=0, hash_ids=[0, 1]), r"line 2, field hash_ids: has 2 ids but input_length 1100 needs 3",
     "hash_ids"),
    (_with(0, hash_ids="0,1"), r'line 1, field hash_ids: "0,1" is not a list', "hash_ids"),
    (_with(0, hash_ids=[0, -1]), r"line 1, field hash_ids: item 2 = -1 is not a block id", "hash_ids"),
    (_with(0, hash_ids=[0, 1.5]), r"item 2 = 1.5 is not a block id", "hash_ids"),
    (b"\xff\xfe\n", "not UTF-8", "trace"),
    (b"\x1f\x8b\x08garbage", "not a readable gzip file", "trace"),
], ids=lambda x: x if isinstance(x, str) and " " not in x else None)
def test_bad_input_names_line_and_field(rows, match, field):
    _bad(rows, match, field)


def test_unsorted_timestamps_are_refused():
    rows = [dict(GOOD[1], timestamp=500), dict(GOOD[0], timestamp=100)]
    err = _bad(rows, r"line 2, field timestamp: 100 ms is earlier than the line before \(500 ms\)")
    assert err.index == 1


def test_too_many_rows_and_missing_file(tmp_path):
    with pytest.raises(FieldError, match="more than 1 request$"):
        load_mooncake(_jsonl(GOOD), max_rows=1)
    with pytest.raises(FileNotFoundError):
        load_mooncake(tmp_path / "nope.jsonl")


def test_token_ids_share_exactly_what_the_hash_ids_share():
    a = prompt_token_ids([7, 8, 9], 1200)           # 512 + 512 + 176 tokens
    b = prompt_token_ids([7, 8, 4], 1100)           # first two blocks equal, third different
    c = prompt_token_ids([7, 8, 9, 3], 1700)        # a's partial third block is c's full one
    assert a.shape == (1200,) and a.dtype == np.int64 and (a >= 0).all()
    assert np.array_equal(a[:1024], b[:1024]) and not np.array_equal(a[1024:1100], b[1024:1100])
    assert np.array_equal(a, c[:1200])
    assert len(np.unique(a)) > 1190                 # tokens within a prompt are not all alike
    with pytest.raises(FieldError, match="hash_ids"):
        prompt_token_ids([1, 2], 1500)


@pytest.mark.parametrize("block_size", [1, 16, 24, 512])
def test_prefix_keys_match_exactly_the_shared_tokens(block_size):
    a = prompt_token_ids([7, 8, 9], 1200)
    b = prompt_token_ids([7, 8, 4], 1100)
    ka, kb = prefix_block_keys(a, block_size), prefix_block_keys(b, block_size)
    assert len(ka) == 1200 // block_size and len(kb) == 1100 // block_size
    shared = 1024 // block_size                      # blocks lying wholly inside the equal prefix
    assert ka[:shared] == kb[:shared]
    assert all(x != y for x, y in zip(ka[shared:], kb[shared:]))
    assert len(set(ka)) == len(ka)                   # every block's key differs from the others


def test_prefix_keys_are_chained():
    # the same block after a different first block gets a different key
    x = np.arange(32)
    y = np.concatenate([np.arange(100, 116), np.arange(16, 32)])
    assert prefix_block_keys(x, 16)[1] != prefix_block_keys(y, 16)[1]
    assert prefix_block_keys(np.arange(15), 16) == []
    with pytest.raises(FieldError, match="block_size"):
        prefix_block_keys(x, 0)


def test_workload_window_carries_prompts():
    wl = mooncake_workload(shipped_mooncake(), offset=10, count=3)
    assert [r.id for r in wl.requests] == [11, 12, 13]
    assert wl.requests[0].arrival_step == 0
    r = wl.requests[1]
    toks = wl.prompts.tokens(r.id)
    assert len(toks) == r.prompt_len and len(wl.prompts.hash_ids(r.id)) == -(-r.prompt_len // TRACE_BLOCK)
    with pytest.raises(FieldError, match="offset"):
        mooncake_workload(shipped_mooncake(), offset=12_031)
    assert MOONCAKE_TRACE.endswith("mooncake_conversation_trace.jsonl.gz")


# --- extreme shapes (issue 19) -------------------------------------------------------------------

def _with_line(line: str) -> bytes:
    return (json.dumps(GOOD[0]) + "\n" + line + "\n").encode()


@pytest.mark.parametrize("line, field, words", [
    ("[" * 100_000, "trace", "line 2 nests lists or objects too deeply to read"),
    (json.dumps(GOOD[1]).replace("1100", "9" * 5000), "input_length",
     "line 2, field input_length: a 5,000-digit value is too long (at most 30 digits): give a whole number "
     "from 1 to 10,000,000"),
    (json.dumps(GOOD[1]).replace('"timestamp": 250', '"timestamp": ' + "9" * 5000), "timestamp",
     "line 2, field timestamp: a 5,000-digit value is too long (at most 30 digits): give a non-negative "
     "number of milliseconds"),
    (json.dumps({**GOOD[1], "timestamp": 1e300}), "timestamp",
     "line 2, field timestamp: 1e+300 ms is 1e+300 ms after the first request: past the engine's clock"),
])
def test_extreme_lines_are_named_by_line_and_field(line, field, words):
    with pytest.raises(FieldError) as err:
        load_mooncake(_with_line(line))
    assert err.value.field == field and words in str(err.value), str(err.value)
    assert len(str(err.value)) < 300


def test_a_raw_line_separator_inside_a_string_does_not_split_the_line():
    """U+2028, U+2029 and U+0085 are legal raw in a JSON string; ``str.splitlines`` would cut there."""
    row = json.dumps(GOOD[1])[:-1] + ', "note": "a\u2028b\u2029c\u0085d"}'
    df = load_mooncake(_with_line(row))
    assert df["prompt_tokens"].tolist() == [600, 1100]


def test_a_window_past_the_clock_at_its_speed_names_the_timestamp():
    df = load_mooncake(_jsonl([GOOD[0], {**GOOD[1], "timestamp": 1e17}]))
    with pytest.raises(FieldError) as err:
        mooncake_workload(df, count=2, steps_per_second=1e6)
    assert err.value.field == "timestamp" and "request 2, field timestamp: 1e+17 ms after the window's first " \
                                                 "request is past the engine's clock at 1e+06 steps per second" \
        in str(err.value), str(err.value)
