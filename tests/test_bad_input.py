"""Uploaded traces and bad input: each case is a file in tests/data/traces/ (or generated when it
must be large), each gets a message naming the row and column or the problem, and the page keeps
running with the last good workload on screen."""
import os

import pytest
from streamlit.testing.v1 import AppTest

from allocator.__main__ import main
from allocator.scenario import UPLOAD_MAX_ROWS, Scenario, run_scenario
from allocator.trace import MAX_BYTES, load_trace
from tests.conftest import APP_PATH, metric, ROOT

TRACES = os.path.join(ROOT, "tests", "data", "traces")

#: file -> words the message must contain (row and column where the problem has one)
BAD = {
    "empty.csv": "the file is empty",
    "header_only.csv": "header but no rows",
    "missing_column.csv": "missing columns",
    "non_numeric.csv": "row 2, column ContextTokens: 'lots' is not a number",
    "negative.csv": "row 2, column GeneratedTokens: -5 is below the minimum 1",
    "fractional.csv": "row 2, column output_tokens: '7.5' is not a whole number",
    "zero_output.csv": "row 2, column output_tokens: 0 is below the minimum 1",
    "huge_value.csv": "row 2, column ContextTokens: 99999999999 tokens is larger than any pool",
    "not_utf8.csv": "not UTF-8",
    "unsorted.csv": "row 3, column TIMESTAMP: arrivals must not go back in time",
    "duplicate_timestamp.csv": "row 2, column TIMESTAMP",
    "negative_arrival.csv": "row 2, column arrival_s",
}


def read(name):
    with open(os.path.join(TRACES, name), "rb") as f:
        return f.read()


@pytest.mark.parametrize("name, message", sorted(BAD.items()))
def test_core_names_the_problem(name, message):
    with pytest.raises(ValueError) as err:
        load_trace(read(name))
    assert message in str(err.value)


@pytest.mark.parametrize("name, message", sorted(BAD.items()))
def test_cli_reports_bad_file_without_traceback(capsys, name, message):
    assert main(["simulate", "--trace", os.path.join(TRACES, name), "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_too_many_rows_and_too_big_file(tmp_path):
    rows = "prompt_tokens,output_tokens\n" + "10,5\n" * (UPLOAD_MAX_ROWS + 1)
    with pytest.raises(ValueError, match=f"at most {UPLOAD_MAX_ROWS:,} are accepted"):
        load_trace(rows.encode(), max_rows=UPLOAD_MAX_ROWS)
    big = tmp_path / "big.csv"
    big.write_bytes(b"prompt_tokens,output_tokens\n" + b"1000000,5\n" * (MAX_BYTES // 10 + 10))
    with pytest.raises(ValueError, match="MiB; the limit is 5 MiB"):
        load_trace(str(big))


def test_good_files_in_both_schemas():
    plain = load_trace(read("good_plain.csv"))
    assert plain["prompt_tokens"].tolist() == [120, 300, 80, 2000]
    assert plain["arrival_s"].tolist() == [0.0, 0.5, 0.5, 3.25]
    azure = load_trace(read("good_azure.csv"))
    assert len(azure) == 40 and azure["prompt_tokens"].iloc[0] == 374


# --- the page ------------------------------------------------------------------------------------

@pytest.fixture
def upload_page():
    at = AppTest.from_file(APP_PATH, default_timeout=60)
    at.run()
    at.selectbox(key="workload").set_value("upload").run()
    assert not at.exception
    return at


@pytest.mark.parametrize("name", ["good_azure.csv", "good_plain.csv"])
def test_upload_both_schemas(upload_page, name):
    at = upload_page
    at.file_uploader(key="trace_file").upload(name, read(name), "text/csv").run()
    assert not at.exception
    sc = Scenario(workload="upload", trace_bytes=read(name), trace_name=name, total_slots=8192,
                  max_new_tokens=1024)
    res = run_scenario(sc, record_snapshots=False)
    assert metric(at, "Steps to drain") == [f"{res['reserve_max'].summary['steps']:,}",
                                             f"{res['paged'].summary['steps']:,}"]
    assert any(name in s.value for s in at.success)


@pytest.mark.parametrize("name, message", sorted(BAD.items()))
def test_bad_upload_keeps_last_good_workload(upload_page, name, message):
    at = upload_page
    at.file_uploader(key="trace_file").upload("good_plain.csv", read("good_plain.csv"), "text/csv").run()
    good = metric(at, "Steps to drain")
    assert good
    at.file_uploader(key="trace_file").upload(name, read(name), "text/csv").run()
    assert not at.exception
    assert any(message in e.value for e in at.sidebar.error), [e.value for e in at.sidebar.error]
    assert metric(at, "Steps to drain") == good          # the last good workload stays on screen


# --- kinds a new user's session found (the file's structure before its values; clocks; sizes) ---

STRUCTURE = {
    "extra_field.csv": "row 1 has 4 fields but the header has 3 (prompt_tokens, output_tokens, arrival_s)",
    "missing_field.csv": "row 2 has 2 fields but the header has 3",
    "duplicate_header.csv": "column prompt_tokens appears twice in the header",
    "mixed_timezones.csv": "column TIMESTAMP: the timestamps mix time zones",
}


@pytest.mark.parametrize("name, message", sorted(STRUCTURE.items()))
def test_a_misshapen_file_is_refused_never_read_shifted(name, message):
    """One extra field per row used to shift every column (prompt 500 read as 100)."""
    with pytest.raises(ValueError) as err:
        load_trace(read(name))
    assert message in str(err.value) and "utc=True" not in str(err.value)


def test_a_huge_cell_is_not_echoed_back():
    data = b"prompt_tokens,output_tokens\n" + b"0" * 100_000 + b"x,5\n"
    with pytest.raises(ValueError) as err:
        load_trace(data)
    assert len(str(err.value)) < 200 and "…" in str(err.value)


def test_an_arrival_past_the_engines_clock_is_named(capsys):
    assert main(["simulate", "--trace", os.path.join(TRACES, "far_arrival.csv"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "row 2, column arrival_s" in err and "past the engine's clock" in err and "Traceback" not in err
    # a clock that fast is refused by its range before any arrival is computed
    assert main(["simulate", "--workload", "azure-conv", "--steps-per-second", "1e300", "--json"]) == 2
    assert "steps_per_second = 1e+300 must be a number from 0.001 to 1,000,000" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--trace", "/tmp"], "/tmp is a directory, not a CSV file"),
    (["--slots", "10000000000"], "total_slots = 10000000000 must be a whole number from 1 to 4,194,304 (slots)"),
    (["--shared-prefix", "99999999999999999999"], "shared_prefix = 99999999999999999999 must be a whole number "
                                                  "from 0 to 4,194,304 (tokens)"),
    (["--shared-prefix", "100000000"], "shared_prefix = 100000000 must be a whole number from 0 to 4,194,304"),
    (["--metadata-cost", "nan", "--sweep"], "metadata_cost = nan is not a number: give a number from 0 to "
                                            "1,000,000 (slot equivalents per block)"),
    (["--metadata-cost", "-1", "--sweep"], "metadata_cost = -1.0 must be a number from 0 to 1,000,000"),
])
def test_the_cli_refuses_what_it_cannot_run(capsys, argv, message):
    """Tracebacks, a 5 GB hang and silent NaN costs before: a one-line message now, at once."""
    assert main(["simulate", *argv, "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_everything_rejected_sweep_prints_dashes(capsys):
    assert main(["simulate", "--shared-prefix", "4096", "--sweep"]) == 0
    out = capsys.readouterr().out
    assert "averages over all steps" in out and out.rstrip().endswith("-")


def test_export_refuses_to_write_one_file_twice(tmp_path, capsys):
    same = str(tmp_path / "s.html")
    assert main(["export-html", "-o", same, "--csv", same]) == 2
    assert "must be different files" in capsys.readouterr().err and not os.path.exists(same)


def test_a_closed_pipe_ends_the_cli_quietly():
    import subprocess
    import sys
    proc = subprocess.run(f"{sys.executable} -m allocator simulate --sweep --json | head -c 10",
                          shell=True, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout == '{\n  "reserv'[:10] and "Traceback" not in proc.stderr and "Broken" not in proc.stderr
