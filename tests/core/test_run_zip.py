"""Issue 37, item 5: a run folder uploaded as a zip (allocator/workloads/vllm_run.py load_run_zip),
read with the same bounded readers as a run directory; every damaged zip is one plain line."""
import io
import json
import os
import zipfile

import numpy as np
import pytest

from allocator.__main__ import main
from allocator.common.errors import FieldError
from allocator.studies.vllm_replay import replay_zip
from allocator.workloads.vllm_run import (MAX_REQUEST_BYTES, MAX_ZIP_BYTES, MAX_ZIP_MEMBERS, SHIPPED_RUN, load_run,
                                          load_run_zip)

FILES = ("meta.json", "requests.jsonl", "timeseries.csv")


def shipped_files() -> dict:
    return {f: open(os.path.join(SHIPPED_RUN, f), "rb").read() for f in FILES}


def make_zip(entries: dict, method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buf.getvalue()


def one_line_error(data: bytes, name: str = "run.zip") -> str:
    with pytest.raises(FieldError) as exc:
        load_run_zip(data, name)
    msg = str(exc.value)
    assert "\n" not in msg and "Traceback" not in msg and "/tmp" not in msg
    return msg


def test_a_zipped_run_folder_reads_as_the_folder():
    files = shipped_files()
    folder = load_run(SHIPPED_RUN)
    for entries, name in (({f"rtxpro6000_llama-3.1-8b/{f}": d for f, d in files.items()}, "anything.zip"),
                          (dict(files), "rtxpro6000_llama-3.1-8b.zip")):
        entries["rtxpro6000_llama-3.1-8b/notes.txt" if "/" in next(iter(entries)) else "notes.txt"] = b"skipped"
        entries["__MACOSX/._meta.json"] = b"\x00junk"
        run = load_run_zip(make_zip(entries), name)
        assert run.name == "rtxpro6000_llama-3.1-8b" and run.model == folder.model and len(run) == 300
        assert np.array_equal(run.queued, folder.queued) and np.array_equal(run.output, folder.output)
        assert run.timeseries.equals(folder.timeseries)


def test_the_upload_replays_with_both_cost_models_as_the_shipped_run():
    reps = replay_zip(make_zip(shipped_files()), "rtxpro6000_llama-3.1-8b.zip")
    assert set(reps) == {"roofline", "profile"}
    from allocator.studies.vllm_replay import replay
    assert reps["profile"].table == replay(load_run(SHIPPED_RUN), cost_model="profile").table


def test_not_a_zip_and_a_damaged_zip():
    assert "the upload is not a zip archive (or a damaged one)" in one_line_error(b"meta.json, not a zip")
    good = make_zip(shipped_files())
    assert "not a zip archive" in one_line_error(good[: len(good) // 2])           # cut short: no central directory
    # a flipped byte inside a member's compressed data: the CRC check names the file
    i = good.index(b"requests.jsonl") + 200
    bad = good[:i] + bytes([good[i] ^ 0xFF]) + good[i + 1:]
    assert "requests.jsonl cannot be extracted from the zip (damaged" in one_line_error(bad)


def test_too_large_zipped_and_a_zip_bomb():
    assert "the zip is 5.0 MB; the limit is 5 MB (5,000,000 bytes)" in one_line_error(b"PK" + b"\x00" * MAX_ZIP_BYTES)
    files = shipped_files()
    files["requests.jsonl"] = b" " * (MAX_REQUEST_BYTES + 10)                   # 8 MB of blanks: a few KiB zipped
    data = make_zip(files)
    assert len(data) < 100_000
    assert "requests.jsonl is 8.0 MB when extracted; the limit is 8 MB (8,000,000 bytes)" in one_line_error(data)


def test_a_header_that_understates_a_member_is_stopped_at_the_limit():
    files = shipped_files()
    files["meta.json"] = b" " * (2**20 + 5000) + files["meta.json"]
    data = bytearray(make_zip(files))
    # rewrite meta.json's sizes (local header and central directory) to claim 100 bytes
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as z:
        info = z.getinfo("meta.json")
    true = info.file_size.to_bytes(4, "little")
    assert bytes(data).count(true) >= 2
    data = bytes(data).replace(true, (100).to_bytes(4, "little"))
    # Python's reader stops at the stated size, and the stored checksum then fails: refused, never read whole
    assert "meta.json cannot be extracted from the zip" in one_line_error(data)


def test_missing_files_and_two_runs():
    files = shipped_files()
    assert "requests.jsonl is missing from the zip" in one_line_error(make_zip({"meta.json": files["meta.json"]}))
    assert "meta.json is missing from the zip" in one_line_error(make_zip({"r/requests.jsonl": files["requests.jsonl"]}))
    assert "meta.json is missing from the zip" in one_line_error(make_zip({"readme.txt": b"hello"}))
    two = make_zip({f"{d}/{f}": v for d in ("a", "b") for f, v in files.items()})
    assert "the zip holds 2 runs" in one_line_error(two)
    deep = make_zip({f"a/b/{f}": v for f, v in files.items()})
    assert "lies more than one folder deep" in one_line_error(deep)


@pytest.mark.parametrize("name", ["../meta.json", "run/../../etc/meta.json", "/etc/meta.json", "C:/run/meta.json",
                                  "run\\..\\meta.json"])
def test_path_traversal_names_are_refused(name):
    files = shipped_files()
    entries = {f"run/{f}": v for f, v in files.items()}
    entries[name] = b"{}"
    msg = one_line_error(make_zip(entries))
    assert "the zip holds an unsafe entry name" in msg and "zip the run folder itself" in msg


def test_too_many_entries():
    entries = {f"run/x{i}.txt": b"" for i in range(MAX_ZIP_MEMBERS + 1)}
    assert f"lists {MAX_ZIP_MEMBERS + 1:,} entries" in one_line_error(make_zip(entries))


def test_wrong_format_inside_is_named_as_for_a_folder():
    files = shipped_files()
    files["meta.json"] = b'{"model": '
    assert "meta.json" in one_line_error(make_zip(files))
    files = shipped_files()
    files["requests.jsonl"] = b'{"input_toks": 5}\n'
    assert "requests.jsonl line 1: output_toks is missing" in one_line_error(make_zip(files))
    files = shipped_files()
    files["meta.json"] = json.dumps({"model": "meta-llama/Llama-3.1-8B", "engine_kwargs": {}}).encode()
    files["requests.jsonl"] = b"\xff\xfe not utf-8\n"
    assert "not UTF-8" in one_line_error(make_zip(files))


def test_the_cli_replays_a_zip_and_refuses_a_damaged_one(tmp_path, capsys):
    good = tmp_path / "rtxpro6000_llama-3.1-8b.zip"
    good.write_bytes(make_zip(shipped_files()))
    assert main(["replay-vllm", str(good), "--cost-model", "profile"]) == 0
    assert "simulated (profile)" in capsys.readouterr().out
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip at all")
    assert main(["replay-vllm", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "the upload is not a zip archive" in err and err.count("\n") == 1
