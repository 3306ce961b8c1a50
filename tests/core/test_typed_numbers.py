"""Issue 42 (low): numeric flags are read one way and echoed as typed.

* ``replay-vllm --max-num-*`` uses the same check and message as ``simulate --rules v1`` (``nan`` was
  called "empty").
* A message echoes the text typed (``1e400``), not what the number became (``inf``).
* Underscores and non-ASCII digits (which Python's int/float accept) are not numbers for any flag.
* An empty entry of a comma list (``--rates 1,2,,3``) is refused by its position (``item 3``, counted
  from 1), never dropped.
* A message names the option as typed (``--count``), not the field behind it (``count``).
"""
from __future__ import annotations

import pytest

from allocator.__main__ import main

RUN = "assets/vllm_runs/rtxpro6000_llama-3.1-8b"


def _error(argv, capsys) -> str:
    assert main(argv) == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize("flag,field,allowed", [
    ("--max-num-batched-tokens", "max_num_batched_tokens", "a whole number from 1 to 10,000,000 (tokens per engine step)"),
    ("--max-num-seqs", "max_num_seqs", "a whole number from 1 to 1,000,000 (running sequences)"),
])
def test_replay_and_simulate_read_max_num_flags_with_one_parser(capsys, flag, field, allowed):
    for value, problem in (("nan", "is not a number"), ("1e400", "is not a finite number"),
                           ("2.5", "is not a whole number"), ("1_000", None)):
        shown = f"'{value}'" if problem is None else value
        problem = problem or "is not a number"
        want = f"error: {flag} {shown} {problem}: give {allowed}"
        assert _error(["replay-vllm", RUN, flag, value], capsys) == want
        assert _error(["simulate", "--rules", "v1", flag, value], capsys) == want


@pytest.mark.parametrize("argv,want", [
    (["rate-sweep", "--rates", "1e400"], "--rates item 1 = 1e400 is not a finite number"),
    (["rate-sweep", "--rates", "1,-1E400"], "--rates item 2 = -1E400 is not a finite number"),
    (["account", "--lengths", "5,1e400", "--reserve", "32"], "--lengths item 2 = 1e400 is not a finite number"),
    (["account", "--lengths", "5", "--reserve", "1e400"], "--reserve 1e400 is not a finite number"),
    (["account", "--lengths", "5", "--reserve", "NaN"], "--reserve NaN is not a number"),
    (["simulate", "--count", "1e3000"], "--count 1e3000 is not a finite number"),
])
def test_a_message_echoes_the_number_as_typed(capsys, argv, want):
    err = _error(argv, capsys)
    assert err.startswith(f"error: {want}"), err


@pytest.mark.parametrize("argv,want", [
    (["rate-sweep", "--rates", " 1_000"], "--rates item 1 = '1_000' is not a number"),
    (["simulate", "--count", "1_000"], "--count '1_000' is not a number"),
    (["account", "--lengths", "5,1_0", "--reserve", "32"], "--lengths item 2 = '1_0' is not a number"),
    (["simulate", "--count", "\uff11\uff12"], "--count '\uff11\uff12' is not a number"),
])
def test_underscores_and_non_ascii_digits_are_not_numbers_for_any_flag(capsys, argv, want):
    err = _error(argv, capsys)
    assert err.startswith(f"error: {want}"), err


@pytest.mark.parametrize("text,entry", [("1,2,,3", 2), ("1,2,", 2), (",1", 0)])
def test_an_empty_rate_entry_is_refused_by_its_position(capsys, text, entry):
    assert _error(["rate-sweep", "--rates", text], capsys) == (
        f"error: --rates item {entry + 1} is empty: give a request rate (requests per second) "
        "or remove its comma")


def test_a_number_read_from_text_is_a_plain_number_after_its_check():
    from allocator.common.limits import LIMITS
    from allocator.common.validate import TypedFloat, number_from_text
    value = number_from_text(" 2.50 ")
    assert isinstance(value, TypedFloat) and value == 2.5 and value.typed == "2.50"
    checked = LIMITS["arrival_rate"].check("arrival_rate", value)
    assert type(checked) is float and checked == 2.5
    assert type(LIMITS["count"].check("count", number_from_text("1e3"))) is int
