"""Issue 42: a CSV of many columns or huge cells is refused before it is parsed, and an upload is
parsed in the server's heavy-work queue.

Before: one data row of 560,000 empty columns (3.8 MB, under the 5 MiB upload cap) took the CLI
114 s and 1.3 GB, and each upload parsed outside the queue (three at once took the server to 4 GB).
Nothing here is timed: "before it is parsed" is checked by making pandas' reader fail if called.
"""
from __future__ import annotations

import pandas as pd
import pytest

from allocator.common.errors import FieldError
from allocator.workloads.trace import MAX_CELL_CHARS, MAX_COLUMNS, load_trace
from pages._ui import cache, heavy

WIDE = b"prompt_tokens,output_tokens" + b"," * 560_000 + b"\n5,6" + b"," * 560_000 + b"\n"


@pytest.fixture
def no_pandas_parse(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("pandas parsed a file the shape checks should have refused")
    monkeypatch.setattr(pd, "read_csv", refuse)


@pytest.mark.parametrize("data, words", [
    (WIDE, f"the header has 560,002 columns; at most {MAX_COLUMNS} are accepted"),
    (b"prompt_tokens,output_tokens\n5,6" + b"," * 3_800_000 + b"\n", "row 1 has 3,800,002 columns"),
    (b"prompt_tokens,output_tokens\n" + b"5,6\n" * 10 + b"7," + b"8" * 2_000_000 + b"\n",
     f"line 12 has a cell longer than {MAX_CELL_CHARS:,} characters"),
    (b'prompt_tokens,output_tokens\n"' + b"9" * 5_000_000 + b'",1\n', "line 2 has a cell longer than"),
    (b"prompt_tokens,output_tokens\n5,6\n" + b"x," * 300 + b"\n", "row 2 has 301 columns"),
])
def test_a_misshapen_file_is_refused_before_it_is_parsed(no_pandas_parse, data, words):
    with pytest.raises(FieldError) as err:
        load_trace(data, max_bytes=8 << 20)
    text = str(err.value)
    assert words in text and err.value.field == "trace", text
    assert len(text) < 300 and "\n" not in text and "Error" not in text and "field limit" not in text


def test_the_csv_modules_limit_is_left_as_it_was():
    import csv
    before = csv.field_size_limit()
    with pytest.raises(FieldError):
        load_trace(b"prompt_tokens,output_tokens\n" + b"1" * 5000 + b",5\n")
    assert csv.field_size_limit() == before


def test_a_line_break_inside_an_unquoted_cell_is_named_in_plain_words():
    """A CR in a cell of a CR LF file: csv used to answer with Python's "universal-newline mode" advice."""
    with pytest.raises(FieldError) as err:
        load_trace(b"prompt_tokens,output_tokens\r\n10\r7,5\r\n20,3\r\n")
    assert "universal" not in str(err.value) and "row 1 has 1 field but the header has 2" in str(err.value)
    # quoted, the same break is part of the text: a cell that is not a number, named as one
    with pytest.raises(FieldError) as err:
        load_trace(b'prompt_tokens,output_tokens\r\n"10\r7",5\r\n')
    assert "row 1, column prompt_tokens: '10\\r7' is not a number" in str(err.value)


def test_an_upload_is_parsed_in_the_heavy_work_queue_once(monkeypatch):
    queued = []
    real = heavy.run_heavy

    def run_heavy(what, fn, *args, **kwargs):
        queued.append(what)
        return real(what, fn, *args, **kwargs)
    monkeypatch.setattr(heavy, "run_heavy", run_heavy)
    heavy.STORE.clear()
    try:
        data = b"prompt_tokens,output_tokens\n10,5\n20,3\n"
        assert cache.uploaded_rows(data) == 2 and queued == ["Reading the uploaded trace"]
        assert cache.uploaded_rows(bytes(data)) == 2 and len(queued) == 1     # the same file: no second parse
        with pytest.raises(FieldError):
            cache.uploaded_rows(WIDE)
        assert queued == ["Reading the uploaded trace"] * 2
    finally:
        heavy.STORE.clear()
