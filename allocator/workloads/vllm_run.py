"""A measured vLLM run, read and checked: the format of ``assets/vllm_runs/<run>/``.

A run directory holds three files (the format of casys-kaist/LLMServingSim's
``bench/examples/<GPU>/<model>/vllm/`` runs, MIT licence, ``assets/vllm_runs/LICENSE-MIT``):

* ``meta.json`` -- the engine's arguments: ``model`` (a Hugging Face name), ``engine_kwargs``
  (``tensor_parallel_size``, ``max_num_seqs``, ``max_num_batched_tokens``, ``dtype``, ...),
  ``num_requests``; optionally ``kv_cache`` (``num_gpu_blocks``, ``block_size``,
  ``gpu_memory_utilization``) and ``hardware`` (e.g. ``{"gpu": "RTX PRO 6000"}``).
* ``requests.jsonl`` -- one JSON object per request: ``input_toks``, ``output_toks`` (tokens) and
  the monotonic-clock times ``queued_ts``, ``scheduled_ts``, ``first_token_ts``,
  ``last_token_ts`` (seconds; only differences mean anything). TTFT = first_token_ts - queued_ts;
  TPOT = (last_token_ts - first_token_ts) / (output_toks - 1); end-to-end latency =
  last_token_ts - queued_ts.
* ``timeseries.csv`` -- once a tick (``meta.tick_seconds``): ``t`` (s), ``prompt_throughput``
  and ``gen_throughput`` (tokens/s), ``running`` and ``waiting`` (requests), ``kv_cache_pct``.

Bad input raises :class:`allocator.common.validate.FieldError` naming the file and field (a missing
file, a line that is not JSON, a missing or non-numeric field, an empty file, timestamps out of
order), never a KeyError or a traceback deeper down.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.paths import ASSETS
from allocator.common.validate import show

if TYPE_CHECKING:                      # pandas is imported where the CSV is read (CLI start-up, issue 24)
    import pandas as pd

#: Fields every line of requests.jsonl must carry (numbers).
REQUEST_FIELDS = ("input_toks", "output_toks", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: Columns timeseries.csv must carry.
TIMESERIES_COLUMNS = ("t", "prompt_throughput", "gen_throughput", "running", "waiting")
#: Largest request file read (bytes): far above any benchmark run, small enough to never stall a page.
MAX_REQUEST_BYTES = 64 * 2**20
#: The run the app ships (assets/vllm_runs/...).
SHIPPED_RUN = os.path.join(ASSETS, "vllm_runs", "rtxpro6000_llama-3.1-8b")


@dataclass(frozen=True)
class VllmRun:
    """One measured run (see the module docstring for the files).

    Attributes:
        name: the directory's name.
        model: the Hugging Face model name from meta.json.
        engine: meta.json's ``engine_kwargs`` (dict).
        kv_cache: meta.json's ``kv_cache`` (dict, empty when the run does not state it).
        hardware: meta.json's ``hardware`` (dict, may be empty).
        vllm_version: as stated, or "".
        prompt, output: int64 [requests], tokens, in queue order.
        queued, scheduled, first, last: float64 [requests], seconds after the first request
            was queued.
        timeseries: DataFrame with at least :data:`TIMESERIES_COLUMNS` (None when the file is absent).
    """

    name: str
    model: str
    engine: dict
    kv_cache: dict
    hardware: dict
    vllm_version: str
    prompt: np.ndarray
    output: np.ndarray
    queued: np.ndarray
    scheduled: np.ndarray
    first: np.ndarray
    last: np.ndarray
    timeseries: pd.DataFrame | None = field(default=None, compare=False)

    def __len__(self) -> int:
        return len(self.prompt)

    @property
    def ttft(self) -> np.ndarray:
        """Time to first token per request, seconds [requests]."""
        return self.first - self.queued

    @property
    def tpot(self) -> np.ndarray:
        """Time per output token after the first, seconds [requests] (NaN for one-token answers)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output > 1, (self.last - self.first) / np.maximum(self.output - 1, 1), np.nan)

    @property
    def latency(self) -> np.ndarray:
        """End-to-end latency per request, seconds [requests]."""
        return self.last - self.queued

    def engine_int(self, key: str, default: int | None = None) -> int | None:
        """A whole-number engine argument (e.g. ``max_num_seqs``), or ``default`` when absent/null.

        Raises:
            FieldError (``meta.json: engine_kwargs.<key>``): present but not a whole number >= 1.
        """
        value = self.engine.get(key)
        if value is None:
            return default
        return _whole(f"meta.json: engine_kwargs.{key}", value)


def _whole(subject: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise FieldError(subject.split(": ")[-1], f" = {show(value)} must be a whole number >= 1", subject=subject)
    return int(value)


def _number(subject: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(subject.split(": ")[-1], f" = {show(value)} must be a finite number", subject=subject)
    return float(value)


def _read_text(path: str, what: str, limit: int = MAX_REQUEST_BYTES) -> str:
    if not os.path.isfile(path):
        raise FieldError(what, f": {what} is missing from the run directory", subject="run")
    if os.path.getsize(path) > limit:
        raise FieldError(what, f": {what} is larger than {limit // 2**20} MiB", subject="run")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except UnicodeDecodeError:
        raise FieldError(what, f": {what} is not UTF-8 text", subject="run") from None


def load_run(path: str) -> VllmRun:
    """Read and check the run in directory ``path``.

    Returns:
        a :class:`VllmRun`, requests in queue order, times relative to the first ``queued_ts``.

    Raises:
        FieldError: ``path`` not a directory (``run``); meta.json missing, not a JSON object, or
            without ``model`` (a non-empty string) or ``engine_kwargs`` (an object); requests.jsonl
            missing or empty, a line that is not a JSON object, a missing or non-numeric field, a
            negative or fractional token count, times out of order (queued <= scheduled <=
            first token <= last token); timeseries.csv (optional) unreadable or without its columns.
    """
    if not isinstance(path, str) or not path or not os.path.isdir(path):
        raise FieldError("run", f" = {show(path, 120)} is not a directory holding meta.json and requests.jsonl")
    try:
        meta = json.loads(_read_text(os.path.join(path, "meta.json"), "meta.json", 2**20))
    except json.JSONDecodeError as exc:
        raise FieldError("meta.json", f": meta.json is not JSON ({exc.msg}, line {exc.lineno})", subject="run") from None
    if not isinstance(meta, dict):
        raise FieldError("meta.json", ": meta.json must hold a JSON object", subject="run")
    engine = meta.get("engine_kwargs")
    if not isinstance(engine, dict):
        raise FieldError("engine_kwargs", " is missing from meta.json or not an object", subject="meta.json: engine_kwargs")
    model = meta.get("model") or engine.get("model")
    if not isinstance(model, str) or not model.strip():
        raise FieldError("model", " is missing from meta.json or not a name", subject="meta.json: model")
    kv_cache = meta.get("kv_cache") or {}
    hardware = meta.get("hardware") or {}
    for key, value in (("kv_cache", kv_cache), ("hardware", hardware)):
        if not isinstance(value, dict):
            raise FieldError(key, " must be an object", subject=f"meta.json: {key}")

    text = _read_text(os.path.join(path, "requests.jsonl"), "requests.jsonl")
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            raise FieldError("requests.jsonl", f": line {n} is not JSON", subject="requests.jsonl") from None
        if not isinstance(obj, dict):
            raise FieldError("requests.jsonl", f": line {n} is not a JSON object", subject="requests.jsonl")
        row = []
        for key in REQUEST_FIELDS:
            subject = f"requests.jsonl line {n}: {key}"
            if key not in obj:
                raise FieldError(key, " is missing", subject=subject)
            row.append(_whole(subject, obj[key]) if key.endswith("_toks") else _number(subject, obj[key]))
        q, s, f, last = row[2:]
        if not q <= s <= f <= last:
            raise FieldError("requests.jsonl", f": line {n}'s times are out of order (queued <= scheduled <= "
                             "first token <= last token)", subject="requests.jsonl")
        rows.append(row)
    if not rows:
        raise FieldError("requests.jsonl", ": requests.jsonl holds no requests", subject="requests.jsonl")
    arr = np.array(rows, dtype=np.float64)
    arr = arr[np.argsort(arr[:, 2], kind="stable")]
    t0 = arr[0, 2]

    ts = None
    ts_path = os.path.join(path, "timeseries.csv")
    if os.path.isfile(ts_path):
        import pandas as pd
        try:
            ts = pd.read_csv(ts_path)
        except (ValueError, pd.errors.ParserError, UnicodeDecodeError):
            raise FieldError("timeseries.csv", ": timeseries.csv is not a readable CSV table", subject="run") from None
        missing = [c for c in TIMESERIES_COLUMNS if c not in ts.columns]
        if missing:
            raise FieldError("timeseries.csv", f": timeseries.csv lacks column(s) {', '.join(missing)}", subject="run")
        try:
            ts = ts.astype({c: float for c in TIMESERIES_COLUMNS})
        except (ValueError, TypeError):
            raise FieldError("timeseries.csv", ": timeseries.csv has a non-numeric cell", subject="run") from None
    return VllmRun(
        name=os.path.basename(os.path.normpath(path)), model=model.strip(), engine=engine, kv_cache=kv_cache,
        hardware=hardware, vllm_version=str(meta.get("vllm_version", "")),
        prompt=arr[:, 0].astype(np.int64), output=arr[:, 1].astype(np.int64),
        queued=arr[:, 2] - t0, scheduled=arr[:, 3] - t0, first=arr[:, 4] - t0, last=arr[:, 5] - t0, timeseries=ts)
