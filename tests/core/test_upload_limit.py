"""Issue 42 (low): the upload limit is one number with one unit.

Streamlit's browser side counts ``server.maxUploadSize`` in megabytes of 1,000,000 bytes (it refused a
5,200,028-byte file as over "5.0MB") while the help text said 5 MiB (5,242,880 bytes) and the CLI capped
the same files at 5 MiB. Now the config, the CLI's cap, the readers and every text agree on 5 MB.
"""
from __future__ import annotations

import os
import tomllib

import pytest

from allocator.__main__ import main
from allocator.common.limits import MAX_UPLOAD_BYTES
from allocator.workloads.trace import MAX_BYTES, load_trace
from allocator.workloads.vllm_run import MAX_ZIP_BYTES, load_run_zip
from tests.conftest import ROOT


def test_the_config_the_cli_and_the_readers_hold_one_limit():
    with open(os.path.join(ROOT, ".streamlit", "config.toml"), "rb") as fh:
        mb = tomllib.load(fh)["server"]["maxUploadSize"]
    assert mb * 1_000_000 == MAX_UPLOAD_BYTES == MAX_BYTES == MAX_ZIP_BYTES == 5_000_000


def test_the_help_texts_state_the_limit_in_mb():
    from pages._ui.controls import UPLOAD_HELP
    assert UPLOAD_HELP.endswith("rows and 5 MB.") and "MiB" not in UPLOAD_HELP
    with open(os.path.join(ROOT, "pages", "real_engine.py"), encoding="utf-8") as fh:
        assert "MiB" not in fh.read()
    from allocator.__main__ import build_parser
    sub = build_parser()._subparsers._group_actions[0].choices["replay-vllm"]
    assert "(at most 5 MB;" in " ".join(sub.format_help().split())


def test_a_file_just_over_the_limit_is_refused_in_the_same_unit(tmp_path, capsys):
    big = tmp_path / "big.csv"
    body = b"prompt_tokens,output_tokens\n" + b"5,5\n" * (MAX_UPLOAD_BYTES // 4)
    big.write_bytes(body[:MAX_UPLOAD_BYTES + 1])
    assert main(["simulate", "--trace", str(big)]) == 2
    err = capsys.readouterr().err
    assert "is 5.0 MB; the limit is 5 MB (5,000,000 bytes)" in err and err.count("\n") == 1, err
    with pytest.raises(ValueError, match=r"the file is 5\.2 MB; the limit is 5 MB"):
        load_trace(b"prompt_tokens,output_tokens\n" + b"5,5\n" * 1_300_000)
    with pytest.raises(ValueError, match=r"the zip is 5\.2 MB; the limit is 5 MB \(5,000,000 bytes\)"):
        load_run_zip(b"PK" + b"\0" * 5_200_026)


# ------------------------------------------------------------------ counts in messages (issue 42, low)

def test_counts_in_messages_have_thousands_separators_and_their_singular(tmp_path, capsys):
    """"the file has 1300000 rows" and "1 requests" came from messages built with bare counts."""
    with pytest.raises(ValueError, match=r"the file has 1,300,000 rows; at most 200,000 are accepted"):
        load_trace(b"prompt_tokens,output_tokens\n" + b"5,5\n" * 1_300_000, max_bytes=10**8)
    one = tmp_path / "one.csv"
    one.write_text("prompt_tokens,output_tokens\n5,5\n")
    assert main(["simulate", "--trace", str(one)]) == 0
    assert "workload " in (text := capsys.readouterr().out) and ": 1 request, pool " in text, text
