"""The Mooncake trace: requests whose prompts say, block by block, which prefix they share.

Schema (JSON Lines, one request per line; the "mooncake trace format")::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, ...]}

``timestamp`` is milliseconds since the first request, ``input_length`` and ``output_length``
are tokens, and ``hash_ids`` holds one integer per 512-token block of the prompt (the last may
cover a partial block): two requests whose first k ids are equal have the same first k blocks
of prompt. The shipped file (``assets/mooncake_conversation_trace.jsonl.gz``) is the whole
conversation trace of the FAST 2025 release, 12,031 requests, Apache-2.0:

    Ruoyu Qin, Zheming Li, Weiran He, Jialei Cui, Feng Ren, Mingxing Zhang, Yongwei Wu, Weimin
    Zheng, Xinran Xu. "Mooncake: Trading More Storage for Less Computation -- A KVCache-centric
    Architecture for Serving LLM Chatbot." USENIX FAST 2025. (kvcache-ai/Mooncake,
    FAST25-release/traces/conversation_trace.jsonl.)

Token ids: the trace does not carry text, so each request gets token ids derived from its hash
ids (:func:`prompt_token_ids`): token j of the block with id h is a fixed function of (h, j).
Two prompts then hold exactly the same tokens wherever their hash ids agree, at any engine block
size, and different tokens elsewhere. So a block of the engine's holds the same tokens, and
every token before it, exactly when two prompts agree on every trace id up to the one holding
its last token and the block ends at the same position: :meth:`TracePrompts.block_keys` keys
blocks by that (chained id, end) pair, with no token hashing at all, and gives the same matches
as hashing the tokens (:func:`allocator.memory.block_hash.prefix_block_keys`; ``tests/core/test_mooncake.py``
checks both agree). The chaining rule of assets/reference_figures.md R8 holds: an id counts only
with every id before it.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                   # pandas is imported where a trace is read or replayed
    import pandas as pd

from allocator.common.formats import plural
from allocator.common.hashing import splitmix64
from allocator.common.paths import ASSETS
from allocator.workloads.reader import decode_utf8, gunzip, json_lines, json_shown, parse_json, read_bytes
from allocator.workloads.trace import MAX_ARRIVAL_STEP, MAX_BYTES, load_shipped, trace_workload
from allocator.common.limits import MAX_ROWS, MAX_TOKENS, MB
from allocator.common.limits import LIMITS
from allocator.common.mathutils import cdiv
from allocator.common.errors import FieldError
from allocator.common.validate import LongNumber, whole_number
from allocator.workloads.requests import Workload

#: Tokens per hash id in the Mooncake trace.
TRACE_BLOCK = 512
MOONCAKE_TRACE = os.path.join(ASSETS, "mooncake_conversation_trace.jsonl.gz")
MOONCAKE_ATTRIBUTION = (
    "Ruoyu Qin, Zheming Li, Weiran He, Jialei Cui, Feng Ren, Mingxing Zhang, Yongwei Wu, Weimin Zheng, "
    "Xinran Xu. \"Mooncake: Trading More Storage for Less Computation — A KVCache-centric Architecture "
    "for Serving LLM Chatbot\", USENIX FAST 2025. Trace: kvcache-ai/Mooncake, "
    "FAST25-release/traces/conversation_trace.jsonl (Apache License 2.0)."
)
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
#: Largest hash id accepted (ids are remapped to small integers; this keeps arithmetic exact).
MAX_HASH_ID = 2 ** 40
#: Largest compressed file read (bytes); the uncompressed text obeys ``max_bytes`` as well.
MAX_GZIP_BYTES = 8 * MB


def is_mooncake_path(path) -> bool:
    """True for a file name of the Mooncake JSONL schema (``.jsonl``, ``.jsonl.gz``)."""
    return isinstance(path, str) and path.lower().endswith((".jsonl", ".jsonl.gz"))


def _line_error(line: int, field: str, problem: str) -> FieldError:
    """A FieldError about one field of one line (1-based line number in the message)."""
    return FieldError(field, f": {problem}", index=line - 1, subject=f"line {line}, field {field}")


def _file_error(problem: str) -> FieldError:
    return FieldError("trace", problem, subject="")


def _int_field(obj: dict, line: int, name: str, minimum: int, maximum: int) -> int:
    value = obj[name]
    if isinstance(value, LongNumber):
        raise _line_error(line, name, f"{value.detail}: give a whole number from {minimum} to {maximum:,}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and (not math.isfinite(value) or value != int(value))):
        raise _line_error(line, name, f"{json_shown(value)} is not a whole number")
    value = int(value)
    if value < minimum:
        raise _line_error(line, name, f"{value} is below the minimum {minimum}")
    if value > maximum:
        raise _line_error(line, name, f"{value} is above the maximum {maximum:,}")
    return value


def load_mooncake(source, *, max_rows: int = MAX_ROWS, max_bytes: int = 4 * MAX_BYTES) -> pd.DataFrame:
    """Read and validate a Mooncake JSONL trace (plain or gzip-compressed).

    Args:
        source: a path, a file-like object, or bytes.
        max_rows: most requests accepted.
        max_bytes: largest uncompressed text accepted (bytes).

    Returns:
        DataFrame with int64 ``prompt_tokens`` and ``output_tokens``, float ``arrival_s``
        (seconds since the first request) and object column ``hash_ids`` (a tuple of ints per
        request, ceil(prompt_tokens / 512) long).

    Raises:
        FieldError: naming the line and field (field = the JSON key, index = the 0-based line):
            a line that is not a JSON object, a missing key, a value that is not a whole number
            or is out of range, ``hash_ids`` not a list of whole numbers >= 0 of the right
            length, a timestamp earlier than the line before; or the whole file (field
            ``trace``): not UTF-8, empty, too large, too many lines.
        FileNotFoundError: the path does not exist.
    """
    import pandas as pd

    data = read_bytes(source, MAX_GZIP_BYTES if str(source).endswith(".gz") else max_bytes)
    data = gunzip(data, max_bytes)
    text = decode_utf8(data)
    prompts, outputs, stamps, ids = [], [], [], []
    for n, raw in json_lines(text):
        if not raw.strip():
            continue
        if len(prompts) >= max_rows:
            raise _file_error(f"the file has more than {plural(max_rows, 'request')}")
        obj = parse_json(raw, f"line {n}", index=n - 1)
        if not isinstance(obj, dict):
            raise FieldError("trace", f"line {n} is not a JSON object with keys {', '.join(FIELDS)}",
                             index=n - 1, subject="")
        for key in FIELDS:
            if key not in obj:
                raise _line_error(n, key, "is missing (each line needs timestamp, input_length, "
                                          "output_length and hash_ids)")
        ts = obj["timestamp"]
        if isinstance(ts, LongNumber):
            raise _line_error(n, "timestamp", f"{ts.detail}: give a non-negative number of milliseconds")
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise _line_error(n, "timestamp", f"{json_shown(ts)} is not a non-negative number of milliseconds")
        prompt = _int_field(obj, n, "input_length", 1, MAX_TOKENS)
        output = _int_field(obj, n, "output_length", 1, MAX_TOKENS)
        hids = obj["hash_ids"]
        if not isinstance(hids, list):
            raise _line_error(n, "hash_ids", f"{json_shown(hids)} is not a list of block ids")
        for j, h in enumerate(hids):
            if isinstance(h, LongNumber) or isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= MAX_HASH_ID:
                raise _line_error(n, "hash_ids", f"item {j + 1} = {json_shown(h)} is not a block id "
                                                 f"(a whole number from 0 to {MAX_HASH_ID:,})")
        want = cdiv(prompt, TRACE_BLOCK)
        if len(hids) != want:
            raise _line_error(n, "hash_ids", f"has {len(hids)} ids but input_length {prompt} needs "
                                             f"{want} (one per {TRACE_BLOCK}-token block)")
        if stamps and ts < stamps[-1]:
            raise _line_error(n, "timestamp", f"{ts:g} ms is earlier than the line before "
                                              f"({stamps[-1]:g} ms): sort the file by arrival")
        if stamps and (ts - stamps[0]) / 1000.0 * LIMITS["steps_per_second"].low > MAX_ARRIVAL_STEP:
            raise _line_error(n, "timestamp", f"{ts:g} ms is {ts - stamps[0]:.3g} ms after the first request: "
                                              "past the engine's clock at any replay speed "
                                              f"({MAX_ARRIVAL_STEP:,} steps); timestamps are milliseconds")
        prompts.append(prompt)
        outputs.append(output)
        stamps.append(float(ts))
        ids.append(tuple(hids))
    if not prompts:
        raise _file_error("the file has no requests")
    arrival = (np.asarray(stamps) - stamps[0]) / 1000.0
    return pd.DataFrame({"prompt_tokens": np.asarray(prompts, dtype=np.int64),
                         "output_tokens": np.asarray(outputs, dtype=np.int64),
                         "arrival_s": arrival, "hash_ids": pd.Series(ids, dtype=object)})


#: Token ids are drawn from a vocabulary of this size (a 2**31 "vocabulary" makes accidental
#: equal blocks vanishingly rare).
VOCAB = 2 ** 31


def prompt_token_ids(hash_ids, prompt_len: int) -> np.ndarray:
    """Token ids of a prompt described by trace block ids: token j of the block with id h is
    ``splitmix64(h * 512 + j) mod 2**31``; the prompt is cut to ``prompt_len`` tokens (the last
    block may be partial).

    Args:
        hash_ids: ceil(prompt_len / 512) ids (ints >= 0).
        prompt_len: tokens (>= 1).

    Returns:
        int64 array of shape (prompt_len,).

    Raises:
        FieldError: ``hash_ids`` of the wrong length for ``prompt_len``.
    """
    prompt_len = whole_number("prompt_len", prompt_len, 1)
    ids = np.asarray(hash_ids, dtype=np.uint64)
    if len(ids) != cdiv(prompt_len, TRACE_BLOCK):
        raise FieldError("hash_ids", f" has {len(ids)} ids for {prompt_len} tokens "
                                     f"(needs {cdiv(prompt_len, TRACE_BLOCK)})")
    offsets = np.arange(TRACE_BLOCK, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = (ids[:, None] * np.uint64(TRACE_BLOCK) + offsets[None, :]).reshape(-1)[:prompt_len]
    return (splitmix64(keys) % np.uint64(VOCAB)).astype(np.int64)


class TracePrompts:
    """Token ids of every request of a trace window, made on demand (request id -> tokens).

    Holds only the hash ids; :meth:`tokens` derives a request's ids when the engine admits it.
    """

    def __init__(self, by_request: dict):
        self._ids = dict(by_request)          # request id -> (hash_ids, prompt_len)
        self._chains: dict[tuple, int] = {}   # (chain number of the ids before, id) -> chain number
        self._chain_ids: dict[int, np.ndarray] = {}   # request id -> chain number of each of its ids

    def __contains__(self, request_id) -> bool:
        return request_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def tokens(self, request_id: int) -> np.ndarray:
        """The request's prompt token ids, int64 (prompt_len,). Raises KeyError for an unknown id."""
        hids, n = self._ids[request_id]
        return prompt_token_ids(hids, n)

    def hash_ids(self, request_id: int) -> tuple:
        """The trace's own block ids of the request's prompt (512 tokens each)."""
        return self._ids[request_id][0]

    def block_keys(self, request_id: int, block_size: int, *, as_array: bool = False):
        """Keys of the request's full prompt blocks of ``block_size`` tokens, for the block-hash map.

        Block i ends at token e = (i + 1) x block_size; its key is ``chain x w + ((e - 1) mod 512)
        // block_size`` with w = 512 // block_size + 1, where ``chain`` numbers the request's trace
        ids up to the one holding token e - 1 *with every id before it* (the same ids in the same
        order get the same number, in this object); blocks ending in one trace block differ in the
        second term. Two blocks get the same key exactly when their prompts agree on those ids and
        the blocks end at the same token: then they, and everything before them, hold the same
        token ids (:func:`prompt_token_ids`). Far cheaper than hashing the tokens; dense ints (a
        dict spreads them well), so they never equal the bytes keys of other prompts.

        Returns:
            floor(prompt_len / block_size) ints >= 0, in block order: a list, or an int64 array
            with ``as_array`` (what :class:`allocator.memory.array_pool.ArrayBlockPool` looks up at once).

        Raises:
            KeyError: an unknown request id. FieldError: ``block_size`` not a whole number >= 1.
        """
        block_size = whole_number("block_size", block_size, 1)
        hids, n = self._ids[request_id]
        full = n // block_size
        if not full:
            return np.empty(0, dtype=np.int64) if as_array else []
        ids = self._chain_ids.get(request_id)
        if ids is None:
            chains, out, parent = self._chains, [], -1
            for h in hids:
                c = chains.get((parent, h))
                if c is None:
                    c = chains[(parent, h)] = len(chains)
                out.append(c)
                parent = c
            ids = self._chain_ids[request_id] = np.asarray(out, dtype=np.int64)
        width = TRACE_BLOCK // block_size + 1
        if TRACE_BLOCK % block_size == 0:
            # per = 512 // block_size blocks end in each trace block, the r-th of them at offset
            # (r + 1) x block_size - 1: its second term is r, so keys[j x per + r] = ids[j] x w + r
            per = width - 1
            keys = (ids[:, None] * width + np.arange(per, dtype=np.int64)).reshape(-1)[:full]
        else:
            last = np.arange(block_size - 1, full * block_size, block_size, dtype=np.int64)
            keys = ids[last // TRACE_BLOCK] * width + last % TRACE_BLOCK // block_size
        return keys if as_array else keys.tolist()


def mooncake_workload(df: pd.DataFrame, *, offset: int = 0, count: int = 200, steps_per_second: float = 20.0,
                      max_new_tokens: int = 2048, name: str = "mooncake-conv") -> Workload:
    """Replay ``count`` consecutive requests from ``offset`` as a workload with prompt tokens.

    Arrival step = floor((arrival_s - arrival_s[offset]) x steps_per_second), as for the Azure
    replay; outputs longer than ``max_new_tokens`` are clipped (noted in ``Workload.notes``).
    Request ids are 1-based line numbers among the file's requests.

    Returns:
        :class:`~allocator.workloads.requests.Workload` whose ``prompts`` is a :class:`TracePrompts`.

    Raises:
        FieldError: as :func:`allocator.workloads.trace.trace_workload` (``offset`` outside the trace,
            ``count`` below 1, ``steps_per_second`` not a positive finite number, an arrival past
            the engine's clock).
    """
    try:
        wl = trace_workload(df, offset=offset, count=count, steps_per_second=steps_per_second,
                            max_new_tokens=max_new_tokens, name=name)
    except FieldError as exc:
        if exc.field != "arrival_s" or exc.index is None:
            raise
        # the replay's clock check in the file's own terms: field timestamp, in milliseconds
        i, first = exc.index, float(df["arrival_s"].iloc[min(offset, len(df) - 1)])
        raise FieldError("timestamp", f": {(float(df['arrival_s'].iloc[i]) - first) * 1000:.6g} ms after the "
                                      f"window's first request is past the engine's clock at {steps_per_second:g} "
                                      f"steps per second ({MAX_ARRIVAL_STEP:,} steps); lower steps_per_second",
                         index=i, subject=f"request {i + 1}, field timestamp") from None
    first = wl.requests[0].id - 1                     # = offset, checked by trace_workload
    part = df.iloc[first: first + len(wl.requests)]
    by_id = {first + 1 + i: (h, int(p)) for i, (h, p) in enumerate(zip(part["hash_ids"], part["prompt_tokens"]))}
    return dataclasses.replace(wl, prompts=TracePrompts(by_id))


_CACHE: dict = {}


def shipped_mooncake() -> pd.DataFrame:
    """The shipped Mooncake conversation trace, loaded once per process (see ``MOONCAKE_ATTRIBUTION``).

    Raises:
        allocator.workloads.trace.ShippedDataError: the file is missing or damaged (named relative to the project).
    """
    if "mooncake" not in _CACHE:
        _CACHE["mooncake"] = load_shipped(MOONCAKE_TRACE, load_mooncake, "the Mooncake conversation trace")
    return _CACHE["mooncake"]
