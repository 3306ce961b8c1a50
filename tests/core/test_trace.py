"""Trace loading and replay: the shipped Azure trace, both schemas, and malformed files."""
import json

import pytest

from allocator.__main__ import main
from allocator.workloads.trace import AZURE_TRACE, load_trace, shipped_trace, trace_workload
from allocator.engine.scenario import Scenario, run_scenario


def test_shipped_trace_loads():
    df = shipped_trace()
    assert len(df) == 19_366
    assert df["prompt_tokens"].iloc[:4].tolist() == [374, 396, 879, 91]
    assert df["output_tokens"].iloc[:4].tolist() == [44, 109, 55, 16]
    assert df["arrival_s"].iloc[0] == 0.0
    assert df["arrival_s"].iloc[1] == pytest.approx(4.314579, abs=1e-6)
    assert df["arrival_s"].is_monotonic_increasing


def test_trace_replay_arrivals_from_timestamps():
    w = trace_workload(shipped_trace(), offset=0, count=4, steps_per_second=10, max_new_tokens=100)
    assert [r.arrival_step for r in w.requests] == [0, 43, 45, 47]
    assert [r.output_len for r in w.requests] == [44, 100, 55, 16]    # 109 clipped to 100
    assert any("clipped" in n for n in w.notes)


def test_forty_trace_requests_replay_through_both_allocators(capsys):
    assert main(["simulate", "--trace", AZURE_TRACE, "--offset", "100", "--count", "40", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("reserve_max", "paged"):
        s = out[key]
        assert s["requests"] == 40
        assert s["finished"] + len(s["rejected"]) == 40
        assert all(r["reason"] for r in s["rejected"])
    assert out["paged"]["mean_utilization"] > out["reserve_max"]["mean_utilization"]


def test_small_pool_rejects_long_trace_requests_with_reasons():
    res = run_scenario(Scenario(workload="azure-conv", total_slots=4000, count=40), record_snapshots=False)
    rejected = res["reserve_max"].summary["rejected"]
    assert rejected and all("contiguous reservation" in r["reason"] for r in rejected)
    assert res["reserve_max"].summary["finished"] + len(rejected) == 40


def test_plain_schema(tmp_path):
    f = tmp_path / "plain.csv"
    f.write_text("prompt_tokens,output_tokens,arrival_s\n10,5,0\n20,7,0.5\n")
    df = load_trace(str(f))
    assert df["prompt_tokens"].tolist() == [10, 20] and df["arrival_s"].tolist() == [0.0, 0.5]
    w = trace_workload(df, count=2, steps_per_second=4, max_new_tokens=10)
    assert [r.arrival_step for r in w.requests] == [0, 2]


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n", "no rows"),
    (b"a,b\n1,2\n", "missing columns"),
    (b"prompt_tokens,output_tokens\n10,5\nabc,3\n", "row 2, column prompt_tokens"),
    (b"prompt_tokens,output_tokens\n10,5\n-4,3\n", "row 2, column prompt_tokens"),
    (b"prompt_tokens,output_tokens\n10,2.5\n", "row 1, column output_tokens"),
    (b"prompt_tokens,output_tokens\n10,0\n", "row 1, column output_tokens"),
    (b"prompt_tokens,output_tokens\n\xff\xfe,1\n", "UTF-8"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:50,1,1\n2023-11-16 18:15:40,1,1\n",
     "row 2, column TIMESTAMP"),
    (b"TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "row 1, column TIMESTAMP"),
])
def test_malformed_traces_name_the_problem(content, message):
    with pytest.raises(ValueError, match=message):
        load_trace(content)


def test_bad_replay_window():
    df = shipped_trace()
    with pytest.raises(ValueError, match="offset"):
        trace_workload(df, offset=19_366)
    with pytest.raises(ValueError, match="count"):
        trace_workload(df, count=0)
    with pytest.raises(ValueError, match="steps_per_second"):
        trace_workload(df, steps_per_second=0)


def test_running_out_of_memory_while_reading_a_shipped_file_is_not_called_damage(tmp_path):
    """The re-hunt of issue 42: under a tight memory cap a shipped file was reported 'damaged ()' with a
    restore command; running out of memory is the machine's, so it propagates as MemoryError (which the
    CLI and the pages turn into their one out-of-memory line)."""
    from allocator.workloads.trace import load_shipped

    def out_of_memory(path):
        raise MemoryError()

    f = tmp_path / "lengths.csv"
    f.write_text("prompt_tokens,output_tokens\n1,2\n")
    with pytest.raises(MemoryError):
        load_shipped(str(f), out_of_memory, "a test file")
