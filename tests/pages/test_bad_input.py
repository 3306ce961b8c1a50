"""Uploaded traces and bad input: each case is a file in tests/data/traces/ (or generated when it
must be large), each gets a message naming the row and column or the problem, and the page keeps
running with the last good workload on screen."""
import json
import os

import pytest
from streamlit.testing.v1 import AppTest

from allocator.__main__ import main
from allocator.engine.scenario import UPLOAD_MAX_ROWS, Scenario, run_scenario
from allocator.workloads.trace import MAX_BYTES, load_trace
from tests.conftest import APP_PATH, metric, ROOT, seen

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
    with pytest.raises(ValueError, match=r"MB; the limit is 5 MB \(5,000,000 bytes\)"):
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
    assert any(name in seen(s.value) for s in at.success)


@pytest.mark.parametrize("name, message", sorted(BAD.items()))
def test_bad_upload_keeps_last_good_workload(upload_page, name, message):
    at = upload_page
    at.file_uploader(key="trace_file").upload("good_plain.csv", read("good_plain.csv"), "text/csv").run()
    good = metric(at, "Steps to drain")
    assert good
    at.file_uploader(key="trace_file").upload(name, read(name), "text/csv").run()
    assert not at.exception
    assert any(message in seen(e.value) for e in at.sidebar.error), [e.value for e in at.sidebar.error]
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
    # refused by its length before any check quotes it (issue 42: cells are bounded before parsing)
    assert len(str(err.value)) < 200 and "0" * 20 not in str(err.value)
    assert "line 2 has a cell longer than 1,000 characters" in str(err.value)


def test_an_arrival_past_the_engines_clock_is_named(capsys):
    assert main(["simulate", "--trace", os.path.join(TRACES, "far_arrival.csv"), "--json"]) == 2
    err = capsys.readouterr().err
    assert "row 2, column arrival_s" in err and "past the engine's clock" in err and "Traceback" not in err
    # a clock that fast is refused by its range before any arrival is computed
    assert main(["simulate", "--workload", "azure-conv", "--steps-per-second", "1e300", "--json"]) == 2
    assert "--steps-per-second 1e300 must be a number from 0.001 to 1,000,000" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--trace", "/tmp"], "error: /tmp is a directory, not a trace file"),    # named as typed
    (["--slots", "10000000000"], "--slots 10000000000 must be a whole number from 1 to 1,073,741,824 (slots)"),
    (["--shared-prefix", "99999999999999999999"], "--shared-prefix 99999999999999999999 must be a whole number "
                                                  "from 0 to 4,194,304 (tokens)"),
    (["--shared-prefix", "100000000"], "--shared-prefix 100000000 must be a whole number from 0 to 4,194,304"),
    (["--metadata-cost", "nan", "--sweep"], "--metadata-cost nan is not a number: give a number from 0 to "
                                            "1,000,000 (slot equivalents per block)"),
    (["--metadata-cost", "-1", "--sweep"], "--metadata-cost -1 must be a number from 0 to 1,000,000"),
])
def test_the_cli_refuses_what_it_cannot_run(capsys, argv, message):
    """Tracebacks, a 5 GB hang and silent NaN costs before: a one-line message now, at once."""
    assert main(["simulate", *argv, "--json"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_everything_rejected_sweep_prints_dashes(capsys):
    """A pool every request is rejected from prints dashes, not zeros, in its block-size sweep."""
    assert main(["simulate", "--workload", "azure-conv", "--slots", "64", "--sweep"]) == 0
    out = capsys.readouterr().out
    assert "averages over all steps" in out and out.rstrip().endswith("-")
    # a shared prompt that fills the pool is refused before anything runs (issue 40: it printed this
    # table of dashes and exited 0)
    assert main(["simulate", "--shared-prefix", "4096", "--sweep"]) == 2
    assert "--shared-prefix 4,096 tokens fills the whole pool" in capsys.readouterr().err


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


# --- issue 12: bad input, by kind. Each example of the issue is a test with its message ----------

def _cli(capsys, *argv):
    """``main(argv)`` in-process with numpy warnings as errors: (exit status, stdout, stderr)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("cell", ["inf", "1e400", "-inf", "NaN"])
def test_a_non_finite_cell_is_named_by_row_column_and_value(tmp_path, capsys, cell):
    """`inf` and `1e400` were an OverflowError traceback: every numeric cell is finite first."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"prompt_tokens,output_tokens\n{cell},5\n", encoding="utf-8")
    rc, _, err = _cli(capsys, "simulate", "--trace", str(trace))
    word = "a number" if cell == "NaN" else "a finite number"
    assert rc == 2 and err == f"error: row 1, column prompt_tokens: '{cell}' is not {word}: give a whole number of tokens\n"


def test_an_empty_cell_is_called_empty_not_nan(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n10,\n", encoding="utf-8")
    rc, _, err = _cli(capsys, "simulate", "--trace", str(trace))
    assert rc == 2 and "row 1, column output_tokens: the cell is empty" in err and "nan" not in err


#: The issue's numbers, and the brief's: each flag of simulate (and export-html) with bad values,
#: whether or not the option matters for the run -> the message naming field, value and range.
NUMERIC_FLAGS = [
    (["--sweep", "--metadata-cost", "-1"], "--metadata-cost -1 must be a number from 0 to 1,000,000 "
                                           "(slot equivalents per block)"),
    (["--metadata-cost", "-1"], "--metadata-cost -1 must be a number from 0 to 1,000,000"),
    (["--metadata-cost", "nan"], "--metadata-cost nan is not a number: give a number from 0 to 1,000,000"),
    (["--metadata-cost", "inf"], "--metadata-cost inf is not a finite number: give a number from 0 to 1,000,000"),
    (["--arrival-rate", "nan"], "--arrival-rate nan is not a number: give a number from 0.001 to 1,000 "
                                "(requests per step)"),
    (["--arrival-rate", "0"], "--arrival-rate 0 must be a number from 0.001 to 1,000"),
    (["--arrival-rate", "1e300", "--arrival", "trickle"], "--arrival-rate 1e300 must be a number from 0.001 to 1,000"),
    (["--steps-per-second", "nan"], "--steps-per-second nan is not a number: give a number from 0.001 to 1,000,000"),
    (["--steps-per-second", "0"], "--steps-per-second 0 must be a number from 0.001 to 1,000,000"),
    (["--count", "0"], "--count 0 must be a whole number from 1 to 200,000 (requests)"),
    (["--count", "-5"], "--count -5 must be a whole number from 1 to 200,000"),
    (["--count", str(10 ** 9)], "--count 1000000000 must be a whole number from 1 to 200,000"),
    (["--offset", "-1"], "--offset -1 must be a whole number from 0 to 199,999 (trace rows, from 0)"),
    (["--max-new-tokens", "0"], "--max-new-tokens 0 must be a whole number from 1 to 4,194,304 (tokens)"),
    (["--max-new-tokens", str(10 ** 12)], "--max-new-tokens 1000000000000 must be a whole number from 1 to 4,194,304"),
    (["--block-size", "0"], "--block-size 0 must be a whole number from 1 to 4,096 (slots per block)"),
    (["--block-size", str(10 ** 6)], "--block-size 1000000 must be a whole number from 1 to 4,096"),
    (["--seed", "-1"], "--seed -1 must be a whole number from 0 to 4,294,967,295"),
    (["--seed", str(10 ** 30)], "--seed 1000000000000000000000000000000 must be a whole number from 0 to 4,294,967,295"),
    (["--seed", "2.5"], "--seed 2.5 is not a whole number: give a whole number from 0 to 4,294,967,295"),
    (["--slots", "abc"], "--slots 'abc' is not a number: give a whole number from 1 to 1,073,741,824"),
    (["--shared-prefix", "1e400"], "--shared-prefix 1e400 is not a finite number: give a whole number from 0"),
    (["--slots", "64", "--block-size", "128"], "--block-size 128 is larger than the pool (64 slots)"),
]


@pytest.mark.parametrize("argv, message", NUMERIC_FLAGS, ids=[" ".join(a) for a, _ in NUMERIC_FLAGS])
def test_every_numeric_flag_of_simulate_is_checked_up_front(capsys, argv, message):
    """`--seed -1` said "expected non-negative integer" (numpy's words, no field); `--sweep
    --metadata-cost -1` printed nan costs while `account` refused the value. Now one table of
    ranges (allocator.common.limits.LIMITS) checks every flag first, used by this run or not."""
    rc, out, err = _cli(capsys, "simulate", *argv, "--json")
    assert rc == 2 and out == "" and err.startswith("error: " + message) and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, message", NUMERIC_FLAGS[::3], ids=[" ".join(a) for a, _ in NUMERIC_FLAGS[::3]])
def test_export_html_checks_the_same_flags_before_writing(tmp_path, capsys, argv, message):
    out = tmp_path / "b.html"
    rc, _, err = _cli(capsys, "export-html", *argv, "-o", str(out), "--csv", str(tmp_path / "m.csv"))
    assert rc == 2 and err.startswith("error: " + message) and os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv, message", [
    (["account", "--lengths", "5,9", "--reserve", "0"], "--reserve 0 must be a whole number from 1 to 10,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "1e30"], "--reserve 1e30 must be a whole number from 1 to 10,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--metadata-cost", "inf"],
     "--metadata-cost inf is not a finite number: give a number from 0 to 1,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--metadata-cost", "-1"],
     "--metadata-cost -1 must be a number from 0 to 1,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--block-size", str(10 ** 6)],
     "--block-size 1000000 must be a whole number from 1 to 4,096"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--pool-slots", "-1"],
     "--pool-slots -1 must be a whole number from 0 to 1,000,000,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--share-block-size", "0"],
     "--share-block-size 0 must be a whole number from 1 to 4,096"),
    (["account", "--lengths", "5,2e7", "--reserve", "32"], "--lengths item 2 = 2e7 must be a whole number from 1 to 10,000,000"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--candidates", "4,9999"],
     "--candidates item 2 = 9999 must be a whole number from 1 to 4,096"),
    (["account", "--lengths", "5,9", "--reserve", "32", "--share", "20,23,0.5"],
     "--share item 3 = 0.5 is not a whole number: give a whole number from 0 to 10,000,000"),
    (["capacity", "--free-gib", "nan", "--max-context", "2048", "--mean-tokens", "350"],
     "--free-gib nan is not a number: give a number from 0 to 1,048,576 (GiB)"),
    (["capacity", "--free-gib", "66", "--max-context", str(10 ** 12), "--mean-tokens", "350"],
     "--max-context 1000000000000 must be a whole number from 1 to 10,000,000"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "0"],
     "--mean-tokens 0 must be a number more than 0 and at most 10,000,000 (tokens)"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--block-size", "0"],
     "--block-size 0 must be a whole number from 1 to 4,096"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--bytes-per-element", "99"],
     "--bytes-per-element 99 must be a whole number from 1 to 8 (bytes)"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--layers", "0",
      "--kv-heads", "8", "--head-dim", "128"], "--layers 0 must be a whole number from 1 to 1,024"),
])
def test_account_and_capacity_flags_are_checked_the_same_way(capsys, argv, message):
    rc, out, err = _cli(capsys, *argv)
    assert rc == 2 and out == "" and err.startswith("error: " + message) and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--offset", "3", "--count", "3", "--steps-per-second", "5"],
     "note: --offset, --count and --steps-per-second apply only to a trace (--trace or --workload azure-conv), "
     "not to classroom-40; ignored"),
    (["simulate", "--arrival-rate", "2"], "note: --arrival-rate applies only with --arrival trickle; ignored"),
    (["simulate", "--workload", "azure-conv", "--seed", "3", "--count", "5"],
     "note: --seed applies only to classroom-40, not to a trace; ignored"),
    (["simulate", "--metadata-cost", "1"], "note: --metadata-cost applies only with --sweep; ignored"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--bytes-per-element", "4"],
     "note: --bytes-per-element applies only to a custom model"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--model", "opt-13b",
      "--layers", "2", "--kv-heads", "2", "--head-dim", "64"],
     "note: --model is ignored: --layers, --kv-heads and --head-dim describe a custom model"),
])
def test_an_option_that_does_not_apply_is_named_in_a_note(capsys, argv, words):
    """Before, such options were ignored without a word."""
    rc, out, err = _cli(capsys, *argv, "--json")
    assert rc == 0 and json.loads(out) and err.startswith(words) and err.count("\n") == 1, err


def test_options_that_apply_give_no_note(capsys):
    rc, _, err = _cli(capsys, "simulate", "--arrival", "trickle", "--arrival-rate", "0.5", "--sweep",
                      "--metadata-cost", "1", "--seed", "3", "--json")
    assert rc == 0 and err == ""


# messages that named the wrong thing

def test_nan_in_a_list_is_not_a_number_not_empty(capsys):
    rc, _, err = _cli(capsys, "account", "--lengths", "nan", "--reserve", "32")
    assert rc == 2 and err == "error: --lengths item 1 = 'nan' is not a number\n"


def test_empty_candidates_ask_for_a_block_size(capsys):
    rc, _, err = _cli(capsys, "account", "--lengths", "5,9,17", "--reserve", "32", "--candidates", "")
    assert rc == 2 and err == "error: --candidates is empty: give at least one block size (slots per block)\n"


def test_a_shared_prefix_of_zero_tokens_is_accepted(capsys):
    """--share was parsed as lengths (each at least 1), so a 0-token prefix was refused as share[2]."""
    rc, out, _ = _cli(capsys, "account", "--lengths", "5,9,17", "--reserve", "32", "--share", "20,23,0", "--json")
    assert rc == 0 and json.loads(out)["prefix_sharing"]["slots_shared"] == 44


def test_capacity_asks_for_a_mean_or_lengths(capsys):
    rc, _, err = _cli(capsys, "capacity", "--free-gib", "66", "--max-context", "2048")
    assert rc == 2 and err == ("error: --mean-tokens is missing: give --mean-tokens (the mean length used) or "
                               "--lengths (the lengths themselves)\n")


def test_capacity_refuses_a_mean_and_lengths_together(capsys):
    """--lengths used to win silently."""
    rc, _, err = _cli(capsys, "capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350",
                      "--lengths", "5,9")
    assert rc == 2 and err == ("error: --mean-tokens and --lengths were both given: give --mean-tokens or --lengths, "
                               "not both\n")


def test_a_command_line_argparse_cannot_read_is_one_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["simulate", "--no-such-option"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "unrecognized arguments: --no-such-option" in err


# files that are not what they seem

@pytest.mark.parametrize("kind, message", [
    ("folder", "is a directory, not a trace file"),
    ("missing", "no such trace file"),
    ("device", "is not a regular file (a pipe or a device?)"),
    ("utf16", "the file is UTF-16 text, not UTF-8; save it as CSV UTF-8"),
    ("utf16-no-bom", "the file holds NUL bytes: it is not UTF-8 text"),
    ("latin1", "the file is not UTF-8 text (bad byte at position 32)"),
    ("name", "is not UTF-8 text; rename the file"),
])
def test_every_trace_path_is_checked_for_type_and_encoding(tmp_path, capsys, kind, message):
    """`--trace /tmp` was an IsADirectoryError traceback; /dev/zero would have been read forever."""
    body = "prompt_tokens,output_tokens\n10,5\u00e9\n"
    path = {"folder": str(tmp_path), "missing": str(tmp_path / "nope.csv"), "device": "/dev/zero"}.get(kind)
    if path is None:
        path = os.path.join(str(tmp_path), os.fsdecode(b"t\xe9.csv") if kind == "name" else "t.csv")
        data = {"utf16": body.encode("utf-16"), "utf16-no-bom": body.encode("utf-16-le"),
                "latin1": body.encode("latin-1")}.get(kind, b"prompt_tokens,output_tokens\n10,5\n")
        with open(path, "wb") as fh:
            fh.write(data)
    for command in (["simulate"], ["export-html", "-o", str(tmp_path / "x.html")]):
        rc, _, err = _cli(capsys, *command, "--trace", path)
        assert rc == 2 and message in err and err.count("\n") == 1, err
    assert not os.path.exists(tmp_path / "x.html")


def test_an_unreadable_trace_is_named(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "t.csv"
    path.write_text("prompt_tokens,output_tokens\n10,5\n", encoding="utf-8")
    path.chmod(0)
    rc, _, err = _cli(capsys, "simulate", "--trace", str(path))
    assert rc == 2 and "cannot be read: Permission denied" in err


# outputs: everything is checked first, then every file is written whole, or none is

def test_a_folder_as_csv_fails_before_the_html_is_written(tmp_path, capsys, monkeypatch):
    """`export-html -o out/b.html --csv out` reported an error only after out/b.html was written."""
    monkeypatch.chdir(tmp_path)
    os.mkdir("out")
    rc, _, err = _cli(capsys, "export-html", "-o", "out/b.html", "--csv", "out")
    assert rc == 2 and err == "error: --csv 'out' is a directory: give a file name\n"
    assert os.listdir("out") == []


@pytest.mark.parametrize("option, path, message", [
    ("-o", "no/such/x.html", "-o 'no/such/x.html' cannot be written: output directory does not exist"),
    ("--handout", "", "--handout is empty: give a file name"),
    ("--csv", "/dev/null", "--csv '/dev/null' is not a regular file (a device or a pipe?)"),
    ("--csv", "t.csv", "--csv 't.csv' is the trace being read: give another file name"),
    ("--handout", "a.html", "--handout 'a.html' names the same file as --out: the HTML, handout and CSV outputs "
                            "must be different files"),
    ("--title", os.fsdecode(b"\xff"), "--title '\\udcff' is not UTF-8 text"),
])
def test_every_output_path_is_checked_before_anything_is_written(tmp_path, capsys, monkeypatch, option, path, message):
    monkeypatch.chdir(tmp_path)
    with open("t.csv", "w", encoding="utf-8") as fh:
        fh.write("prompt_tokens,output_tokens\n10,5\n")
    rc, _, err = _cli(capsys, "export-html", "--trace", "t.csv", "-o", "a.html", option, path)
    assert rc == 2 and err.startswith("error: " + message) and sorted(os.listdir()) == ["t.csv"], err


def test_a_read_only_folder_is_named(tmp_path, capsys):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    rc, _, err = _cli(capsys, "export-html", "-o", str(folder / "x.html"))
    assert rc == 2 and "no permission to write in" in err


@pytest.mark.parametrize("failing_call", [1, 2, 3])
def test_a_full_disk_leaves_no_file_at_all(tmp_path, capsys, monkeypatch, failing_call):
    """Writing the 1st, 2nd or 3rd file fails (ENOSPC): no output, no temporary file, and a file
    that was there before keeps its content."""
    import errno
    from allocator.cli import common
    calls = []
    real = common._write_text

    def full_disk(handle, text):
        calls.append(1)
        if len(calls) == failing_call:
            handle.write(text[: len(text) // 2])          # half of it reached the disk
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle, text)

    monkeypatch.setattr(common, "_write_text", full_disk)
    old = tmp_path / "h.html"
    old.write_text("OLD", encoding="utf-8")
    rc, _, err = _cli(capsys, "export-html", "-o", str(tmp_path / "b.html"), "--handout", str(old),
                      "--csv", str(tmp_path / "m.csv"))
    assert rc == 2 and "cannot be written: No space left on device" in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["h.html"] and old.read_text(encoding="utf-8") == "OLD"


def test_a_failed_rename_takes_back_what_it_had_placed(tmp_path, capsys, monkeypatch):
    from allocator.cli import common
    real = os.replace
    calls = []

    def second_fails(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise PermissionError(13, "Permission denied")
        real(src, dst)

    monkeypatch.setattr(common.os, "replace", second_fails)
    rc, _, err = _cli(capsys, "export-html", "-o", str(tmp_path / "b.html"), "--csv", str(tmp_path / "m.csv"))
    assert rc == 2 and "--csv " in err and "cannot be written: Permission denied" in err
    assert os.listdir(tmp_path) == []


def test_a_written_file_replaces_the_old_one_whole(tmp_path, capsys):
    out = tmp_path / "b.html"
    out.write_text("OLD", encoding="utf-8")
    out.chmod(0o640)
    rc, stdout, _ = _cli(capsys, "export-html", "-o", str(out), "--csv", str(tmp_path / "m.csv"))
    assert rc == 0 and "wrote" in stdout
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html") or "plotly" in out.read_text(encoding="utf-8")
    assert (out.stat().st_mode & 0o777) == 0o640                 # its permissions are kept
    assert sorted(os.listdir(tmp_path)) == ["b.html", "m.csv"]


def test_a_missing_trace_is_named_as_typed(tmp_path, capsys, monkeypatch):
    """Issue 40: "no such trace file: rows.csv" did not say which folder was meant. The command line
    names it as typed (relative to the project inside it); exports still name a file by its base name."""
    typed = str(tmp_path / "runs" / "rows.csv")
    rc, _, err = _cli(capsys, "simulate", "--trace", typed)
    assert rc == 2 and err.strip() == f"error: no such trace file: {typed}"
    monkeypatch.chdir(tmp_path)
    rc, _, err = _cli(capsys, "simulate", "--trace", os.path.join("runs", "rows.csv"))
    assert rc == 2 and err.strip() == f"error: no such trace file: {os.path.join('runs', 'rows.csv')}"
    from allocator.common.paths import PROJECT
    rc, _, err = _cli(capsys, "simulate", "--trace", os.path.join(PROJECT, "assets", "no-such.csv"))
    assert rc == 2 and err.strip() == "error: no such trace file: assets/no-such.csv"
