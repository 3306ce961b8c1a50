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
  and ``gen_throughput`` (tokens/s), ``running`` and ``waiting`` (requests), ``kv_cache_pct``
  (percent of the KV cache in use, 0 to 100); every cell read is checked (:data:`TIMESERIES_RANGES`).

Bad input raises :class:`allocator.common.validate.FieldError` naming the file and field (a missing
file, a line that is not JSON, a missing or non-numeric field, an empty file, timestamps out of
order, a cell out of its range), never a KeyError or a traceback deeper down. A message names a line
of requests.jsonl or timeseries.csv by its number in the file, from 1, as an editor shows it
(``requests.jsonl line 3``, ``timeseries.csv line 5: t``).
"""
from __future__ import annotations

import csv
import io
import math
import os
import re
from dataclasses import dataclass, field

from typing import TYPE_CHECKING

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.paths import ASSETS
from allocator.common.formats import plural
from allocator.common.validate import Limit, LongNumber, in_range, number_from_text, show
from allocator.common.limits import MAX_TOKENS, MAX_UPLOAD_BYTES, MB
from allocator.workloads.reader import (cut, decode_utf8, file_label, json_lines, json_shown, limit_words, parse_json,
                                        read_bytes, size_words)
from allocator.workloads.trace import MAX_CELL_CHARS, MAX_COLUMNS

if TYPE_CHECKING:                      # pandas is imported where the CSV is read (CLI start-up, issue 24)
    import pandas as pd

#: Fields every line of requests.jsonl must carry (numbers).
REQUEST_FIELDS = ("input_toks", "output_toks", "queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: Columns timeseries.csv must carry.
TIMESERIES_COLUMNS = ("t", "prompt_throughput", "gen_throughput", "running", "waiting")
#: Most requests a run may hold: 33 times the shipped run's 300, far above a benchmark run; the replay
#: takes a few milliseconds a request (20,000 took over two minutes), so a run of 500,000 is refused
#: rather than replayed for many minutes.
MAX_RUN_REQUESTS = 10_000
#: Largest request file read (bytes): about 250 bytes a request, with room for longer lines.
MAX_REQUEST_BYTES = 8 * MB
#: Largest timeseries.csv read (bytes) and most ticks in it: a tick a second for over a day.
MAX_TIMESERIES_BYTES = 4 * MB
#: Largest meta.json read (bytes): a few hundred bytes of settings, with room to spare.
MAX_META_BYTES = 1 * MB
MAX_TICKS = 100_000
#: Latest a request may be queued after the first (seconds: about 11.6 days). The times are read from
#: a monotonic clock, so a later one is a damaged file; the replay's ticks and clock stay bounded.
MAX_RUN_SPAN_S = 1e6
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
        lines: int64 [requests], each request's line in requests.jsonl (counted from 1, as messages
            name it), in queue order; None for a run built by hand.
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
    lines: np.ndarray | None = field(default=None, compare=False)

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

    def request_label(self, i: int) -> str:
        """How a message names request ``i`` (0-based, queue order): ``"requests.jsonl line 3"`` (its
        line in the file), or ``"request 4"`` (1-based) for a run built without a file."""
        return f"request {i + 1}" if self.lines is None else f"requests.jsonl line {int(self.lines[i])}"

    def engine_int(self, key: str, default: int | None = None, limit: Limit | None = None) -> int | None:
        """A whole-number engine argument (e.g. ``max_num_seqs``), or ``default`` when absent/null.

        Args:
            limit: the argument's range, stated whole in the message when it is outside it (the
                same words as the option's on the command line); None: any whole number of at least 1.

        Raises:
            FieldError (``meta.json: engine_kwargs.<key>``): present but not a whole number of at least
                1, or outside ``limit``.
        """
        value = self.engine.get(key)
        if value is None:
            return default
        subject = f"meta.json: engine_kwargs.{key}"
        return _whole(subject, value) if limit is None else in_range(key, value, limit, subject=subject)


#: Ranges of the optional fields the replay does not use but a run folder may carry: a wrong one is
#: named rather than accepted without a word (issue 42). ``arrival_time`` is the benchmark client's
#: wall clock (seconds since 1970; the shipped runs' are about 1.78e9); ``tick_seconds`` the spacing
#: of timeseries.csv's rows (the shipped runs use 1 s).
OPTIONAL_RANGES = {
    "arrival_time": Limit(0, 1e11, integer=False, unit="seconds since 1970"),
    "tick_seconds": Limit(0.001, 3600, integer=False, unit="seconds between timeseries.csv rows"),
}


def _optional(subject: str, key: str, value) -> None:
    """Check an optional field the replay does not use (:data:`OPTIONAL_RANGES`); None (absent) passes.

    Raises:
        FieldError: one line naming the file, the row and field, the value (cut) and the allowed range,
            e.g. ``"requests.jsonl line 3: arrival_time = inf is not a finite number: give a number from 0
            to 100,000,000,000 (seconds since 1970)"``.
    """
    if value is None:
        return
    in_range(key, value, OPTIONAL_RANGES[key], subject=subject)


def _whole(subject: str, value) -> int:
    """``value`` (read from JSON) as an int if it is a whole number of at least 1, else a FieldError
    naming ``subject`` and echoing the value in JSON's spelling (``true``, ``"8"``)."""
    if isinstance(value, LongNumber):
        raise FieldError(subject.split(": ")[-1], value.problem, subject=subject)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise FieldError(subject.split(": ")[-1], f" = {json_shown(value)} must be a whole number of at least 1",
                         subject=subject)
    return int(value)


def _number(subject: str, value) -> float:
    """``value`` (read from JSON) as a float if it is a finite number, else a FieldError naming
    ``subject`` and echoing the value in JSON's spelling."""
    if isinstance(value, LongNumber):
        raise FieldError(subject.split(": ")[-1], value.problem, subject=subject)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FieldError(subject.split(": ")[-1], f" = {json_shown(value)} must be a finite number", subject=subject)
    return float(value)


def _read_text(path, what: str, limit: int = MAX_REQUEST_BYTES) -> str:
    """The text of ``what`` (a file of the run directory ``path``, or of a :class:`_ZipRun`), through
    the shared reader (bounded, a regular file, UTF-8); every problem is a FieldError naming ``what``."""
    if isinstance(path, _ZipRun):
        return decode_utf8(path.read(what, limit), what, what)
    full = os.path.join(path, what)
    if not os.path.lexists(full):
        raise FieldError(what, f": {what} is missing from the run directory", subject="run")
    try:
        data = read_bytes(full, limit, field=what, what="file")
    except FileNotFoundError:                  # a dangling link
        raise FieldError(what, f": {what} is missing from the run directory", subject="run") from None
    except FieldError as exc:                  # its message names the file already ("timeseries.csv is 9.0 MB; ...")
        raise FieldError(what, f": {exc.detail}", subject="run") from None
    return decode_utf8(data, what, what)


def _span_check(subject: str, value: float, first: float) -> None:
    if value - first > MAX_RUN_SPAN_S:
        raise FieldError(subject.split(": ")[-1], f" = {value:.6g} s is {value - first:.3g} s after the first request "
                         f"was queued; a measured run spans at most {MAX_RUN_SPAN_S:,.0f} s (the times come from a "
                         "monotonic clock: a later one is a damaged line)", subject=subject)


#: Largest throughput timeseries.csv may state (tokens per second): far above any server's (a GPU
#: prefills some 10**5 tokens a second; 64 data-parallel ranks of it stay below 10**7).
MAX_TIMESERIES_THROUGHPUT = 1e9
#: The range of every column of timeseries.csv the lab reads (issue 42: a cell outside it is refused,
#: never plotted). The units are those of LLMServingSim's exporter (bench/core/stat_logger.py,
#: ``downsample_to_csv_rows``): ``t`` the end of each tick in seconds from the run's start, the two
#: throughputs in tokens per second, ``running`` and ``waiting`` whole request counts (at most a run's
#: :data:`MAX_RUN_REQUESTS`), ``kv_cache_pct`` vLLM's ``kv_cache_usage`` x 100 (percent, 0 to 100).
TIMESERIES_RANGES = {
    "t": Limit(0, MAX_RUN_SPAN_S, integer=False, unit="seconds from the run's start"),
    "prompt_throughput": Limit(0, MAX_TIMESERIES_THROUGHPUT, integer=False, unit="tokens per second"),
    "gen_throughput": Limit(0, MAX_TIMESERIES_THROUGHPUT, integer=False, unit="tokens per second"),
    "running": Limit(0, MAX_RUN_REQUESTS, unit="requests"),
    "waiting": Limit(0, MAX_RUN_REQUESTS, unit="requests"),
    "kv_cache_pct": Limit(0, 100, integer=False, unit="percent of the KV cache in use"),
}
#: A cell that reads as a decimal number (what the fast path of :func:`_timeseries_columns` takes).
_DECIMAL_CELLS = re.compile(r"(?:[ \t]*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[ \t]*\n)*")


def _ts_error(line: int, problem: str) -> FieldError:
    """A FieldError about one line of timeseries.csv: ``"timeseries.csv line 5 <problem>"``."""
    return FieldError("timeseries.csv", f" {problem}", index=line - 1, subject=f"timeseries.csv line {line}")


def _timeseries_lines(text: str):
    """``(file line number, cells)`` of each line of timeseries.csv that is not blank, numbered from 1
    as an editor numbers the file's lines (the numbering of every run-folder message, as
    requests.jsonl's ``line 3``).

    Line ends LF and CR LF are read as they are, and a file whose lines end in CR alone is read with
    each CR as a line end; a CR anywhere else (inside or after a cell, e.g. ``0.0\\r,extra``) is
    refused, naming its line, rather than read as the end of a row. A quoted cell may not hold a
    line break (every cell the lab reads is a number).

    Raises:
        FieldError (``timeseries.csv``): a stray CR, a quote that is never closed, more than
            :data:`allocator.workloads.trace.MAX_COLUMNS` columns or a cell longer than
            :data:`allocator.workloads.trace.MAX_CELL_CHARS` characters, each naming the line.
    """
    if "\r" in text and "\n" not in text:
        text = text.replace("\r", "\n")              # CR-only line ends (Excel's "CSV (Macintosh)")
    for n, line in json_lines(text):
        if "\r" in line:
            raise _ts_error(n, "holds a carriage return (CR) that does not end the line: the file mixes "
                               "line ends; save it with LF or CR LF line ends only")
        if not line.strip():
            continue
        if '"' in line:
            try:
                cells = next(csv.reader([line], strict=True))
            except csv.Error:
                raise _ts_error(n, "has a quote that is never closed (a quoted cell must end on its own "
                                   "line)") from None
        else:
            cells = line.split(",")
        if len(cells) > MAX_COLUMNS:
            raise _ts_error(n, f"has {len(cells):,} columns; at most {MAX_COLUMNS} are accepted "
                               f"({', '.join(TIMESERIES_COLUMNS)}, kv_cache_pct)")
        if max(map(len, cells)) > MAX_CELL_CHARS:
            raise _ts_error(n, f"has a cell longer than {MAX_CELL_CHARS:,} characters")
        yield n, cells


def _timeseries_columns(lines: list, names: list) -> dict:
    """The checked columns of timeseries.csv's data ``lines`` [(file line, cells)]: {column: float64
    [ticks]} for every column of :data:`TIMESERIES_RANGES` the header ``names`` holds.

    Every cell must lie in its column's range (:data:`TIMESERIES_RANGES`) and ``t`` must not go back
    from one line to the next (equal ticks are kept). Nothing is skipped: LLMServingSim's exporter
    writes none of these cells (empty, ``nan``, ``inf``, a negative or fractional count, a time out of
    order), so each is a damaged file, refused with the first bad cell in file order. A time as small
    as ``5e-324`` is in range (a tick just after the start) and read as written.

    Raises:
        FieldError (the column): ``"timeseries.csv line 5: t = nan is not a number: give a number
            from 0 to 1,000,000 (seconds from the run's start)"`` -- the file line, the column and the
            cell as typed; ``"timeseries.csv line 7: t = 3 is earlier than line 6's t = 5: ..."``.
    """
    wanted = [(i, c) for i, c in enumerate(names) if c in TIMESERIES_RANGES]
    out, first_bad = {}, len(lines)
    for i, col in wanted:
        column = [row[i] for _, row in lines]
        if not _DECIMAL_CELLS.fullmatch("".join(c + "\n" for c in column)):
            column = [c if _DECIMAL_CELLS.fullmatch(c + "\n") else "nan" for c in column]   # NaN: refused below
        values = np.array(column, dtype=np.float64) if column else np.zeros(0)
        limit = TIMESERIES_RANGES[col]
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (values < limit.low) | (values > limit.high)
            if limit.integer:
                bad |= values != np.floor(values)
        if bad.any():
            first_bad = min(first_bad, int(np.argmax(bad)))
        out[col] = values
    if first_bad < len(lines):                       # name the first bad cell in file order, as typed
        n, row = lines[first_bad]
        for j, name in wanted:
            cell = row[j].strip()
            in_range(name, number_from_text(cell) if cell else None, TIMESERIES_RANGES[name],
                     subject=f"timeseries.csv line {n}: {name}")
    t = out.get("t")
    if t is not None and len(t) > 1:
        back = np.flatnonzero(t[1:] < t[:-1])
        if len(back):
            k = int(back[0]) + 1
            (was, before), (now, after) = lines[k - 1], lines[k]
            i = names.index("t")
            raise FieldError("t", f" = {show(number_from_text(after[i].strip()))} is earlier than line {was}'s t = "
                             f"{show(number_from_text(before[i].strip()))}: the ticks must not go back in time",
                             subject=f"timeseries.csv line {now}: t")
    return out


def _timeseries(path):
    """timeseries.csv of the run at ``path`` as a DataFrame of floats, or None when the run has none.

    Bounded before it is parsed: at most :data:`MAX_TIMESERIES_BYTES` bytes and :data:`MAX_TICKS`
    rows; read line by line (:func:`_timeseries_lines`), every row as wide as the header, each column
    of :data:`TIMESERIES_RANGES` checked cell by cell (:func:`_timeseries_columns`). Every message
    names the file's line as an editor numbers it.

    Returns:
        DataFrame [ticks] of float64: the columns of :data:`TIMESERIES_COLUMNS` and ``kv_cache_pct``
        when the file has it (other columns are not read); no rows when the file has a header only.

    Raises:
        FieldError: the file too large, empty, with too many rows, a column named twice or missing, a
            row with more or fewer fields than the header, and the cells :func:`_timeseries_columns`
            refuses.
    """
    import pandas as pd

    if isinstance(path, _ZipRun):
        if "timeseries.csv" not in path.members:
            return None
    elif not os.path.lexists(os.path.join(path, "timeseries.csv")):
        return None
    text = _read_text(path, "timeseries.csv", MAX_TIMESERIES_BYTES)
    if text.count("\n") > MAX_TICKS + 1:
        raise FieldError("timeseries.csv", f": timeseries.csv has more than {MAX_TICKS:,} rows", subject="run")
    lines = _timeseries_lines(text)
    first = next(lines, None)
    if first is None:
        raise FieldError("timeseries.csv", f": timeseries.csv is empty; its first line names the columns "
                         f"({', '.join(TIMESERIES_COLUMNS)}, kv_cache_pct)", subject="run")
    head, names = first[0], [name.strip() for name in first[1]]
    for name in names:
        if name and names.count(name) > 1:
            raise _ts_error(head, f"names the column {cut(name)} twice: each column must be named once")
    missing = [c for c in TIMESERIES_COLUMNS if c not in names]
    if missing:
        raise FieldError("timeseries.csv", f": timeseries.csv lacks column(s) {', '.join(missing)}", subject="run")
    rows = []
    for n, cells in lines:
        if len(cells) != len(names):
            raise _ts_error(n, f"has {plural(len(cells), 'field')} but the header (line {head}) has {len(names):,} "
                               f"({cut(', '.join(names), 80)}): a field is missing or extra")
        rows.append((n, cells))
    columns = _timeseries_columns(rows, names)
    return pd.DataFrame({c: columns[c] for c in (*TIMESERIES_COLUMNS, "kv_cache_pct") if c in columns})


def load_run(path: str) -> VllmRun:
    """Read and check the run in directory ``path``.

    Every file goes through the shared reader (:mod:`allocator.workloads.reader`): bounded in bytes
    before it is read, JSON parsed with the same guards as the Mooncake trace (deep nesting, numbers
    of thousands of digits, U+2028 inside a string), and messages that name the file and line in
    plain words -- the directory by :func:`allocator.workloads.reader.file_label`, never a server's
    absolute path.

    Returns:
        a :class:`VllmRun`, requests in queue order, times relative to the first ``queued_ts``.

    Raises:
        FieldError: ``path`` not a directory (``run``); meta.json missing, not a JSON object, or
            without ``model`` (a non-empty string) or ``engine_kwargs`` (an object); requests.jsonl
            missing, empty or with more than :data:`MAX_RUN_REQUESTS` requests, a line that is not
            a JSON object, a missing or non-numeric field, a token count that is not a whole number
            from 1 to ``allocator.common.limits.MAX_TOKENS``, times out of order (queued <= scheduled
            <= first token <= last token) or more than :data:`MAX_RUN_SPAN_S` after the first
            request; timeseries.csv (optional): as :func:`_timeseries`; any file past its byte limit.
    """
    if not isinstance(path, str) or not path or "\x00" in path or not os.path.isdir(path):
        shown = show(file_label(path) if isinstance(path, str) and "\x00" not in path else path, 120)
        raise FieldError("run", f" = {shown} is not a directory holding meta.json and requests.jsonl")
    return _load(path, os.path.basename(os.path.normpath(path)))


def _load(path, name: str) -> VllmRun:
    """The run whose files ``path`` holds (a directory, or a :class:`_ZipRun`), named ``name``."""
    meta = parse_json(_read_text(path, "meta.json", MAX_META_BYTES), "meta.json", field="meta.json")
    if not isinstance(meta, dict):
        raise FieldError("meta.json", ": meta.json must hold a JSON object", subject="run")
    _optional("meta.json: tick_seconds", "tick_seconds", meta.get("tick_seconds"))
    engine = meta.get("engine_kwargs")
    if not isinstance(engine, dict):
        raise FieldError("engine_kwargs", " is missing or not an object", subject="meta.json: engine_kwargs")
    model = meta.get("model") or engine.get("model")
    if not isinstance(model, str) or not model.strip():
        raise FieldError("model", " is missing or not a name", subject="meta.json: model")
    kv_cache = meta.get("kv_cache") or {}
    hardware = meta.get("hardware") or {}
    for key, value in (("kv_cache", kv_cache), ("hardware", hardware)):
        if not isinstance(value, dict):
            raise FieldError(key, " must be an object", subject=f"meta.json: {key}")

    text = _read_text(path, "requests.jsonl")
    rows = []
    for n, line in json_lines(text):
        if not line.strip():
            continue
        if len(rows) >= MAX_RUN_REQUESTS:
            raise FieldError("requests.jsonl", f" holds more than {MAX_RUN_REQUESTS:,} requests; "
                             "replay a part of the run", subject="requests.jsonl")
        obj = parse_json(line, f"requests.jsonl line {n}", field="requests.jsonl", index=n - 1)
        if not isinstance(obj, dict):
            raise FieldError("requests.jsonl", " is not a JSON object", index=n - 1, subject=f"requests.jsonl line {n}")
        row = []
        for key in REQUEST_FIELDS:
            subject = f"requests.jsonl line {n}: {key}"
            if key not in obj:
                raise FieldError(key, " is missing", subject=subject)
            row.append(_whole(subject, obj[key]) if key.endswith("_toks") else _number(subject, obj[key]))
            if key.endswith("_toks") and row[-1] > MAX_TOKENS:
                raise FieldError(key, f" = {json_shown(obj[key])} is more than {MAX_TOKENS:,} tokens, the longest "
                                 "request the lab reads", subject=subject)
        _optional(f"requests.jsonl line {n}: arrival_time", "arrival_time", obj.get("arrival_time"))
        q, s, f, last = row[2:]
        if not q <= s <= f <= last:
            raise FieldError("requests.jsonl", ": the times are out of order (queued <= scheduled <= "
                             "first token <= last token)", index=n - 1, subject=f"requests.jsonl line {n}")
        rows.append(row + [n])
    if not rows:
        raise FieldError("requests.jsonl", " holds no requests", subject="requests.jsonl")
    arr = np.array(rows, dtype=np.float64)
    arr = arr[np.argsort(arr[:, 2], kind="stable")]
    t0 = arr[0, 2]
    late = np.flatnonzero(arr[:, 5] - t0 > MAX_RUN_SPAN_S)
    if len(late):
        i = int(late[0])
        _span_check(f"requests.jsonl line {int(arr[i, 6])}: last_token_ts", float(arr[i, 5]), t0)

    ts = _timeseries(path)
    return VllmRun(
        name=name, model=model.strip(), engine=engine, kv_cache=kv_cache,
        hardware=hardware, vllm_version=str(meta.get("vllm_version", "")),
        prompt=arr[:, 0].astype(np.int64), output=arr[:, 1].astype(np.int64),
        queued=arr[:, 2] - t0, scheduled=arr[:, 3] - t0, first=arr[:, 4] - t0, last=arr[:, 5] - t0, timeseries=ts,
        lines=arr[:, 6].astype(np.int64))


# ---------------------------------------------------------------------------------------------
# A run folder uploaded as a zip
# ---------------------------------------------------------------------------------------------

#: Largest zip accepted (bytes): the app's upload limit (.streamlit/config.toml maxUploadSize, 5 MB).
MAX_ZIP_BYTES = MAX_UPLOAD_BYTES
#: Most entries a zip may list (a run folder holds three files; the rest is skipped, but each
#: entry is inspected, so their number is bounded too).
MAX_ZIP_MEMBERS = 64
#: Largest extracted size of each run file (bytes), as for a run directory; a member is read at
#: most this far, so a zip whose headers understate a member's size stops there all the same.
RUN_FILE_LIMITS = {"meta.json": MAX_META_BYTES, "requests.jsonl": MAX_REQUEST_BYTES,
                   "timeseries.csv": MAX_TIMESERIES_BYTES}


class _ZipRun:
    """The run files of one zip, read on demand with a bound (``members``: run file -> ZipInfo)."""

    def __init__(self, archive, members: dict):
        self.archive, self.members = archive, members

    def read(self, what: str, limit: int) -> bytes:
        import zipfile
        import zlib

        info = self.members.get(what)
        if info is None:
            raise FieldError(what, f": {what} is missing from the zip", subject="run")
        if info.file_size > limit:
            raise FieldError(what, f": {what} is {size_words(info.file_size)} when extracted; "
                             f"{limit_words(limit)}", subject="run")
        try:
            with self.archive.open(info) as fh:
                data = fh.read(limit + 1)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError, ValueError):
            raise FieldError(what, f": {what} cannot be extracted from the zip (damaged, encrypted or compressed "
                             "with a method Python cannot read)", subject="run") from None
        if len(data) > limit:
            raise FieldError(what, f": {what} expands past {limit / MB:g} MB (its header understates it); "
                             f"{limit_words(limit)}", subject="run")
        return data


def _unsafe(name: str) -> bool:
    """Whether a zip entry's name would leave the folder it is extracted into: absolute, a drive,
    a ``..`` step, a backslash (a Windows separator some tools write), or a NUL."""
    return (name.startswith(("/", "\\")) or "\\" in name or "\x00" in name or re.match(r"^[A-Za-z]:", name) is not None
            or any(part == ".." for part in name.split("/")))


def load_run_zip(data: bytes, name: str = "upload.zip") -> VllmRun:
    """Read and check a run folder uploaded as a zip: meta.json, requests.jsonl and (optionally)
    timeseries.csv, at the zip's root or inside one folder; nothing is written to disk.

    Every file then goes through the same readers and checks as :func:`load_run` (bounded,
    UTF-8, the JSON guards, the request limits). The run is named after the folder the files lie
    in, else after the zip (the name may say the GPU, e.g. ``rtxpro6000_llama-3.1-8b``).

    Args:
        data: the zip's bytes; name: the uploaded file's name (for the run's name only).

    Raises:
        FieldError: a zip over :data:`MAX_ZIP_BYTES`; not a zip (or a damaged one); more than
            :data:`MAX_ZIP_MEMBERS` entries; an entry name that climbs out of the folder (``..``,
            an absolute path, a drive, a backslash); an encrypted run file; meta.json or
            requests.jsonl missing, or in several folders; a run file larger than
            :data:`RUN_FILE_LIMITS` when extracted (also when the header understates it); and
            everything :func:`load_run` refuses in the files themselves.
    """
    import zipfile

    if not isinstance(data, (bytes, bytearray)):
        raise FieldError("run", ": the upload is not a file's bytes", subject="run")
    if len(data) > MAX_ZIP_BYTES:
        raise FieldError("run", f": the zip is {size_words(len(data))}; "
                         f"{limit_words(MAX_ZIP_BYTES)}", subject="run")
    try:
        archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError):
        raise FieldError("run", ": the upload is not a zip archive (or a damaged one); zip the run folder that "
                         "holds meta.json and requests.jsonl", subject="run") from None
    if len(infos) > MAX_ZIP_MEMBERS:
        raise FieldError("run", f": the zip lists {len(infos):,} entries; a run folder holds three files (at most "
                         f"{MAX_ZIP_MEMBERS} entries are read)", subject="run")
    found: dict = {}
    for info in infos:
        entry = info.filename
        if _unsafe(entry):
            raise FieldError("run", f": the zip holds an unsafe entry name {show(entry, 60)} (an absolute path, a "
                             "drive, a backslash or a '..' step); zip the run folder itself", subject="run")
        if entry.endswith("/") or entry.startswith("__MACOSX/"):
            continue
        folder, _, base = entry.rpartition("/")
        if base not in RUN_FILE_LIMITS:
            continue                                 # other files of the folder are skipped
        if folder.count("/") > 0:
            raise FieldError("run", f": {show(entry, 60)} lies more than one folder deep; put the run files at "
                             "the zip's root or in one folder", subject="run")
        if info.flag_bits & 0x1:
            raise FieldError("run", f": {show(entry, 60)} is encrypted; zip the run without a password",
                             subject="run")
        found.setdefault(folder, {})
        if base in found[folder]:
            raise FieldError("run", f": the zip holds {base} twice in one folder", subject="run")
        found[folder][base] = info
    runs = [f for f, files in found.items() if "meta.json" in files or "requests.jsonl" in files]
    if len(runs) > 1:
        raise FieldError("run", f": the zip holds {len(runs):,} runs (folders {', '.join(sorted(show(r, 30) for r in runs))}); "
                         "upload one run folder", subject="run")
    members = found[runs[0]] if runs else {}
    for need in ("meta.json", "requests.jsonl"):
        if need not in members:
            raise FieldError(need, f": {need} is missing from the zip (a run folder holds meta.json, "
                             "requests.jsonl and optionally timeseries.csv)", subject="run")
    folder = runs[0]
    stem = re.sub(r"\.zip$", "", os.path.basename(str(name)), flags=re.I)
    run_name = re.sub(r"[^A-Za-z0-9._-]", "_", folder or stem)[:80] or "upload"
    return _load(_ZipRun(archive, members), run_name)


def load_run_path(path: str) -> VllmRun:
    """A run from a directory (:func:`load_run`) or from a zip file of one (:func:`load_run_zip`,
    when ``path`` is a file whose name ends in ``.zip``).

    Raises:
        FieldError: as those two; a zip file over :data:`MAX_ZIP_BYTES` or unreadable.
    """
    if isinstance(path, str) and path.lower().endswith(".zip") and os.path.isfile(path):
        try:
            data = read_bytes(path, MAX_ZIP_BYTES, field="run", what="zip file")
        except FileNotFoundError:
            raise FieldError("run", f" = {show(file_label(path), 120)} is missing") from None
        return load_run_zip(data, os.path.basename(path))
    return load_run(path)
