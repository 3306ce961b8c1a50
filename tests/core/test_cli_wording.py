"""Issue 42's last kinds: every message of ``python -m allocator`` words a mistake so that the user can
act on it, one way for each kind.

1. An option is named as typed (``--max-num-batched-tokens 0 ...``), never by the field behind it
   (``max_num_batched_tokens = 0``); a file's row, a run's file or several options stay as they are.
2. An item of a list option is counted from 1 (``--rates item 3``), in the name and in the advice.
3. One mistake reads the same in every command that takes the option, always with the allowed range.
4. A value is echoed as typed (``0``, not ``0.0``; ``5e-324``, not ``4.94066e-324``).
5. A number too long to read says so, with the limit.
6. A value read from JSON is echoed in JSON's spelling (``true``, ``"8"``).
7. A bad cell of a run's timeseries.csv (a NUL character) is named by file line and column.
8. Every size cap is stated in MB (1,000,000 bytes), the unit of the upload limit.
9. A SystemError or ImportError raised while a compiled module is loaded under memory pressure is
   the out-of-memory line, not a traceback.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from allocator.__main__ import main
from allocator.cli import common
from allocator.cli.common import option_message
from allocator.common.errors import FieldError

RUN = "assets/vllm_runs/rtxpro6000_llama-3.1-8b"
LONG = "1" * 5001


def _copy_run(tmp_path):
    """A copy of the shipped run under its own folder name (the name tells the replay its GPU)."""
    run = tmp_path / os.path.basename(RUN)
    shutil.copytree(RUN, run)
    return run


def _error(argv, capsys) -> str:
    """Run the CLI in-process; its one line of stderr (the run must fail with status 2)."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# --- 1. options named as typed ----------------------------------------------------------------------

@pytest.mark.parametrize("argv, want", [
    (["simulate", "--rules", "v1", "--max-num-batched-tokens", "0"],
     "error: --max-num-batched-tokens 0 must be a whole number from 1 to 10,000,000 (tokens per engine step)"),
    (["simulate", "--slots", "0"], "error: --slots 0 must be a whole number from 1 to 1,073,741,824 (slots)"),
    (["simulate", "--sliding-window", "4", "--full-attention-groups", "99"],
     "error: --full-attention-groups 99 must be a whole number from 0 to 16 (KV-cache groups of full-attention "
     "layers)"),
    # an older alias is echoed as the user typed it, and so is an abbreviation argparse took
    (["account", "--lengths", "5", "--reserve", "32", "--page-size", "0"],
     "error: --page-size 0 must be a whole number from 1 to 4,096 (slots per block)"),
    (["simulate", "--block", "0"], "error: --block-size 0 must be a whole number from 1 to 4,096 (slots per block)"),
    (["account", "--lengths", "5", "--reserve", "32", "--share-block-size", "0"],
     "error: --share-block-size 0 must be a whole number from 1 to 4,096 (slots per block)"),
    (["simulate", "--acceptance-rate", "0.5"],
     "error: --acceptance-rate 0.5 applies only with --num-speculative-tokens of 1 or more (there is nothing "
     "to accept without draft tokens)"),
    (["capacity", "--free-gib", "5", "--max-context", "4", "--mean-tokens", "3", "--layers", "3"],
     "error: --layers, --kv-heads and --head-dim must all be given for a custom model"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--lengths", "5,9"],
     "error: --mean-tokens and --lengths were both given: give --mean-tokens or --lengths, not both"),
])
def test_an_option_is_named_as_typed(capsys, argv, want):
    assert _error(argv, capsys) == want


def test_two_outputs_naming_one_file_name_both_options(tmp_path, capsys):
    same = str(tmp_path / "a.html")
    assert _error(["export-html", "-o", same, "--csv", same], capsys).startswith(
        f"error: --csv {same!r} names the same file as --out: ")


def test_what_is_not_an_option_keeps_its_name(tmp_path, capsys):
    """A trace's row and column, and a run's file, are not options: their names stay."""
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n10,5\n0,5\n", encoding="utf-8")
    assert _error(["simulate", "--trace", str(trace)], capsys) == (
        "error: row 2, column prompt_tokens: 0 is below the minimum 1")
    assert _error(["replay-vllm", str(tmp_path)], capsys) == "error: run: meta.json is missing from the run directory"


def test_option_message_maps_only_subjects_that_are_options():
    options = {"block_size": ("--block-size", "--page-size"), "rates": ("--rates",), "share": ("--share",)}
    assert option_message(FieldError("block_size", " = 0 must be ..."), options, ["--page-size", "0"]) == (
        "--page-size 0 must be ...")
    assert option_message(FieldError("block_size", " is empty"), options, []) == "--block-size is empty"
    assert option_message(FieldError("rates", " = 0 bad", index=2), options, []) == "--rates item 3 = 0 bad"
    assert option_message(FieldError("length_b", " = 0 bad"), options, []) == "--share item 2 = 0 bad"
    cell = FieldError("block_size", ": bad", index=3, subject="row 4, column block_size")
    assert option_message(cell, options, []) == "row 4, column block_size: bad"
    assert option_message(FieldError("count", " = 0 bad"), options, []) == "count = 0 bad"   # no such option


# --- 2. list items counted from 1 ------------------------------------------------------------------

@pytest.mark.parametrize("argv, want", [
    (["rate-sweep", "--rates", "1,2,0"],
     "error: --rates item 3 = 0 must be a number more than 0 and at most 1,000,000 (requests per second)"),
    (["rate-sweep", "--rates", "1,,3"],
     "error: --rates item 2 is empty: give a request rate (requests per second) or remove its comma"),
    (["account", "--lengths", "5,0", "--reserve", "32"],
     "error: --lengths item 2 = 0 must be a whole number from 1 to 10,000,000 (tokens)"),
    (["account", "--lengths", "5", "--reserve", "32", "--candidates", "4,x"],
     "error: --candidates item 2 = 'x' is not a number"),
    (["account", "--lengths", "5", "--reserve", "32", "--share", "9,0,1"],
     "error: --share item 2 = 0 must be a whole number from 1 to 10,000,000 (tokens)"),
])
def test_a_list_item_is_counted_from_one(capsys, argv, want):
    assert _error(argv, capsys) == want


def test_a_mooncake_block_id_is_counted_from_one(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, -1]}) + "\n",
                     encoding="utf-8")
    assert _error(["simulate", "--trace", str(trace)], capsys).startswith(
        "error: line 1, field hash_ids: item 2 = -1 is not a block id")


# --- 3. one mistake, one message, in every command ------------------------------------------------

SAME_MISTAKE = {
    ("--block-size", "0"): ("--block-size 0 must be a whole number from 1 to 4,096 (slots per block)", [
        ["simulate"], ["account", "--lengths", "5", "--reserve", "32"],
        ["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350"], ["rate-sweep"]]),
    ("--seed", "-1"): ("--seed -1 must be a whole number from 0 to 4,294,967,295", [
        ["simulate"], ["rate-sweep"], ["sharing"], ["paper-replication"]]),
    ("--max-num-seqs", "0"): ("--max-num-seqs 0 must be a whole number from 1 to 1,000,000 (running sequences)", [
        ["simulate", "--rules", "v1"], ["rate-sweep", "--rules", "v1"], ["replay-vllm", RUN]]),
    ("--max-new-tokens", "0"): ("--max-new-tokens 0 must be a whole number from 1 to 4,194,304 (tokens)", [
        ["simulate"], ["rate-sweep"]]),
    ("--metadata-cost", "-1"): ("--metadata-cost -1 must be a number from 0 to 1,000,000 (slot equivalents per "
                                "block)", [["simulate"], ["account", "--lengths", "5", "--reserve", "32"]]),
    ("--acceptance-rate", "2"): ("--acceptance-rate 2 must be a number from 0 to 1 (probability that a draft token "
                                 "is accepted)", [
        ["simulate", "--rules", "v1", "--num-speculative-tokens", "2"],
        ["capacity", "--free-gib", "66", "--max-context", "2048", "--mean-tokens", "350", "--model", "7b-fp16"]]),
    ("--width", "1"): ("--width 1 must be a whole number from 2 to 16 (samples or beams per request)", [["sharing"]]),
    ("--requests", "0"): ("--requests 0 must be a whole number from 1 to 10,000 (requests per run)", [["sharing"]]),
}


@pytest.mark.parametrize("option, value, command", [
    (option, value, command) for (option, value), (_, commands) in SAME_MISTAKE.items() for command in commands],
    ids=lambda x: x if isinstance(x, str) else " ".join(x[:2]))
def test_one_mistake_reads_the_same_in_every_command(capsys, option, value, command):
    want = SAME_MISTAKE[(option, value)][0]
    assert _error([*command, option, value], capsys) == f"error: {want}"


@pytest.mark.parametrize("section, key, want", [
    ("kv_cache", "block_size", "meta.json: kv_cache.block_size = 0 must be a whole number from 1 to 4,096 "
                               "(slots per block)"),
    ("engine_kwargs", "max_num_seqs", "meta.json: engine_kwargs.max_num_seqs = 0 must be a whole number from 1 to "
                                      "1,000,000 (running sequences)"),
    ("engine_kwargs", "max_num_batched_tokens", "meta.json: engine_kwargs.max_num_batched_tokens = 0 must be a whole "
                                                "number from 1 to 10,000,000 (tokens per engine step)"),
])
def test_a_run_file_states_the_same_range_as_the_option(tmp_path, capsys, section, key, want):
    """A run's meta.json setting out of range reads as the command line's option does (the range whole)."""
    run = _copy_run(tmp_path)
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    meta[section] = {**meta.get(section, {}), key: 0}
    (run / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    assert _error(["replay-vllm", str(run)], capsys) == f"error: {want}"


def test_the_sharing_width_limit_is_the_engines():
    from allocator.common.limits import LIMITS
    from allocator.engine.sampling import MAX_WIDTH
    assert LIMITS["width"].high == MAX_WIDTH and LIMITS["width"].low == 2


# --- 4. echoed as typed ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv, want", [
    (["simulate", "--arrival-rate", "0"], "error: --arrival-rate 0 must be a number from 0.001 to 1,000"),
    (["simulate", "--count", "+0"], "error: --count +0 must be a whole number from 1 to 200,000"),
    (["account", "--lengths", "3,000", "--reserve", "4"], "error: --lengths item 2 = 000 must be a whole number from 1"),
    (["sharing", "--width", "1e0"], "error: --width 1e0 must be a whole number from 2 to 16"),
    (["sharing", "--rate", "0.00001"], "error: --rate 0.00001 requests/s would spread 100 requests"),
    (["simulate", "--acceptance-rate", "5e-324"], "error: --acceptance-rate 5e-324 applies only with"),
    (["capacity", "--free-gib", "66", "--max-context", "2048", "--lengths", "5", "--acceptance-rate", "5e-324"],
     "error: --acceptance-rate 5e-324: the speculation table pages a mean length"),
    (["rate-sweep", "--rates", "5e-324", "--requests", "10"], "error: --rates 5e-324 requests/s is too low"),
])
def test_a_value_is_echoed_as_typed(capsys, argv, want):
    err = _error(argv, capsys)
    assert err.startswith(want), err


# --- 5. too long to read ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, want", [
    (["simulate", "--count", LONG], "error: --count: a 5,001-digit value is too long (at most 400 digits): give a "
                                    "whole number from 1 to 200,000 (requests)"),
    (["sharing", "--width", LONG], "error: --width: a 5,001-digit value is too long (at most 400 digits): give a "
                                   "whole number from 2 to 16 (samples or beams per request)"),
    (["rate-sweep", "--rates", "1," + LONG], "error: --rates item 2: a 5,001-digit value is too long (at most 400 "
                                             "digits): give a number more than 0 and at most 1,000,000 (requests "
                                             "per second)"),
    (["simulate", "--arrival-rate", "0." + LONG], "error: --arrival-rate: a 5,002-digit value is too long (at "
                                                  "most 400 digits): give a number from 0.001 to 1,000"),
])
def test_a_number_too_long_to_read_says_so_with_the_limit(capsys, argv, want):
    err = _error(argv, capsys)
    assert err.startswith(want), err


def test_a_long_number_in_a_json_file_says_so_with_the_limit(tmp_path, capsys):
    run = _copy_run(tmp_path)
    line = json.loads((run / "requests.jsonl").read_text(encoding="utf-8").splitlines()[0])
    text = json.dumps(line).replace(f'"input_toks": {line["input_toks"]}', '"input_toks": ' + LONG)
    (run / "requests.jsonl").write_text(text + "\n", encoding="utf-8")
    assert _error(["replay-vllm", str(run)], capsys) == (
        "error: requests.jsonl line 1: input_toks: a 5,001-digit value is too long (at most 30 digits)")


# --- 6. JSON values in JSON's spelling -------------------------------------------------------------

@pytest.mark.parametrize("engine, want", [
    ({"max_num_seqs": True}, "meta.json: engine_kwargs.max_num_seqs = true is not a number: give a whole number "
                             "from 1 to 1,000,000 (running sequences)"),
    ({"max_num_seqs": "8"}, 'meta.json: engine_kwargs.max_num_seqs = "8" is not a number: give a whole number'),
    ({"tensor_parallel_size": False}, "meta.json: engine_kwargs.tensor_parallel_size = false must be a whole "
                                      "number of at least 1"),
    ({"enable_chunked_prefill": "yes"}, 'enable_chunked_prefill = "yes" must be true or false'),
])
def test_a_json_value_is_echoed_in_json_spelling(tmp_path, capsys, engine, want):
    run = _copy_run(tmp_path)
    meta = json.loads((run / "meta.json").read_text(encoding="utf-8"))
    meta["engine_kwargs"] = {**meta.get("engine_kwargs", {}), **engine}
    (run / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    err = _error(["replay-vllm", str(run)], capsys)
    assert want in err and "True" not in err and "'" not in err, err


def test_a_mooncake_value_is_echoed_in_json_spelling(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 600, "output_length": True, "hash_ids": [0, 1]})
                     + "\n", encoding="utf-8")
    assert _error(["simulate", "--trace", str(trace)], capsys) == (
        "error: line 1, field output_length: true is not a whole number")


# --- 7. a bad timeseries.csv cell is named by file line and column ---------------------------------

@pytest.mark.parametrize("cell, shown", [("1\x002", "'1\\x002'"), ("abc", "'abc'")])
def test_a_bad_timeseries_cell_is_named_by_line_and_column(tmp_path, capsys, cell, shown):
    run = _copy_run(tmp_path)
    lines = (run / "timeseries.csv").read_text(encoding="utf-8").split("\n")
    cells = lines[2].split(",")
    cells[1] = cell                                   # file line 3 (data row 2), column prompt_throughput
    lines[2] = ",".join(cells)
    (run / "timeseries.csv").write_text("\n".join(lines), encoding="utf-8")
    assert _error(["replay-vllm", str(run)], capsys) == (
        f"error: timeseries.csv line 3: prompt_throughput = {shown} is not a number: give a number from 0 to "
        "1,000,000,000 (tokens per second)")


# --- 8. sizes in MB ---------------------------------------------------------------------------------

def test_every_size_cap_is_a_whole_number_of_mb_and_stated_in_mb():
    from allocator.common.limits import MAX_UPLOAD_BYTES, MB
    from allocator.workloads.mooncake import MAX_GZIP_BYTES
    from allocator.workloads.reader import limit_words, size_words
    from allocator.workloads.vllm_run import MAX_ZIP_BYTES, RUN_FILE_LIMITS
    for cap in (*RUN_FILE_LIMITS.values(), MAX_ZIP_BYTES, MAX_UPLOAD_BYTES, MAX_GZIP_BYTES):
        assert cap % MB == 0, cap
        words = limit_words(cap)
        assert words == f"the limit is {cap // MB} MB ({cap:,} bytes)" and "MiB" not in words
    assert size_words(4_800_000) == "4.8 MB"


def test_a_run_file_over_its_cap_is_stated_in_mb(tmp_path, capsys):
    run = _copy_run(tmp_path)
    (run / "timeseries.csv").write_text("t,prompt_throughput,gen_throughput,running,waiting\n"
                                        + "1,0,0,1,0\n" * 500_000, encoding="utf-8")
    err = _error(["replay-vllm", str(run)], capsys)
    assert err.endswith("timeseries.csv is 5.0 MB; the limit is 4 MB (4,000,000 bytes)") and "MiB" not in err, err


# --- 9. a compiled module the system cannot load under memory pressure -----------------------------

OUT_OF_MEMORY = ("error: this run ran out of memory (the system refused more before the run finished); "
                 "try fewer requests (--count), a smaller pool (--slots) or a smaller generation cap "
                 "(--max-new-tokens)\n")


def _system_error_from_memory():
    try:
        raise MemoryError
    except MemoryError:
        raise SystemError("<built-in function _init> returned a result with an exception set")


@pytest.mark.parametrize("raise_it", [
    _system_error_from_memory,
    lambda: (_ for _ in ()).throw(SystemError("initialization of _libs failed: cannot allocate memory")),
    lambda: (_ for _ in ()).throw(ImportError("pandas/_libs/join.so: mmap failed")),
], ids=["MemoryError in the chain", "SystemError naming memory", "ImportError naming mmap"])
def test_a_module_loaded_under_memory_pressure_is_the_out_of_memory_line(tmp_path, monkeypatch, capsys,
                                                                         raise_it):
    def refuse(handle, text):
        raise_it()
    monkeypatch.setattr(common, "_write_text", refuse)
    capsys.readouterr()
    assert main(["export-html", "--out", str(tmp_path / "a.html")]) == 2
    assert capsys.readouterr().err == OUT_OF_MEMORY
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("error", [SystemError("bad argument to internal function"),
                                   ModuleNotFoundError("No module named 'memory_tools'")])
def test_other_system_and_import_errors_still_raise(tmp_path, monkeypatch, error):
    def refuse(handle, text):
        raise error
    monkeypatch.setattr(common, "_write_text", refuse)
    with pytest.raises(type(error)):
        main(["export-html", "--out", str(tmp_path / "a.html")])


# --- 10. what shortens a run: only the command's own options (fresh hunt, F1) ------------------------

@pytest.mark.parametrize("command, advice", [
    ("simulate", "try fewer requests (--count), a smaller pool (--slots) or a smaller generation cap (--max-new-tokens)"),
    ("rate-sweep", "try fewer requests (--requests) or a smaller generation cap (--max-new-tokens)"),
    ("sharing", "try fewer requests (--requests)"),
    ("paper-replication", "try the quick run (--quick)"),
    ("replay-vllm", "try a smaller run"),
])
def test_out_of_memory_advice_names_only_the_commands_own_options(command, advice):
    """rate-sweep and sharing have --requests, not --count, and no --slots; replay-vllm and
    paper-replication have neither: the advice used to name --count and --slots for every command."""
    from allocator.__main__ import _command_options, build_parser
    from allocator.cli.common import shrink_advice

    options = _command_options(build_parser(), command)
    assert shrink_advice(options) == advice
    assert all(word in options for word in re.findall(r"--[a-z-]+", advice))


def test_a_sharing_run_out_of_memory_advises_its_requests_and_the_guard_too(monkeypatch, capsys):
    """End to end: sharing refused memory mid-run says --requests; a tripped guard's line names the same."""
    from allocator.cli import paper

    def refuse(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(paper, "sharing_run", refuse)
    rc = main(["sharing", "--mode", "beam", "--width", "2", "--requests", "4"])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("error: this run ran out of memory (the system refused more before the run "
                               "finished); try fewer requests (--requests)\n"), err
    guard = common.MemoryGuard(1)
    guard.options = ("--requests", "--seed")
    assert guard.message().endswith("; try fewer requests (--requests)")


def test_memory_refused_through_a_system_call_is_the_out_of_memory_line(tmp_path, monkeypatch, capsys):
    """An OSError with errno ENOMEM (mmap or fork refused under a 1-2 GB cap) printed the system's
    'Cannot allocate memory'; it is the out-of-memory line, with no partial file."""
    import errno as errno_

    from allocator.cli import paper

    def refuse(*args, **kwargs):
        raise OSError(errno_.ENOMEM, "Cannot allocate memory")
    monkeypatch.setattr(common, "_write_text", refuse)      # while a file is written
    assert main(["export-html", "--out", str(tmp_path / "a.html")]) == 2
    assert capsys.readouterr().err == OUT_OF_MEMORY
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(paper, "sharing_run", refuse)       # while a run runs
    assert main(["sharing", "--requests", "4"]) == 2
    assert capsys.readouterr().err.endswith("ran out of memory (the system refused more before the run finished); "
                                            "try fewer requests (--requests)\n")


def test_a_warning_is_one_line_without_a_source_path(capsys):
    """A cost model's warning (ProfileGridWarning off the profiled grid) printed Python's format: the
    server's path to the source file, the line number and the code line (fresh hunt, F3)."""
    import warnings as warnings_

    from allocator.__main__ import _show_warning

    with warnings_.catch_warnings():
        warnings_.simplefilter("always")
        warnings_.showwarning = _show_warning
        warnings_.warn("bundle: tokens = 4096 is above the profiled dense grid", UserWarning)
    err = capsys.readouterr().err
    assert err == "warning: bundle: tokens = 4096 is above the profiled dense grid\n", err
