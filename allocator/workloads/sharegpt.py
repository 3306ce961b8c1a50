"""The PagedAttention paper's own workload: ShareGPT lengths under OPT's tokenizer, Poisson arrivals.

The paper (Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023, section 6.1) drew its requests' (prompt, output) lengths from the
first round of ShareGPT conversations, tokenized with the OPT tokenizer, and generated arrival
times from a Poisson process. Its artifact repository (sosp-ae-39/sosp-ae-astra,
``orca/benchmark/trace.py``) shows the exact recipe this module follows:

* keep only pairs with prompt + output < 2,048 tokens (OPT's context window): 79,725 of the
  84,226 pairs, means 161.2 prompt and 338.0 output tokens (the paper's published 161.31 / 337.99);
* cut time into 10 ms quanta and draw the number of arrivals in each quantum from a Poisson
  distribution of mean ``rate x 0.01`` (so every request arrives on a 10 ms boundary);
* take the first N filtered pairs in file order (repeated if N exceeds them) for N arrivals and
  shuffle them with the seed; each request generates exactly its output length (no early stop).

``assets/sharegpt_opt_lengths_filtered.csv.gz`` holds the filtered pairs in the file's order
(columns ``prompt_tokens``, ``output_tokens``), converted from the artifact's
``datasets/sharegpt_opt_text_completion_length.pkl`` (see :data:`SHAREGPT_ATTRIBUTION`).
The shuffle here uses numpy's generator, not Python's ``random``, so the order of requests differs
from the artifact's run with the same seed; the set of lengths is the same.
"""
from __future__ import annotations

import os

from typing import TYPE_CHECKING

import numpy as np

from allocator.common.limits import check
from allocator.common.paths import ASSETS
from allocator.common.errors import FieldError
from allocator.common.validate import real_number
from allocator.workloads.reader import gunzip, read_bytes
from allocator.workloads.requests import Request, Workload
from allocator.workloads.trace import MAX_BYTES, load_shipped, load_trace

if TYPE_CHECKING:                      # pandas is imported where a CSV is read (CLI start-up, issue 24)
    import pandas as pd

#: The filtered pairs (prompt + output < 2,048), in the artifact file's order.
SHAREGPT_FILE = os.path.join(ASSETS, "sharegpt_opt_lengths_filtered.csv.gz")
#: How the data must be cited wherever it is shipped or shown (the repository has no licence file).
SHAREGPT_ATTRIBUTION = (
    "Woosuk Kwon, Zhuohan Li, Siyuan Zhuang, Ying Sheng, Lianmin Zheng, Cody Hao Yu, Joseph E. Gonzalez, "
    "Hao Zhang, Ion Stoica. \"Efficient Memory Management for Large Language Model Serving with "
    "PagedAttention\", SOSP 2023. Lengths from the paper's artifact repository (sosp-ae-39/sosp-ae-astra, "
    "datasets/sharegpt_opt_text_completion_length.pkl; ShareGPT first rounds, OPT tokenizer).")
#: The name of the workload wherever one is chosen (CLI ``--workload``, the pages).
WORKLOAD_NAME = "sharegpt-opt"
#: OPT's context window: the artifact keeps pairs with prompt + output below it (tokens).
MAX_SEQ_LEN = 2048
#: The artifact's arrival quantum (seconds): arrivals are counted per 10 ms.
TIME_QUANTUM_S = 0.01

_CACHE: dict = {}


def load_lengths(source=SHAREGPT_FILE) -> pd.DataFrame:
    """Read and check a lengths file: CSV (gzip-compressed or not) with columns ``prompt_tokens`` and
    ``output_tokens``, through the trace reader's checks (:func:`allocator.workloads.trace.load_trace`).

    Args:
        source: a path or bytes (default the shipped file).

    Returns:
        DataFrame with int64 columns ``prompt_tokens`` and ``output_tokens`` (tokens), in file order.

    Raises:
        FieldError (``trace``): not gzip or CSV text, truncated, damaged, missing columns, a bad cell.
        FileNotFoundError: the file does not exist.
    """
    data = gunzip(read_bytes(source, MAX_BYTES), MAX_BYTES)
    return load_trace(data)[["prompt_tokens", "output_tokens"]]


def sharegpt_lengths() -> pd.DataFrame:
    """The 79,725 filtered (prompt, output) pairs, loaded once per process.

    Returns:
        DataFrame with int64 columns ``prompt_tokens`` and ``output_tokens`` (tokens), in the
        artifact file's order; every row has prompt + output < 2,048.

    Raises:
        allocator.workloads.trace.ShippedDataError: the shipped file is missing or damaged; the
            message names it relative to the project (never the server's path) and says how to
            restore it. Not cached, so a restored file is read on the next call.
    """
    if "pairs" not in _CACHE:
        df = load_shipped(SHAREGPT_FILE, load_lengths, "the ShareGPT lengths of the PagedAttention paper's workload")
        _CACHE["pairs"] = df[(df["prompt_tokens"] + df["output_tokens"]) < MAX_SEQ_LEN].reset_index(drop=True)
    return _CACHE["pairs"]


#: The rate of the replayable trace the explainer and ``simulate --workload sharegpt-opt`` use: the
#: paper's Figure 13 load point (requests/s).
TRACE_RATE = 2.0


def sharegpt_trace(rate: float = TRACE_RATE, seed: int = 0) -> pd.DataFrame:
    """The filtered pairs in file order with Poisson arrival times (the artifact's 10 ms quanta) at
    ``rate`` requests/s: a trace that ``allocator.workloads.trace.trace_workload`` can replay by rows.

    Returns:
        DataFrame with ``prompt_tokens``, ``output_tokens`` (tokens) and ``arrival_s`` (seconds,
        ascending from 0), one row per filtered pair.
    """
    key = ("trace", float(rate), int(seed))
    if key not in _CACHE:
        pairs = sharegpt_lengths()
        n = len(pairs)
        rng = np.random.default_rng(seed)
        counts = rng.poisson(rate * TIME_QUANTUM_S, size=int(1.2 * n / (rate * TIME_QUANTUM_S)) + 100)
        while counts.sum() < n:
            counts = np.concatenate([counts, rng.poisson(rate * TIME_QUANTUM_S, size=len(counts))])
        arrivals = np.repeat(np.arange(len(counts)) * TIME_QUANTUM_S, counts)[:n]
        _CACHE[key] = pairs.assign(arrival_s=arrivals - arrivals[0])
    return _CACHE[key]


def poisson_arrivals(rate: float, duration_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (seconds, ascending) of a Poisson process counted per 10 ms quantum, as the
    artifact draws them: quantum i (starting at i x 0.01 s) receives Poisson(rate x 0.01) requests.

    Args:
        rate: mean arrivals per second (> 0).
        duration_s: length of the trace (seconds, > 0); int(duration_s / 0.01) quanta.
        rng: numpy generator (the seed decides the draws).
    """
    quanta = int(round(duration_s / TIME_QUANTUM_S))
    counts = rng.poisson(rate * TIME_QUANTUM_S, size=quanta)
    return np.repeat(np.arange(quanta) * TIME_QUANTUM_S, counts)


def sharegpt_workload(rate: float, duration_s: float = 600.0, *, seed: int = 0, max_requests: int | None = None,
                      name: str | None = None) -> Workload:
    """The paper's workload at ``rate`` requests/s for ``duration_s`` seconds (see the module).

    Args:
        rate: requests per second (``LIMITS["rates"]``).
        duration_s: seconds of arrivals (600 = the artifact's quick mode; the paper used 3,600).
        seed: decides the arrival counts and the shuffle (``LIMITS["seed"]``).
        max_requests: keep at most this many of the earliest arrivals (None: all).
        name: the workload's label (default ``"sharegpt-opt <rate>/s"``).

    Returns:
        Workload whose requests have ``arrival_s`` (seconds) and ``arrival_step`` 0, exact output
        lengths, and ``max_new_tokens`` = 2,048 (OPT's context window: no output is clipped).

    Raises:
        FieldError: a bad ``rate`` or ``seed``, or a trace with no arrival (``rate``).
    """
    rate = check("rates", rate, subject="rate")
    seed = check("seed", seed)
    duration_s = real_number("duration_s", duration_s, maximum=86_400, above=0)
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(rate, duration_s, rng)
    if max_requests is not None:
        arrivals = arrivals[: int(max_requests)]
    n = len(arrivals)
    if n == 0:
        raise FieldError("rate", f" = {rate:g} requests/s gives no arrival in {duration_s:g} s; raise the rate "
                         "or the duration")
    df = sharegpt_lengths()
    rows = np.resize(np.arange(len(df)), n)            # the first n pairs, repeated when n exceeds them
    rows = rows[rng.permutation(n)]
    p = df["prompt_tokens"].to_numpy()[rows]
    o = df["output_tokens"].to_numpy()[rows]
    reqs = tuple(Request(i + 1, int(a), int(b), 0, float(t))
                 for i, (a, b, t) in enumerate(zip(p.tolist(), o.tolist(), arrivals.tolist())))
    return Workload(name or f"{WORKLOAD_NAME} {rate:g}/s", reqs, MAX_SEQ_LEN,
                    params=dict(rate=rate, duration_s=duration_s, seed=seed, requests=n,
                                source="ShareGPT (OPT tokenizer), the PagedAttention paper's artifact"))
