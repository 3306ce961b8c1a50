"""Property test (issue 12): every sub-command of ``python -m allocator`` with generated arguments
and trace files either works or says, in a line or two, which input is wrong -- never more.

Each example runs the CLI in-process (``allocator.__main__.main``) with stdout and stderr captured
and every warning turned into an error (a numpy RuntimeWarning must never reach a user), in a
fresh temporary folder. Arguments are drawn per option from the values it takes and from the
kinds of bad value a user types (negative, zero, fractional, 1e400, nan, inf, 10**30, text, empty);
trace bodies have ragged rows, duplicate or missing headers, non-finite and huge cells, and come in
UTF-8, UTF-8 with a BOM, UTF-16, Latin-1 and CP-1252; paths are sometimes folders, missing, the
trace itself, or an existing file. For every run:

* the exit status is 0 or 2 and nothing escapes (no traceback, no warning);
* stderr holds at most three lines, and a failed run's message names the input it is about;
* a failed ``export-html`` leaves no output and no temporary file, and an existing output file
  keeps its old content; a successful one writes every file it was asked for;
* a run takes at most ``RUN_SECONDS``.

Examples are bounded (``max_examples`` below) so the whole file runs in well under a minute on a
2-core machine; the processes it starts are the two of ``test_a_real_process_...`` only.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from allocator.__main__ import main
from allocator.common.limits import LIMITS
from allocator.common.mathutils import cdiv
from tests.conftest import ROOT

#: Longest one in-process run may take (seconds); the slowest valid draw here takes about 2 s.
#: (Valid values are kept to what runs in seconds: 200 trace requests behind a 4,096-token shared
#: prompt with --sweep take about 25 s, which is a matter of speed, not of input.)
RUN_SECONDS = 30

#: What users type where a number belongs, besides the option's good values.
BAD_NUMBERS = ["0", "-1", "-5", "2.5", "0.0001", "1e400", "-1e400", "nan", "NaN", "inf", "-inf", "1e300",
               str(10 ** 12), str(10 ** 30), "9" * 400, "abc", "", " ", "1,5", "0x10", "\u0661\u0662", "\u00e9",
               "-1e-3", "-.5", "-nan", "9" * 5000, "-" + "9" * 5000, "\u00b2"]

#: Words of which a failed run's message must contain at least one: the field's name, the option's
#: spelling, or the trace's row, column or file.
FIELD_WORDS = (set(LIMITS) | {"trace", "row", "column", "file", "out", "handout", "csv", "title", "share",
                              "lengths", "candidates", "mean_tokens", "model", "workload", "arrival",
                              "preemption", "argument", "arguments", "share_block_size", "policy", "policies",
                              "gpu", "gpus"})

SCENARIO_VALUES = {
    "--slots": ["64", "1000", "2048", "8192", "100000"],
    "--block-size": ["1", "16", "256", "4096", "4097"],
    "--max-new-tokens": ["1", "50", "600", "4194304"],
    "--seed": ["0", "7", "4294967295"],
    "--arrival": ["burst", "trickle", "poisson"],
    "--arrival-rate": ["0.001", "0.5", "1000"],
    "--offset": ["0", "3", "19365", "199999"],
    "--count": ["1", "12", "40"],
    "--steps-per-second": ["0.001", "20", "1000000"],
    "--metadata-cost": ["0", "0.25", "8", "1000000"],
    "--shared-prefix": ["0", "16", "256"],
    "--preemption": ["recompute", "swap"],
    "--policy": ["max", "pow2", "oracle"],
    "--gpu": ["a100-40gb", "l4", "h200"],
    "--model": ["opt-13b", "llama3-70b", "7b-fp16"],
}
ACCOUNT_VALUES = {
    "--reserve": ["32", "2048", "10000000"],
    "--metadata-cost": ["0", "1", "4"],
    "--block-size": ["1", "4", "16", "4096"],
    "--pool-slots": ["0", "40960", str(10 ** 12)],
    "--share-block-size": ["1", "4"],
}
CAPACITY_VALUES = {
    "--model": ["7b-fp16", "llama3-70b", "opt-13b", "gpt-9"],
    "--layers": ["1", "32", "1024"],
    "--kv-heads": ["1", "8"],
    "--head-dim": ["64", "128", "16384"],
    "--bytes-per-element": ["1", "2", "8"],
    "--free-gib": ["0", "66", "1048576"],
    "--max-context": ["1", "2048", "10000000"],
    "--mean-tokens": ["0.5", "350", "2048"],
    "--block-size": ["1", "16", "4096"],
}
LIST_ITEMS = ["5", "9", "17", "0", "-9", "2.5", "nan", "inf", "1e400", str(10 ** 30), "abc", "", " 20 "]

CELLS = ["1", "5", "10", "350", "2048", "0", "-5", "2.5", "inf", "-inf", "1e400", "NaN", "1e300",
         "99999999999", "", "x", '"7"', "\u00e9"]
TIMESTAMPS = ["2023-11-16 18:15:46", "2023-11-16 18:15:47.5", "2023-11-16T18:15:48Z", "2023-11-16 18:15:46",
              "not a time", "", "2262-04-12 00:00:00", "1677-09-21 00:00:00"]
HEADERS = ["prompt_tokens,output_tokens", "prompt_tokens,output_tokens,arrival_s",
           "TIMESTAMP,ContextTokens,GeneratedTokens", "prompt_tokens,prompt_tokens,output_tokens",
           "prompt_tokens", "foo,bar", "", "prompt_tokens,output_tokens,"]
ENCODINGS = ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "latin-1", "cp1252"]


@st.composite
def number(draw, values: list[str], bad_rate: int):
    """One option's value: a bad kind with probability ``bad_rate`` in 10, else a good one."""
    bad = draw(st.integers(0, 9)) < bad_rate
    return draw(st.sampled_from(BAD_NUMBERS if bad else values))


#: How often an option's value is bad, per example: never (the run should work), sometimes, often.
BAD_RATES = st.sampled_from([0, 0, 1, 5])


@st.composite
def csv_bodies(draw) -> bytes:
    """A trace file's bytes: a header, a few rows (some ragged), one of several encodings -- or,
    one time in three, a good file (either schema, UTF-8 with or without a BOM)."""
    if draw(st.integers(0, 2)) == 0:
        azure = draw(st.booleans())
        n = draw(st.integers(1, 6))
        lengths = [(draw(st.integers(1, 3000)), draw(st.integers(1, 800))) for _ in range(n)]
        lines = (["TIMESTAMP,ContextTokens,GeneratedTokens"]
                 + [f"2023-11-16 18:{15 + i:02d}:46.5,{p},{o}" for i, (p, o) in enumerate(lengths)]
                 if azure else ["prompt_tokens,output_tokens,arrival_s"]
                 + [f"{p},{o},{0.5 * i}" for i, (p, o) in enumerate(lengths)])
        return ("\n".join(lines) + "\n").encode(draw(st.sampled_from(["utf-8", "utf-8-sig"])))
    header = draw(st.sampled_from(HEADERS))
    width = max(1, len(header.split(",")))
    rows = []
    for i in range(draw(st.integers(0, 5))):
        n = draw(st.sampled_from([width, width, width, width - 1, width + 1]))
        cells = []
        for j in range(max(0, n)):
            if header.startswith("TIMESTAMP") and j == 0:
                cells.append(draw(st.sampled_from(TIMESTAMPS)))
            elif header.endswith("arrival_s") and j == 2:
                cells.append(draw(st.sampled_from([str(i), "0.5", "-1", "inf", "1e300", "x", ""])))
            else:
                cells.append(draw(st.sampled_from(CELLS)))
        rows.append(",".join(cells))
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))          # CR alone: Excel's "CSV (Macintosh)"
    text = newline.join([header, *rows]) + draw(st.sampled_from([newline, ""]))
    data = text.encode(draw(st.sampled_from(ENCODINGS)), errors="replace")
    return gzip.compress(data) if draw(st.integers(0, 9)) == 0 else data   # a .csv.gz given as the CSV


@st.composite
def scenario_args(draw, folder: str) -> list[str]:
    """The scenario options of simulate / export-html, some given, most left out."""
    argv = []
    bad_rate = draw(BAD_RATES)
    source = draw(st.sampled_from(["default", "classroom-40", "azure-conv", "trace", "trace", "folder",
                                   "missing", "devnull"]))
    if source in ("classroom-40", "azure-conv"):
        argv += ["--workload", source]
    elif source == "trace":
        argv += ["--trace", os.path.join(folder, "t.csv")]
    elif source == "folder":
        argv += ["--trace", folder]
    elif source == "missing":
        argv += ["--trace", os.path.join(folder, "nope.csv")]
    elif source == "devnull":
        argv += ["--trace", os.devnull]
    for option, values in SCENARIO_VALUES.items():
        if draw(st.integers(0, 3)) == 0:
            argv += option_value(option, draw(number(values, bad_rate)), draw(st.booleans()))
    if draw(st.booleans()):
        argv.append("--sweep")
    if draw(st.booleans()):
        argv.append("--json")
    return argv


def option_value(option: str, value: str, joined: bool) -> list[str]:
    """``--opt=value`` or, as most people type it, ``--opt value`` (a value such as ``-1e-3`` or
    ``-inf`` must then still be taken as the value, not as an option)."""
    return [f"{option}={value}"] if joined or not value.strip() else [option, value]


def run_cli(argv: list[str]) -> tuple[int, str, str, float]:
    """Run ``main(argv)`` in-process: (exit status, stdout, stderr, seconds). Any exception other
    than argparse's SystemExit -- a warning turned error included -- fails the test with its
    traceback."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as stop:          # argparse: a command line it cannot read
                rc = stop.code
            except BaseException:               # noqa: BLE001 - report what escaped
                raise AssertionError(f"{argv!r} raised:\n{traceback.format_exc()}") from None
    return rc, out.getvalue(), err.getvalue(), time.perf_counter() - start


def check_run(argv: list[str], rc: int, stdout: str, stderr: str, seconds: float) -> None:
    """The properties every run has (see the module docstring)."""
    event(f"{argv[0]} exit {rc}" + (" with a note" if "note:" in stderr else ""))
    assert rc in (0, 2), (argv, rc, stderr)
    assert "Traceback" not in stderr and "Warning" not in stderr, (argv, stderr)
    lines = stderr.splitlines()
    assert len(lines) <= 3, (argv, stderr)
    if rc == 2:
        message = lines[-1] if lines else ""
        assert message.startswith("error: ") or ": error: " in message, (argv, stderr)
        words = set(message.replace("=", " ").replace(":", " ").replace(",", " ").replace("[", " ").split())
        assert (words & FIELD_WORDS or any(w in message for w in ("--", "row ", "line ", "file"))
                or any(re.fullmatch(r"-[A-Za-z]", w) for w in words)), (argv, message)   # -o, as typed
        typed = " ".join(argv).lower()
        if "inf" not in typed and "1e400" not in typed:          # a long number is not echoed as inf
            assert "= inf" not in message and "= -inf" not in message, (argv, message)
        assert len(message) < 600, (argv, message[:300])             # nothing typed is echoed at length
    elif "--json" in argv:
        json.loads(stdout)
    assert seconds < RUN_SECONDS, (argv, seconds)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(max_examples=150, **SETTINGS)
@given(data=st.data(), body=csv_bodies())
def test_simulate_with_generated_arguments_and_traces(data, body):
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "t.csv"), "wb") as fh:
            fh.write(body)
        argv = ["simulate", *data.draw(scenario_args(folder))]
        check_run(argv, *run_cli(argv))


@st.composite
def jsonl_bodies(draw) -> bytes:
    """A Mooncake JSONL trace's bytes: a few requests, one time in two all good, otherwise with
    one line or field broken (not JSON, a field missing or of the wrong type, hash ids of the
    wrong length, a timestamp going back); sometimes gzip-compressed."""
    import gzip

    rows = []
    t = 0
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 1500))
        blocks = cdiv(n, 512)
        ids = [draw(st.integers(0, 3)) for _ in range(blocks)]       # small ids: prefixes repeat
        t += draw(st.integers(0, 3000))
        rows.append({"timestamp": t, "input_length": n, "output_length": draw(st.integers(1, 300)),
                     "hash_ids": ids})
    lines = [json.dumps(r) for r in rows]
    if draw(st.booleans()):
        i = draw(st.integers(0, len(lines) - 1))
        broken = dict(rows[i])
        kind = draw(st.sampled_from(["text", "missing", "type", "ids", "time", "negative", "extreme"]))
        if kind == "text":
            lines[i] = draw(st.sampled_from(["{", "not json", "[1, 2]", "null", '{"timestamp": NaN}']))
        elif kind == "extreme":                 # shapes the JSON reader itself refuses or mis-splits
            field = draw(st.sampled_from(["timestamp", "input_length", "output_length"]))
            lines[i] = draw(st.sampled_from([
                "[" * 100_000,                                              # nesting past the recursion limit
                json.dumps(broken).replace(f'"{field}": {broken[field]}', f'"{field}": {"9" * 5000}'),
                json.dumps({**broken, "timestamp": 1e300}),                 # past the engine's clock
                json.dumps(broken)[:-1] + ', "note": "a\u2028b\u0085c"}',    # raw line separators in a string
            ]))
        else:
            if kind == "missing":
                broken.pop(draw(st.sampled_from(sorted(broken))))
            elif kind == "type":
                broken[draw(st.sampled_from(sorted(broken)))] = draw(st.sampled_from(["7", 2.5, None, [], 1e400]))
            elif kind == "ids":
                broken["hash_ids"] = broken["hash_ids"] + [9]
            elif kind == "time":
                broken["timestamp"] = -1
            else:
                broken["input_length"] = -broken["input_length"]
            lines[i] = json.dumps(broken)
    body = ("\n".join(lines) + "\n").encode()
    return gzip.compress(body) if draw(st.booleans()) else body


@settings(max_examples=60, **SETTINGS)
@given(data=st.data(), body=jsonl_bodies())
def test_simulate_prefix_caching_with_generated_jsonl_traces(data, body):
    """--prefix-caching on a Mooncake JSONL trace (issue 15), good or broken, with other options."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t.jsonl.gz" if body[:2] == b"\x1f\x8b" else "t.jsonl")
        with open(path, "wb") as fh:
            fh.write(body)
        argv = ["simulate", "--trace", path]
        bad_rate = data.draw(BAD_RATES)
        for option in ("--offset", "--count", "--block-size", "--slots", "--preemption", "--max-new-tokens"):
            if data.draw(st.integers(0, 2)) == 0:
                argv.append(f"{option}={data.draw(number(SCENARIO_VALUES[option], bad_rate))}")
        if data.draw(st.integers(0, 3)):
            argv.append("--prefix-caching")
        if data.draw(st.booleans()):
            argv.append("--json")
        rc, stdout, stderr, seconds = run_cli(argv)
        check_run(argv, rc, stdout, stderr, seconds)
        if rc == 0 and "--json" in argv and "--prefix-caching" in argv:
            paged = json.loads(stdout)["paged"]
            assert paged["cached_block_evictions"] >= 0
            if paged["finished"]:
                assert 0 <= paged["prefix_cache_hit_rate"] <= 1
            else:                               # every request rejected: no prompt, no hit rate
                assert paged["prefix_cache_hit_rate"] is None and paged["prefill_tokens_saved"] == 0


@settings(max_examples=40, **SETTINGS)
@given(data=st.data(), body=csv_bodies())
def test_export_html_writes_everything_or_nothing(data, body):
    with tempfile.TemporaryDirectory() as folder:
        trace = os.path.join(folder, "t.csv")
        with open(trace, "wb") as fh:
            fh.write(body)
        existing = os.path.join(folder, "old.html")
        with open(existing, "w", encoding="utf-8") as fh:
            fh.write("OLD")
        paths = {"new": os.path.join(folder, "a.html"), "new2": os.path.join(folder, "b.csv"),
                 "new3": os.path.join(folder, "c.html"), "existing": existing, "folder": folder,
                 "no_folder": os.path.join(folder, "no", "x.html"), "trace": trace, "empty": ""}
        if data.draw(st.booleans()):
            paths["new"] = existing                     # replacing a file is fine; failing must keep it
        argv = ["export-html", *data.draw(scenario_args(folder))]
        good = data.draw(st.integers(0, 2)) > 0         # two times in three, every path can be written
        argv += ["-o", paths["new"] if good else paths[data.draw(st.sampled_from(list(paths)))]]
        for option, name in (("--handout", "new3"), ("--csv", "new2")):
            if data.draw(st.booleans()):
                argv += [option, paths[name if good and data.draw(st.integers(0, 3)) else
                                       data.draw(st.sampled_from(list(paths)))]]
        if data.draw(st.booleans()):
            argv += ["--title", data.draw(st.sampled_from(["Lesson 3", "", "\u00e9t\u00e9 <b>", "x" * 300]))]
        targets = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-o", "--handout", "--csv")]
        before = set(os.listdir(folder))
        rc, stdout, stderr, seconds = run_cli(argv)
        check_run(argv, rc, stdout, stderr, seconds)
        after = set(os.listdir(folder))
        assert not [name for name in after if name.endswith(".part")], (argv, after)
        if rc == 2:
            assert after == before, (argv, stderr, after - before)
            with open(existing, encoding="utf-8") as fh:
                assert fh.read() == "OLD", (argv, stderr)
        else:
            for path in targets:
                assert os.path.isfile(path) and os.path.getsize(path) > 100, (argv, path)


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_account_with_generated_arguments(data):
    argv = ["account"]
    bad_rate = data.draw(BAD_RATES)
    good_items = ["5", "9", "17", "512", "37", "1900", "1"]
    items = st.sampled_from(good_items) if bad_rate == 0 else st.sampled_from(LIST_ITEMS + good_items)
    if data.draw(st.integers(0, 9)):
        argv.append("--lengths=" + ",".join(data.draw(st.lists(items, min_size=bad_rate == 0, max_size=4))))
    for option, values in ACCOUNT_VALUES.items():
        if option == "--reserve" and data.draw(st.integers(0, 9)) or data.draw(st.integers(0, 2)) == 0:
            argv.append(f"{option}={data.draw(number(values, bad_rate))}")
    if data.draw(st.booleans()):
        argv.append("--candidates=" + ",".join(data.draw(st.lists(items, min_size=bad_rate == 0, max_size=4))))
    if data.draw(st.booleans()):
        argv.append("--share=" + ",".join(data.draw(st.lists(items, min_size=3 * (bad_rate == 0), max_size=4))))
    if data.draw(st.booleans()):
        argv.append("--json")
    check_run(argv, *run_cli(argv))


@settings(max_examples=150, **SETTINGS)
@given(data=st.data())
def test_capacity_with_generated_arguments(data):
    argv = ["capacity"]
    bad_rate = data.draw(BAD_RATES)
    for option, values in CAPACITY_VALUES.items():
        required = option in ("--free-gib", "--max-context")
        if (required and data.draw(st.integers(0, 9))) or data.draw(st.integers(0, 2)) == 0:
            value = (data.draw(st.sampled_from(values)) if option == "--model"
                     else data.draw(number(values, bad_rate)))
            argv.append(f"{option}={value}")
    if "--mean-tokens" not in " ".join(argv) and data.draw(st.integers(0, 4)):    # usually one of the two
        items = st.sampled_from(["5", "9", "350", "1900"] + (LIST_ITEMS if bad_rate else []))
        argv.append("--lengths=" + ",".join(data.draw(st.lists(items, min_size=bad_rate == 0, max_size=4))))
    if data.draw(st.booleans()):
        argv.append("--json")
    check_run(argv, *run_cli(argv))


def test_a_real_process_shows_no_warning_and_no_traceback(tmp_path):
    """Two of the issue's examples as a user runs them, with numpy warnings as errors: the
    in-process runs above cannot see what the interpreter itself prints."""
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\ninf,5\n", encoding="utf-8")
    for argv in (["simulate", "--trace", str(trace)], ["simulate", "--sweep", "--metadata-cost", "nan"]):
        proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "allocator", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


RATE_SWEEP_VALUES = {
    "--requests": ["10", "24", "40"],
    "--block-size": ["1", "16", "256"],
    "--max-new-tokens": ["64", "512"],
    "--latency-factor": ["2", "10", "20"],
    "--seed": ["0", "7"],
}
GPUS_VALUES = ["auto", "1", "2", "4", "8", "3", "0", "-1", "\u00b2", "abc", "", "1e400", "9" * 5000, "2.0"]
RATES_VALUES = ["1,2", "0.5", "1,2,4", "0", "-1", "nan", "abc", "1,,2", "1e400", "9" * 5000, ""]


@settings(max_examples=30, **SETTINGS)
@given(data=st.data())
def test_rate_sweep_with_generated_arguments(data):
    """rate-sweep is bounded here by always naming few requests and rates (a good run takes ~0.2 s)."""
    bad_rate = data.draw(BAD_RATES)
    argv = ["rate-sweep", "--rates", data.draw(st.sampled_from(RATES_VALUES if bad_rate else ["1,2", "0.5,3"]))]
    argv += option_value("--requests", data.draw(number(RATE_SWEEP_VALUES["--requests"], bad_rate)),
                         data.draw(st.booleans()))           # always given: the default, 1,000, takes seconds
    for option, values in RATE_SWEEP_VALUES.items():
        if option != "--requests" and data.draw(st.integers(0, 2)) == 0:
            argv += option_value(option, data.draw(number(values, bad_rate)), data.draw(st.booleans()))
    if data.draw(st.booleans()):
        argv += option_value("--gpus", data.draw(st.sampled_from(GPUS_VALUES if bad_rate else ["auto", "1", "2"])),
                             data.draw(st.booleans()))
    if data.draw(st.integers(0, 3)) == 0:
        argv += ["--gpu", data.draw(st.sampled_from(["a100-40gb", "h200", "l4"])),
                 "--model", data.draw(st.sampled_from(["opt-13b", "7b-fp16", "llama3-8b"]))]
    if data.draw(st.booleans()):
        argv.append("--json")
    rc, out, err, seconds = run_cli(argv)
    check_run(argv, rc, out, err, seconds)
    gpus = argv[argv.index("--gpus") + 1] if "--gpus" in argv else None
    if gpus is not None and gpus not in ("auto", "1", "2", "4", "8"):
        assert rc == 2 and "error: --gpus " in err and "must be auto or one of 1, 2, 4, 8" in err, (argv, err)


def test_negative_numbers_are_values_that_the_range_refuses():
    """argparse alone reads ``--arrival-rate -1e-3`` as a missing value followed by an option."""
    for argv, words in ((["simulate", "--metadata-cost", "-inf"], "--metadata-cost -inf is not a finite number"),
                        (["simulate", "--arrival", "trickle", "--arrival-rate", "-1e-3"],
                         "--arrival-rate -1e-3 must be a number from 0.001"),
                        (["simulate", "--slots", "-.5"], "--slots -.5"),
                        (["simulate", "--slots", "9" * 5000],
                         "--slots: a 5,000-digit value is too long (at most 400 digits): give a whole number")):
        rc, out, err, _ = run_cli(argv)
        assert rc == 2 and words in err, (argv, err)


def test_ctrl_c_while_writing_leaves_no_file_and_no_traceback(tmp_path, monkeypatch):
    """Ctrl-C between the second file's write and the renames: exit 130, one word, nothing on disk."""
    from allocator.cli import common
    calls = []

    def interrupted(handle, text):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        handle.write(text)
    monkeypatch.setattr(common, "_write_text", interrupted)
    out, csv = tmp_path / "a.html", tmp_path / "a.csv"
    rc, _, err, _ = run_cli(["export-html", "--out", str(out), "--csv", str(csv)])
    assert rc == 130 and err == "interrupted\n", err
    assert os.listdir(tmp_path) == []


def test_ctrl_c_in_a_real_process_exits_130_quietly(tmp_path):
    """A real SIGINT during a rate-sweep: status 130, no traceback. The process sends the signal to
    itself as the sweep starts its first run (a wrapper around the sweep's ``simulate``), so the
    signal always lands inside the sweep, however busy the machine: nothing waits on the clock."""
    code = ("import os, signal, sys\n"
            # as at a terminal: a shell that starts the suite in the background hands its children
            # SIGINT ignored, and Python then leaves it ignored (the signal would change nothing)
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "import allocator.studies.rate_sweep as rs\n"
            "from allocator.__main__ import main\n"
            "real = rs.simulate\n"
            "def interrupted(*a, **k):\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    return real(*a, **k)\n"
            "rs.simulate = interrupted\n"
            "sys.exit(main(['rate-sweep', '--requests', '3000']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 130 and proc.stderr == "interrupted\n", (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == ""                         # nothing half-printed


def test_a_run_past_the_memory_limit_is_stopped_with_a_message(tmp_path, monkeypatch):
    """The input caps allow a 10 GB run; the CLI watches its memory and stops with a message (here the
    limit is set below what the process already holds, so the first check trips). The guard's
    interrupt is a simulated SIGINT, which does nothing where SIGINT is ignored (a suite started in
    the background by a shell): the test sets Python's own handler, as at a terminal."""
    import signal

    from allocator.cli import common
    monkeypatch.setattr(common, "MEMORY_LIMIT", 1 << 20)
    monkeypatch.setattr(common.MemoryGuard.__init__, "__defaults__", (1 << 20, 0.05))
    hard_stops = []                       # the guard's last resort would end pytest itself: recorded instead
    monkeypatch.setattr(common, "_hard_stop", hard_stops.append)
    out = tmp_path / "a.html"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        rc, _, err, _ = run_cli(["export-html", "--workload", "azure-conv", "--count", "200", "--out", str(out)])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 2 and "error: stopped: this run passed 0.0 GiB of memory (a quarter of this machine's" in err, err
    assert "Traceback" not in err and not out.exists() and hard_stops == []


def test_every_list_the_account_help_shows_is_accepted(capsys):
    """Issue 40: ``account --help`` wrote ``1..256`` as if it were a value, and ``account`` refused it.
    Every comma-separated list of numbers the help shows for --candidates is one ``account`` takes."""
    import re

    from allocator.__main__ import main
    with pytest.raises(SystemExit):
        main(["account", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    shown = text.split("--candidates CANDIDATES", 2)[-1].split("--pool-slots")[0]
    lists = re.findall(r"\b\d+(?:,\d+)+\b", shown)
    lists = [v for v in lists if v != "4,096"]        # the range's top, written with a thousands separator
    assert lists == ["1,2,4,8,16,32", "1,2,4,8,16,32,64,128,256"] and ".." not in shown
    for value in lists:
        assert main(["account", "--lengths", "5,9,17", "--reserve", "32", "--candidates", value, "--json"]) == 0
    capsys.readouterr()
