"""Issue 22: the calibration, replay-vllm against the shipped run, and runs of the same format
made here (good and bad)."""
import json
import os

import numpy as np
import pytest

from allocator.__main__ import main
from allocator.cost.calibration import (CALIBRATED, REPLAY_GPUS, CalibratedCost, Efficiency, fit_efficiency,
                                        gpu_for, kv_pool_blocks, model_for)
from allocator.studies.vllm_replay import held_out_check, replay
from allocator.common.errors import FieldError
from allocator.workloads.vllm_run import SHIPPED_RUN, load_run


@pytest.fixture(scope="module")
def shipped():
    return load_run(SHIPPED_RUN)


@pytest.fixture(scope="module")
def shipped_replay(shipped):
    return replay(shipped, calibration="run")       # the roofline fitted on this run (the page's main replay)


def test_shipped_run_measured_summary(shipped):
    # the data README's measured summary: mean TTFT 7.10 s, TPOT 32.5 ms, latency 28.2 s
    assert len(shipped) == 300
    assert round(float(shipped.ttft.mean()), 2) == 7.10
    assert round(1000 * float(np.nanmean(shipped.tpot)), 1) == 32.5
    assert round(float(shipped.latency.mean()), 1) == 28.2
    assert shipped.engine_int("max_num_seqs") == 128 and shipped.engine_int("max_num_batched_tokens") == 2048


def test_replay_of_the_shipped_run_is_within_ten_percent(shipped_replay):
    rep = shipped_replay
    assert rep.cost.gpu.key == "rtx-pro-6000" and rep.cost.model.config.key == "llama-3.1-8b"
    assert rep.rules.max_num_seqs == 128 and rep.rules.max_num_batched_tokens == 2048
    assert rep.pool_source == "derived" and rep.preemptions == 0
    for k in ("ttft", "tpot", "latency"):
        assert abs(rep.error_pct(k)) <= 10.0, (k, rep.error_pct(k))
    # the README and the page quote these (rounded to 0.1 %)
    assert [round(rep.error_pct(k), 1) for k in ("ttft", "tpot", "latency")] == [5.9, 1.7, 2.8]
    assert rep.table["ttft"]["mean"]["measured"] == pytest.approx(7.097, abs=1e-3)


def test_calibration_fit_is_reproduced_from_the_shipped_data(shipped):
    g, m = gpu_for(None, shipped.hardware, shipped.name), model_for(shipped.model)
    fit = fit_efficiency(shipped, g, m)
    assert fit.efficiency == CALIBRATED
    assert fit.requests == 300
    # the residuals the calibration module's docstring and the README quote
    assert round(100 * fit.rms_log_error, 1) == 1.5
    assert round(100 * fit.mean_error, 1) == -0.1
    assert round(100 * fit.p90_abs_error, 1) == 2.3


def test_held_out_check_figures(shipped):
    h = held_out_check(shipped)
    e = h["fit"].efficiency
    assert (e.eta_flops, e.eta_bw, e.overhead_s) == (0.715, 0.875, 0.00665)
    assert round(100 * h["fit"].held_out["rms_log_error"], 1) == 5.3
    assert [round(h[f"{k}_error_pct"], 1) for k in ("ttft", "tpot", "latency")] == [6.6, 3.6, 4.9]


def test_step_model_terms_add_up():
    cost = CalibratedCost(REPLAY_GPUS["rtx-pro-6000"], model_for("llama-3.1-8b"))
    t = cost.terms()
    # one decode of a 1,000-token context: overhead + weights read (memory-bound) + attention + KV
    expect = (t["overhead_s"] + t["weights_read_s"] + 1000 * t["s_per_attention_pair"]
              + 1001 * t["s_per_kv_token"])
    assert cost.step_seconds(0, 0, 1, 1000, 0) == pytest.approx(expect)
    # weights: 8,030,261,248 x 2 bytes over 0.825 x 1,792 GB/s
    assert t["weights_read_s"] == pytest.approx(8_030_261_248 * 2 / (0.825 * 1.792e12))
    # a big prefill is compute-bound: 2 x params per token over 0.585 x 503.8 TFLOP/s
    assert t["s_per_token_gemm"] == pytest.approx(2 * 8_030_261_248 / (0.585 * 503.8e12))
    # tensor parallelism halves the per-GPU work and adds the all-reduces
    tp2 = CalibratedCost(REPLAY_GPUS["h100-sxm"], model_for("Qwen/Qwen3-32B"), tp=2)
    assert tp2.terms()["allreduce_s_per_step"] > 0 and tp2.terms()["allreduce_s_per_token"] > 0
    with pytest.raises(FieldError) as err:
        Efficiency(0, 0.5, 0.001)
    assert err.value.field == "eta_flops"


def test_kv_pool_derivation():
    g, m = REPLAY_GPUS["rtx-pro-6000"], model_for("llama-3.1-8b")
    blocks = kv_pool_blocks(g, m, 1, 16, max_num_seqs=128)
    # 0.9 x 96 GiB - 16.06 GB weights - activations (~2.4 GiB) -> about 69.6 GiB of 2 MiB blocks
    assert 34_000 < blocks < 37_000
    assert kv_pool_blocks(g, m, 1, 16, gpu_memory_utilization=0.5) < blocks
    with pytest.raises(FieldError) as err:
        kv_pool_blocks(REPLAY_GPUS["rtx-4090"], model_for("qwen3-32b"), 1, 16)
    assert err.value.field == "gpu"


# --- runs of the same format made here ------------------------------------------------------------

def write_run(path, rows, meta=None, timeseries=True):
    os.makedirs(path, exist_ok=True)
    base = {"schema_version": 1, "model": "meta-llama/Llama-3.1-8B",
            "engine_kwargs": {"tensor_parallel_size": 1, "max_num_seqs": 8, "max_num_batched_tokens": 512}}
    with open(os.path.join(path, "meta.json"), "w") as fh:
        json.dump(base if meta is None else meta, fh)
    with open(os.path.join(path, "requests.jsonl"), "w") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    if timeseries:
        with open(os.path.join(path, "timeseries.csv"), "w") as fh:
            fh.write("t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1.0,0,0,1,0,0\n")
    return str(path)


def synthetic_rows(n=40, seed=3):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        q = 100.0 + 0.05 * i
        rows.append({"request_id": f"r{i}", "input_toks": int(rng.integers(20, 700)),
                     "output_toks": int(rng.integers(2, 120)), "arrival_time": q, "queued_ts": q,
                     "scheduled_ts": q, "first_token_ts": q + 0.1, "last_token_ts": q + 1.0})
    return rows


def test_a_run_made_by_the_model_replays_to_itself(tmp_path):
    # 40 requests on an RTX 4090 with a stated pool: write the lab's own timings as the "measured"
    # ones, and the replay must land on them (error ~ 0): the reader, the rules and the clock agree
    rows = synthetic_rows()
    meta = {"model": "meta-llama/Llama-3.1-8B", "hardware": {"gpu": "NVIDIA GeForce RTX 4090"},
            "kv_cache": {"num_gpu_blocks": 300, "block_size": 16},
            "engine_kwargs": {"tensor_parallel_size": 1, "max_num_seqs": 8, "max_num_batched_tokens": 512}}
    path = write_run(tmp_path / "run", rows, meta)
    first = replay(load_run(path))
    assert first.cost.gpu.key == "rtx-4090" and first.num_blocks == 300 and first.pool_source == "run"
    for row, ttft, lat in zip(rows, first.simulated["ttft"], first.simulated["latency"]):
        row["scheduled_ts"] = row["queued_ts"]
        row["first_token_ts"] = row["queued_ts"] + float(ttft)
        row["last_token_ts"] = row["queued_ts"] + float(lat)
    again = replay(load_run(write_run(tmp_path / "run2", rows, meta)))
    for k in ("ttft", "tpot", "latency"):
        assert abs(again.error_pct(k)) < 1e-6
    assert max(again.series["running"]) <= 8


def test_tensor_parallel_run_replays(tmp_path):
    meta = {"model": "Qwen/Qwen3-32B", "hardware": {"gpu": "H100 SXM"},
            "engine_kwargs": {"tensor_parallel_size": 2, "max_num_seqs": 16}}
    rep = replay(load_run(write_run(tmp_path / "tp2", synthetic_rows(20), meta, timeseries=False)))
    assert rep.cost.tp == 2 and rep.cost.model.config.key == "qwen3-32b" and rep.rules.max_num_batched_tokens == 2048
    assert np.isfinite(rep.simulated["latency"]).all()


def test_cli_json_and_table(tmp_path, capsys):
    path = write_run(tmp_path / "rtxpro6000_x", synthetic_rows(12))
    assert main(["replay-vllm", path, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu"] == "rtx-pro-6000" and out["requests"] == 12 and out["rules"]["max_num_seqs"] == 8
    assert set(out["table"]) == {"ttft", "tpot", "latency"}
    assert set(out["table"]["ttft"]) == {"mean", "p50", "p90"}
    assert main(["replay-vllm", path, "--model", "llama-3.1-8b"]) == 0
    text = capsys.readouterr().out
    assert "time to first token (s)" in text and "error" in text


BAD = [
    ("no meta", lambda p: os.remove(os.path.join(p, "meta.json")), "meta.json is missing"),
    ("meta not json", lambda p: open(os.path.join(p, "meta.json"), "w").write("{"), "meta.json is not valid JSON: "),
    ("no engine", lambda p: open(os.path.join(p, "meta.json"), "w").write('{"model": "x"}'), "engine_kwargs"),
    ("empty requests", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(""), "holds no requests"),
    ("missing field", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write('{"input_toks": 5}\n'),
     "line 1: output_toks is missing"),
    ("wrong type", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(json.dumps(
        {**synthetic_rows(1)[0], "input_toks": "12"}) + "\n"), 'input_toks = "12" must be a whole number of at least 1'),
    ("not json line", lambda p: open(os.path.join(p, "requests.jsonl"), "a").write("oops\n"),
     "requests.jsonl line 6 is not valid JSON: a value is missing or is not JSON (column 1)"),
    ("out of order", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(json.dumps(
        {**synthetic_rows(1)[0], "last_token_ts": 0.0}) + "\n"), "out of order"),
    ("unknown model", lambda p: open(os.path.join(p, "meta.json"), "w").write(json.dumps(
        {"model": "acme/Giant-1T", "engine_kwargs": {}})),
     "meta.json: model = 'acme/Giant-1T' is not a model this lab can price. It prices runs of Llama 3.1 8B bf16, "
     "Qwen3 32B bf16, Qwen3 30B-A3B bf16; another model needs its shape and an operator profile added by whoever "
     "runs the lab"),
    # issue 42: a model name is shown as escaped text (a line separator would break the one line)
    ("odd model name", lambda p: open(os.path.join(p, "meta.json"), "w").write(json.dumps(
        {"model": "x\u2028y", "engine_kwargs": {}})), "meta.json: model = 'x\\u2028y' is not a model"),
    # issue 42: the optional fields the replay does not use are checked, not accepted without a word
    *[(f"arrival_time {text}", lambda p, text=text: open(os.path.join(p, "requests.jsonl"), "a").write(
        json.dumps(synthetic_rows(1)[0])[:-1] + f', "arrival_time": {text}}}\n'), f"requests.jsonl line 6: {want}")
      for text, want in (("Infinity", "arrival_time = inf is not a finite number: give a number from 0 to "
                                       "100,000,000,000 (seconds since 1970)"),
                         ("NaN", "arrival_time = nan is not a number: give a number from 0"),
                         ("1" + "0" * 5000 + ".5", "arrival_time: a 5,003-character value is too long (at most 400 "
                                                   "characters): give a number from 0"),
                         ("-3", "arrival_time = -3 must be a number from 0"))],
    *[(f"tick_seconds {text}", lambda p, text=text: open(os.path.join(p, "meta.json"), "w").write(
        '{"model": "meta-llama/Llama-3.1-8B", "engine_kwargs": {}, "tick_seconds": ' + text + "}"),
       f"meta.json: tick_seconds = {want} a number from 0.001 to 3,600 (seconds between timeseries.csv rows)")
      for text, want in (('"1"', '"1" is not a number: give'), ("0", "0 must be"), ("1e-300", "1e-300 must be"))],
    ("bad engine arg", lambda p: open(os.path.join(p, "meta.json"), "w").write(json.dumps(
        {"model": "meta-llama/Llama-3.1-8B", "engine_kwargs": {"max_num_seqs": "many"}})), "max_num_seqs"),
    ("bad timeseries", lambda p: open(os.path.join(p, "timeseries.csv"), "w").write("a,b\n1,2\n"),
     "timeseries.csv lacks column"),
    # issue 42: the kinds refused in Mooncake JSONL are refused in every JSON reader, in plain words
    ("deep nesting", lambda p: open(os.path.join(p, "requests.jsonl"), "a").write("[" * 100_000 + "\n"),
     "requests.jsonl line 6 nests lists or objects too deeply to read"),
    ("deep meta", lambda p: open(os.path.join(p, "meta.json"), "w").write("[" * 100_000),
     "meta.json nests lists or objects too deeply to read"),
    ("5,000 digits", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(
        json.dumps(synthetic_rows(1)[0])[:-1] + ', "input_toks": 1' + "0" * 5000 + "}\n"),
     "requests.jsonl line 1: input_toks: a 5,001-digit value is too long (at most 30 digits)"),
    ("5,000-digit time", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(
        json.dumps(synthetic_rows(1)[0])[:-1] + ', "queued_ts": 1' + "0" * 5000 + ".5}\n"),
     "requests.jsonl line 1: queued_ts: a 5,003-character value is too long (at most 400 characters)"),
    ("raw control char", lambda p: open(os.path.join(p, "meta.json"), "w").write('{"model": "a\tb"}'),
     "meta.json is not valid JSON: a string holds a raw control character"),
    # issue 42: the run's time span, its timeseries and its request count are bounded before any work
    ("late request", lambda p: open(os.path.join(p, "requests.jsonl"), "a").write(json.dumps(
        {**synthetic_rows(1)[0], **{k: 1e8 for k in ("queued_ts", "scheduled_ts", "first_token_ts",
                                                     "last_token_ts")}}) + "\n"),
     "requests.jsonl line 6: last_token_ts = 1e+08 s is 1e+08 s after the first request was queued; a "
     "measured run spans at most 1,000,000 s"),
    ("huge timeseries", lambda p: open(os.path.join(p, "timeseries.csv"), "w").write(
        "t,prompt_throughput,gen_throughput,running,waiting\n" + "1,0,0,1,0\n" * 500_000),
     "timeseries.csv is 5.0 MB; the limit is 4 MB (4,000,000 bytes)"),
    ("wide timeseries", lambda p: open(os.path.join(p, "timeseries.csv"), "w").write(
        "t,prompt_throughput,gen_throughput,running,waiting" + "," * 560_000 + "\n"),
     "timeseries.csv line 1 has 560,005 columns; at most 256 are accepted"),
    ("too many requests", lambda p: open(os.path.join(p, "requests.jsonl"), "w").write(
        "\n".join([json.dumps(synthetic_rows(1)[0])] * 10_001)),
     "requests.jsonl holds more than 10,000 requests"),
]


@pytest.mark.parametrize("name,spoil,message", BAD, ids=[b[0] for b in BAD])
def test_bad_runs_get_one_line_and_exit_2(tmp_path, capsys, name, spoil, message):
    path = write_run(tmp_path / "rtxpro6000_bad", synthetic_rows(5))
    spoil(path)
    assert main(["replay-vllm", path]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_unknown_gpu_and_unnamed_gpu(tmp_path, capsys):
    path = write_run(tmp_path / "mystery", synthetic_rows(5))
    assert main(["replay-vllm", path]) == 2
    assert "does not name its GPU" in capsys.readouterr().err
    assert main(["replay-vllm", path, "--gpu", "tpu-v9"]) == 2
    assert "'tpu-v9' is not a GPU preset" in capsys.readouterr().err


def test_cli_overrides_reach_every_rule(shipped, capsys):
    assert main(["replay-vllm", SHIPPED_RUN, "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
                 "--no-prefix-caching", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rules"] == {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "chunked_prefill": True,
                            "prefix_caching": False, "preemption": "recompute"}
    # a cap of 256 lets every arrival in at once: the queue (and so TTFT) all but vanishes
    assert out["table"]["ttft"]["mean"]["simulated"] < 0.3 * out["table"]["ttft"]["mean"]["measured"]
    assert main(["replay-vllm", SHIPPED_RUN, "--no-chunked-prefill"]) == 2
    assert "--max-num-batched-tokens 2048 is below the longest prompt (3998 tokens)" in capsys.readouterr().err
    assert main(["replay-vllm", SHIPPED_RUN, "--no-chunked-prefill", "--max-num-batched-tokens", "4096", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"]["chunked_prefill"] is False
    assert main(["replay-vllm", SHIPPED_RUN, "--max-num-seqs", "0"]) == 2
    assert "--max-num-seqs 0 must be a whole number from 1 to 1,000,000" in capsys.readouterr().err


def test_where_right_and_wrong_quotes_the_replay(shipped_replay, shipped):
    from allocator.viz.replay import right_and_wrong, signed_pct

    rep = shipped_replay
    lines = right_and_wrong(rep)
    assert lines[0] == (f"Closest: the mean time per output token, off by {signed_pct(rep.error_pct('tpot'))}. "
                        f"Furthest: the 90th percentile (p90) time to first token, off by "
                        f"{signed_pct(rep.error_pct('ttft', 'p90'))}.")
    ts = shipped.timeseries
    i = int(ts["waiting"].idxmax())
    assert f"vLLM's longest waiting line was {ts['waiting'][i]:.0f} requests at {ts['t'][i]:.0f} s" in lines[1]
    assert "104 requests at 29 s" in lines[1]                       # read from timeseries.csv by hand
    assert f"{rep.makespan_s['measured']:.3g} s after the first arrival" in lines[2]
    assert lines[3].startswith("Time to first token is the hardest figure here")


@pytest.mark.parametrize("flag, value, message", [
    ("--max-num-batched-tokens", "abc", "--max-num-batched-tokens 'abc' is not a number"),
    ("--max-num-batched-tokens", "0", "--max-num-batched-tokens 0 must be a whole number from 1 to 10,000,000"),
    ("--max-num-batched-tokens", "1e300", "--max-num-batched-tokens 1e300 must be a whole number from 1 to 10,000,000"),
    ("--max-num-seqs", "2.5", "--max-num-seqs 2.5 is not a whole number"),
])
def test_bad_overrides_get_one_line(tmp_path, capsys, flag, value, message):
    """Issue 42: ``--max-num-batched-tokens 1e3`` was a traceback deep in the engine."""
    path = write_run(tmp_path / "rtxpro6000_o", synthetic_rows(5))
    assert main(["replay-vllm", path, flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_a_whole_number_written_with_an_exponent_is_read(tmp_path, capsys):
    path = write_run(tmp_path / "rtxpro6000_o", synthetic_rows(5))
    assert main(["replay-vllm", path, "--max-num-batched-tokens", "1e3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rules"]["max_num_batched_tokens"] == 1000


def test_a_run_without_timeseries_samples_a_bounded_series(tmp_path):
    """Issue 42: without timeseries.csv the series had one element per second of the run (10**8 s:
    over 3 GB). One a second up to 10,000 ticks, evenly spaced beyond."""
    from allocator.studies.vllm_replay import MAX_SERIES_TICKS, series_ticks
    rows = synthetic_rows(3)
    late = {**rows[-1], **{k: rows[-1][k] + 900_000.0 for k in ("queued_ts", "scheduled_ts", "first_token_ts",
                                                                 "last_token_ts")}}
    run = load_run(write_run(tmp_path / "rtxpro6000_late", rows + [late], timeseries=False))
    ticks = series_ticks(run)
    assert len(ticks) <= MAX_SERIES_TICKS and ticks[0] == 1.0 and ticks[-1] <= run.last.max()
    assert np.all(np.diff(ticks) == 91.0)                      # ceil(900,001.1 s / 10,000 ticks)
    short = load_run(write_run(tmp_path / "rtxpro6000_short", rows, timeseries=False))
    assert series_ticks(short).tolist() == [1.0, 2.0]          # one a second to the last token + 1 s, as before


def test_a_missing_run_is_named_without_the_servers_path(tmp_path):
    """Issue 42: the real-engine page quoted the server's absolute path when the run was missing."""
    with pytest.raises(FieldError) as err:
        load_run(str(tmp_path / "gone"))
    assert str(err.value) == "run = 'gone' is not a directory holding meta.json and requests.jsonl"
    assert str(tmp_path) not in str(err.value)


def test_a_long_replay_says_so_before_it_starts(tmp_path, capsys, monkeypatch):
    """Issue 42: 500,000 requests ran 300 s without a line; now at most 10,000 are read, and past
    ``LONG_RUN`` the command says on stderr, before it starts, that it takes a while."""
    from allocator.cli import replay as cli_replay
    monkeypatch.setattr(cli_replay, "LONG_RUN", 3)
    path = write_run(tmp_path / "rtxpro6000_long", synthetic_rows(5))
    assert main(["replay-vllm", path, "--json"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert lines[0].startswith("note: replaying 5 requests takes a few milliseconds each"), err
    # the synthetic run leaves the profiled grid: each such warning is one line, without a source path
    assert all(line.startswith("warning: ") and ".py:" not in line for line in lines[1:]), err


# ------------------------------------------------------------------ issue 42 (low): a what-if is bounded up front

def test_an_override_that_would_take_too_many_steps_is_refused_before_running(capsys):
    """``--max-num-batched-tokens 1`` ran past 60 s without a word: the estimate (prompt + output tokens /
    budget, output tokens / max_num_seqs) is checked before any step, and the message names the smallest
    value this run allows, which is itself accepted by the check."""
    from allocator.studies.vllm_replay import MAX_OVERRIDE_STEPS, _check_override_steps, estimated_steps, rules_for
    run = load_run(SHIPPED_RUN)
    tokens, output = int(run.prompt.sum()) + int(run.output.sum()), int(run.output.sum())
    assert (tokens, output) == (452_992, 195_753)
    assert estimated_steps(run, 1, 1) == tokens and estimated_steps(run, 1, 10**7) == output
    assert main(["replay-vllm", SHIPPED_RUN, "--max-num-batched-tokens", "1"]) == 2
    least = -(-tokens // MAX_OVERRIDE_STEPS)
    assert capsys.readouterr().err == (
        f"error: --max-num-batched-tokens 1 would take about {tokens:,} engine steps for this run's {tokens:,} prompt "
        f"and output tokens; a what-if replays at most {MAX_OVERRIDE_STEPS:,} steps, so give at least {least} for "
        "this run\n")
    assert main(["replay-vllm", SHIPPED_RUN, "--max-num-seqs", "1"]) == 2
    assert f"so give at least {-(-output // MAX_OVERRIDE_STEPS)} for this run" in capsys.readouterr().err
    own = rules_for(run)
    _check_override_steps(run, own, -(-output // MAX_OVERRIDE_STEPS), least)      # the named smallest passes
    with pytest.raises(FieldError):
        _check_override_steps(run, own, None, least - 1)


# --- issue 42, F7: every cell of timeseries.csv is checked and named by file line ------------------

def _shipped_copy(tmp_path, edit):
    """A copy of the shipped run (CR LF line ends, as shipped) whose timeseries.csv lines go through
    ``edit`` (a list of lines without their ends -> the file's text)."""
    import shutil
    run = tmp_path / "rtxpro6000_llama-3.1-8b"
    shutil.copytree(SHIPPED_RUN, run)
    with open(run / "timeseries.csv", newline="") as fh:
        lines = fh.read().split("\r\n")
    with open(run / "timeseries.csv", "w", newline="") as fh:
        fh.write(edit(lines))
    return str(run)


def _cell(line, col, value):
    """An edit that sets column ``col`` (0-based) of file line ``line`` (1-based) to ``value``."""
    def edit(lines):
        cells = lines[line - 1].split(",")
        cells[col] = value
        return "\r\n".join(lines[:line - 1] + [",".join(cells)] + lines[line:])
    return edit


T_RANGE = "give a number from 0 to 1,000,000 (seconds from the run's start)"
COUNT_RANGE = "a whole number from 0 to 10,000 (requests)"
RATE_RANGE = "a number from 0 to 1,000,000,000 (tokens per second)"


@pytest.mark.parametrize("edit, message", [
    (_cell(5, 0, "nan"), f"timeseries.csv line 5: t = nan is not a number: {T_RANGE}"),
    (_cell(5, 0, "1e300"), f"timeseries.csv line 5: t = 1e300 must be a number from 0 to 1,000,000"),
    (_cell(5, 0, "-1e15"), f"timeseries.csv line 5: t = -1e15 must be a number from 0 to 1,000,000"),
    (_cell(5, 0, "2.5"), "timeseries.csv line 5: t = 2.5 is earlier than line 4's t = 3.0: the ticks must not go "
                         "back in time"),
    (_cell(5, 3, "-5"), f"timeseries.csv line 5: running = -5 must be {COUNT_RANGE}"),
    (_cell(5, 3, "1.5"), f"timeseries.csv line 5: running = 1.5 is not a whole number: give {COUNT_RANGE}"),
    (_cell(6, 4, ""), f"timeseries.csv line 6: waiting is empty: give {COUNT_RANGE}"),
    (_cell(5, 5, "nan"), "timeseries.csv line 5: kv_cache_pct = nan is not a number: give a number from 0 to 100 "
                         "(percent of the KV cache in use)"),
    (_cell(5, 5, "250"), "timeseries.csv line 5: kv_cache_pct = 250 must be a number from 0 to 100"),
    (_cell(5, 1, "1e999"), f"timeseries.csv line 5: prompt_throughput = 1e999 is not a finite number: give {RATE_RANGE}"),
    (_cell(5, 2, "inf"), f"timeseries.csv line 5: gen_throughput = inf is not a finite number: give {RATE_RANGE}"),
    (_cell(5, 2, "1_000"), f"timeseries.csv line 5: gen_throughput = '1_000' is not a number: give {RATE_RANGE}"),
    # the first bad cell in file order, whatever its column
    (lambda lines: _cell(9, 1, "x")(_cell(7, 4, "-1")(lines).split("\r\n")),
     "timeseries.csv line 7: waiting = -1 must be"),
    # a row one field too wide: the file's line, not the data row
    (lambda lines: "\r\n".join(lines[:67] + [lines[67] + ",9"] + lines[68:]),
     "timeseries.csv line 68 has 7 fields but the header (line 1) has 6 (t, prompt_throughput, gen_throughput, "
     "running, waiting, kv_cache_pct): a field is missing or extra"),
    # a CR after a cell of a CR LF file is not a row end: the line is named
    (lambda lines: "\r\n".join(lines[:4] + [lines[4] + "\r,extra"] + lines[5:]),
     "timeseries.csv line 5 holds a carriage return (CR) that does not end the line"),
    (_cell(5, 1, '"12'), "timeseries.csv line 5 has a quote that is never closed"),
    (lambda lines: "\r\n".join([lines[0] + ",t"] + lines[1:]), "timeseries.csv line 1 names the column t twice"),
    (lambda lines: "", "run: timeseries.csv is empty; its first line names the columns"),
], ids=["t nan", "t 1e300", "t -1e15", "t back", "running -5", "running 1.5", "waiting empty", "kv nan",
        "kv 250", "rate 1e999", "rate inf", "underscore", "first in file order", "wide row", "stray CR",
        "open quote", "column twice", "empty"])
def test_bad_timeseries_cells_are_named_by_file_line(tmp_path, edit, message):
    with pytest.raises(FieldError) as err:
        load_run(_shipped_copy(tmp_path, edit))
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("edit", [
    lambda lines: "\r\n".join(lines),                               # as shipped (CR LF)
    lambda lines: "\n".join(lines),                                 # LF
    lambda lines: "\r".join(lines),                                 # CR alone (Excel's "CSV (Macintosh)")
    _cell(2, 0, "5e-324"),                                          # a tick just after the start
    _cell(3, 0, "2.0"),                                             # a repeated tick (t does not go back)
    _cell(5, 1, '"7673.0"'),                                        # a quoted cell
    lambda lines: lines[0] + "\r\n",                                # a header only: no ticks
], ids=["crlf", "lf", "cr", "5e-324", "repeated tick", "quoted", "header only"])
def test_good_timeseries_variants_are_read(tmp_path, shipped, edit):
    ts = load_run(_shipped_copy(tmp_path, edit)).timeseries
    assert list(ts.columns) == ["t", "prompt_throughput", "gen_throughput", "running", "waiting", "kv_cache_pct"]
    assert all(ts[c].dtype == np.float64 for c in ts.columns)
    if len(ts) > 1:
        assert len(ts) == 67 and ts["running"].equals(shipped.timeseries["running"])


def test_the_shipped_timeseries_reads_as_before(shipped):
    import pandas as pd
    ts = shipped.timeseries
    raw = pd.read_csv(SHIPPED_RUN + "/timeseries.csv").astype(float)
    assert ts.equals(raw[list(ts.columns)])


def test_a_run_message_names_each_file_once(tmp_path, capsys):
    """Issue 42: 'requests.jsonl: requests.jsonl holds more than 10,000 requests' named the file twice."""
    path = write_run(tmp_path / "rtxpro6000_big", [json.dumps(synthetic_rows(1)[0])] * 10_001)
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == ("error: requests.jsonl holds more than 10,000 requests; replay a part of "
                                       "the run\n")
    path = write_run(tmp_path / "rtxpro6000_none", [])
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == "error: requests.jsonl holds no requests\n"
    bad = {**synthetic_rows(1)[0], "last_token_ts": 50.0}
    path = write_run(tmp_path / "rtxpro6000_order", synthetic_rows(2) + [bad])
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == ("error: requests.jsonl line 3: the times are out of order (queued <= "
                                       "scheduled <= first token <= last token)\n")
    path = write_run(tmp_path / "rtxpro6000_list", synthetic_rows(1) + ["[1, 2]"])
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == "error: requests.jsonl line 2 is not a JSON object\n"
    path = write_run(tmp_path / "rtxpro6000_meta", synthetic_rows(1), {"model": "meta-llama/Llama-3.1-8B"})
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == "error: meta.json: engine_kwargs is missing or not an object\n"
    path = write_run(tmp_path / "rtxpro6000_model", synthetic_rows(1), {"engine_kwargs": {}})
    assert main(["replay-vllm", path]) == 2
    assert capsys.readouterr().err == "error: meta.json: model is missing or not a name\n"


# --- issue 42, F10: engine settings no vLLM run could have had are refused, not replayed ------------

def _shipped_with(tmp_path, engine=None, rows=None, **meta_keys):
    """A copy of the shipped run with ``engine`` merged into meta.json's engine_kwargs (and ``meta_keys``
    into meta.json), and ``rows(requests)`` editing its requests."""
    import shutil
    run = tmp_path / "rtxpro6000_llama-3.1-8b"
    shutil.copytree(SHIPPED_RUN, run)
    meta = json.loads((run / "meta.json").read_text())
    meta["engine_kwargs"].update(engine or {})
    meta.update(meta_keys)
    (run / "meta.json").write_text(json.dumps(meta))
    if rows is not None:
        reqs = [json.loads(line) for line in (run / "requests.jsonl").read_text().splitlines()]
        rows(reqs)
        (run / "requests.jsonl").write_text("\n".join(json.dumps(r) for r in reqs) + "\n")
    return str(run)


TP = "meta.json: engine_kwargs.tensor_parallel_size = "


@pytest.mark.parametrize("engine, message", [
    ({"tensor_parallel_size": 3}, TP + "3 is not a tensor-parallel size the lab can price for Llama 3.1 8B bf16: vLLM "
     "itself refuses it, as its 32 attention heads do not split evenly over 3 GPUs; set it to the size the run used, "
     "one of 1, 2, 4, 8"),
    ({"tensor_parallel_size": 16}, TP + "16 is not a tensor-parallel size the lab can price for Llama 3.1 8B bf16: vLLM "
     "would copy Llama 3.1 8B bf16's 8 KV heads onto several GPUs, which this lab does not model; set it to the size "
     "the run used, one of 1, 2, 4, 8"),
    ({"tensor_parallel_size": 0}, TP + "0 must be a whole number of at least 1"),
    ({"kv_cache_dtype": "fp4"}, 'meta.json: engine_kwargs.kv_cache_dtype = "fp4" is not a KV-cache dtype vLLM knows; '
     "it takes one of auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla"),
    ({"kv_cache_dtype": ["auto"]}, 'meta.json: engine_kwargs.kv_cache_dtype = ["auto"] is not a KV-cache dtype'),
    ({"kv_cache_dtype": "fp8_e5m2"}, 'meta.json: engine_kwargs.kv_cache_dtype = "fp8_e5m2": the lab prices a KV cache '
     "in the model's own 2-byte values only (auto or bfloat16); an fp8 cache holds 1 byte a value"),
    ({"max_model_len": 10}, "requests.jsonl line 1: input_toks = 2,358 is more than max_model_len = 10 (meta.json's "
     "engine_kwargs): vLLM refuses a longer prompt, so this request cannot have run under these settings; set "
     "max_model_len in meta.json to the value the run used"),
    ({"max_model_len": 3000}, "requests.jsonl line 14: input_toks + output_toks = 2,357 + 766 = 3,123 tokens, more "
     "than max_model_len = 3,000 (meta.json's engine_kwargs): vLLM stops a request when its prompt and output reach "
     "max_model_len"),
    ({"max_model_len": 200_000}, "meta.json: engine_kwargs.max_model_len = 200000 must be a whole number from 1 to "
     "131,072 (tokens: Llama 3.1 8B bf16's context window)"),
], ids=["tp 3", "tp 16", "tp 0", "fp4", "dtype list", "fp8", "max_model_len 10", "max_model_len 3000",
        "max_model_len past the model"])
def test_impossible_engine_settings_are_refused(tmp_path, capsys, engine, message):
    path = _shipped_with(tmp_path, engine)
    assert main(["replay-vllm", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: " + message) and err.count("\n") == 1, err


def test_the_sizes_the_run_could_have_used_replay(tmp_path, capsys, shipped, shipped_replay):
    # every allowed tensor-parallel size and the 2-byte KV dtypes price; a max_model_len the requests just
    # fit (the longest holds 3,998 + 767 tokens) is accepted and changes nothing
    assert int((shipped.prompt + shipped.output).max()) == 4765
    for engine in ({"tensor_parallel_size": 2}, {"kv_cache_dtype": "bfloat16"}, {"kv_cache_dtype": None},
                   {"max_model_len": 4765}):
        path = _shipped_with(tmp_path / str(len(os.listdir(tmp_path))), engine)
        assert main(["replay-vllm", path, "--json"]) == 0, capsys.readouterr().err
        assert capsys.readouterr().err == ""
    rep = replay(load_run(path), calibration="run")
    assert rep.table == shipped_replay.table


def test_a_batch_setting_left_to_vllm_is_taken_from_its_default_with_a_note(tmp_path, capsys):
    """null means "vLLM's default" (EngineArgs.get_batch_defaults): the replay takes the default the lab
    uses everywhere and says so in one line, since the default depends on the GPU and the entry point."""
    path = _shipped_with(tmp_path, {"max_num_batched_tokens": None})
    assert main(["replay-vllm", path, "--json"]) == 0
    captured = capsys.readouterr()
    note = ("meta.json's engine_kwargs.max_num_batched_tokens is not set, so the replay takes vLLM's default of 2,048 "
            "(vllm serve on a GPU under 70 GiB; vLLM picks 8,192 or 16,384 on a larger GPU or for the offline LLM "
            "class): set it in meta.json to the value the run used to replay it as it ran")
    assert captured.err == f"note: {note}\n"
    out = json.loads(captured.out)
    assert out["rules"]["max_num_batched_tokens"] == 2048 and out["notes"] == [note]
    # an override is not a default: no note
    assert main(["replay-vllm", path, "--max-num-batched-tokens", "1024", "--json"]) == 0
    captured = capsys.readouterr()
    assert "note:" not in captured.err and "notes" not in json.loads(captured.out)


def test_a_request_too_long_is_named_by_its_line_with_separators(tmp_path, capsys):
    """Issue 42: 'requests: request 3: needs 6250000001 blocks ... but the pool has only 35947 blocks'."""
    def huge(rows):
        rows[2]["input_toks"] = 10 ** 11
    assert main(["replay-vllm", _shipped_with(tmp_path / "a", rows=huge)]) == 2
    assert capsys.readouterr().err == ("error: requests.jsonl line 3: input_toks = 100000000000 is more than "
                                       "10,000,000 tokens, the longest request the lab reads\n")

    def long(rows):
        rows[2]["input_toks"] = 1_000_000
    assert main(["replay-vllm", _shipped_with(tmp_path / "b", rows=long)]) == 2
    assert capsys.readouterr().err.startswith(
        "error: requests.jsonl line 3: input_toks = 1,000,000 is more than max_model_len = 131,072 (Llama 3.1 8B "
        "bf16's context window, which vLLM takes when meta.json does not set max_model_len)")
    small = _shipped_with(tmp_path / "c", kv_cache={"num_gpu_blocks": 100, "block_size": 16})
    assert main(["replay-vllm", small]) == 2
    assert capsys.readouterr().err == (
        "error: requests.jsonl line 1: input_toks + output_toks = 2,358 + 531 = 2,889 tokens need 181 blocks of 16 "
        "slots at their longest, but the KV pool has only 100 blocks (meta.json's kv_cache.num_gpu_blocks)\n")
