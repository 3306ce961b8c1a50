"""Requests and workloads: what the simulated server is asked to do.

All lengths are in tokens; arrival times are in engine steps (one step = one iteration of the
serving loop, in which every running sequence emits one token).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from allocator.common.errors import FieldError
from allocator.common.limits import MAX_PROMPT_TOKENS
from allocator.common.validate import one_of, real_number, whole_number


@dataclass(frozen=True)
class Request:
    """One generation request.

    Attributes:
        id: unique request id (>= 1), shown as ``r<id>`` in the app. Ids start at 1 so that 0 can
            mean "no request" in compact per-slot owner arrays.
        prompt_len: prompt length in tokens (>= 1); its KV is written at prefill.
        output_len: tokens the request will generate before it stops (>= 1), including the
            first token, which prefill emits.
        arrival_step: engine step at which the request joins the waiting queue (>= 0) on the
            step clock (the explainer's runs).
        arrival_s: seconds after the start at which it arrives (>= 0, finite), or None. Used by
            runs on the seconds clock (``engine.simulate(clock=...)``: the rate sweep), where a
            cost model decides how long each step takes.

    Raises:
        FieldError: a field that is not a whole number or is below its minimum, or an arrival_s
            that is not a finite number >= 0, naming the field (subject ``"request <id>: <field>"``).
    """

    id: int
    prompt_len: int
    output_len: int
    arrival_step: int = 0
    arrival_s: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "id", whole_number("id", self.id, 1))
        for name, minimum in (("prompt_len", 1), ("output_len", 1), ("arrival_step", 0)):
            object.__setattr__(self, name, whole_number(name, getattr(self, name), minimum,
                                                        subject=f"request {self.id}: {name}"))
        if self.arrival_s is not None:
            object.__setattr__(self, "arrival_s", real_number("arrival_s", self.arrival_s, 0,
                                                              subject=f"request {self.id}: arrival_s"))


@dataclass(frozen=True)
class Workload:
    """A named list of requests plus the serving limit they were generated under.

    Attributes:
        name: short label shown in the app and the CLI (e.g. ``classroom-40``).
        requests: the requests, any order; ids unique.
        max_new_tokens: the server's cap on generated tokens per request; reserve-max reserves
            prompt_len + max_new_tokens slots at admission. Every output_len must be <= it.
        params: the generator's parameters (for documentation on the page and in JSON).
        notes: human-readable remarks (e.g. how many trace rows were clipped).
        shared_prefix: tokens at the start of every prompt that are one shared system prompt
            (0: none). Included in each prompt_len.
        prompts: the prompts' token ids, for prefix caching: an object whose ``tokens(request_id)``
            returns a request's prompt token ids (e.g. :class:`allocator.workloads.mooncake.TracePrompts`);
            None when only lengths are known.

    Raises:
        FieldError: empty workload (``requests``), duplicate ids (``id``), an output_len above
            max_new_tokens (``output_len``), or a shared prefix longer than some prompt
            (``shared_prefix``).
    """

    name: str
    requests: tuple
    max_new_tokens: int
    params: dict = field(default_factory=dict)
    notes: tuple = ()
    shared_prefix: int = 0
    prompts: object = None

    def __post_init__(self):
        reqs = tuple(self.requests)
        object.__setattr__(self, "requests", reqs)
        object.__setattr__(self, "max_new_tokens", whole_number("max_new_tokens", self.max_new_tokens, 1))
        if not reqs:
            raise FieldError("requests", ": the workload has no requests")
        ids = [r.id for r in reqs]
        if len(set(ids)) != len(ids):
            raise FieldError("id", ": request ids must be unique")
        object.__setattr__(self, "shared_prefix", whole_number("shared_prefix", self.shared_prefix, 0))
        for r in reqs:
            if r.prompt_len < self.shared_prefix:
                raise FieldError("shared_prefix", f" is {self.shared_prefix} tokens, longer than request "
                                 f"{r.id}'s prompt ({r.prompt_len} tokens)")
            if r.output_len > self.max_new_tokens:
                raise FieldError("output_len", f" = {r.output_len} exceeds max_new_tokens {self.max_new_tokens}",
                                 subject=f"request {r.id}: output_len")

    def __len__(self) -> int:
        return len(self.requests)



OUTPUT_DISTRIBUTIONS = ("exponential", "uniform", "lognormal")
ARRIVAL_PATTERNS = ("burst", "trickle")


def generate_workload(*, seed: int = 0, num_requests: int = 40, prompt_len_range: tuple = (32, 96),
                      output_mean: float = 150.0, output_distribution: str = "exponential",
                      max_new_tokens: int = 512, arrival: str = "burst", arrival_rate: float = 1.0,
                      name: str = "generated") -> Workload:
    """Draw a synthetic workload from a seeded generator (numpy PCG64).

    Args:
        seed: random seed; the same arguments always give the same workload.
        num_requests: number of requests (1..100,000).
        prompt_len_range: (low, high) prompt lengths in tokens, inclusive, drawn uniformly.
        output_mean: mean output length in tokens before clipping to [1, max_new_tokens].
        output_distribution: "exponential" (many short answers, a long tail — how chat replies
            look), "uniform" (uniform on [1, 2*mean]) or "lognormal" (sigma 1).
        max_new_tokens: the server's cap on generated tokens; outputs are clipped to it.
        arrival: "burst" (every request at step 0) or "trickle" (Poisson arrivals).
        arrival_rate: for "trickle", mean requests per step (> 0).
        name: the workload's label.

    Returns:
        Workload with ids 1..num_requests in arrival order.

    Raises:
        FieldError: naming the argument that is out of range or unknown.
    """
    seed = whole_number("seed", seed, 0)
    num_requests = whole_number("num_requests", num_requests, 1, 100_000)
    max_new_tokens = whole_number("max_new_tokens", max_new_tokens, 1)
    lo = whole_number("prompt_len_range", prompt_len_range[0], 1, subject="prompt_len_range low")
    hi = whole_number("prompt_len_range", prompt_len_range[1], 1, subject="prompt_len_range high")
    if hi < lo:
        raise FieldError("prompt_len_range", f" high ({hi}) is below low ({lo})")
    output_mean = real_number("output_mean", output_mean, above=0)
    one_of("output_distribution", output_distribution, OUTPUT_DISTRIBUTIONS)
    one_of("arrival", arrival, ARRIVAL_PATTERNS)
    if arrival == "trickle":
        arrival_rate = real_number("arrival_rate", arrival_rate, above=0)

    rng = np.random.default_rng(int(seed))
    prompts = rng.integers(lo, hi + 1, size=num_requests)
    if output_distribution == "exponential":
        outputs = rng.exponential(output_mean, size=num_requests)
    elif output_distribution == "uniform":
        outputs = rng.uniform(1, 2 * output_mean, size=num_requests)
    else:
        outputs = rng.lognormal(np.log(output_mean) - 0.5, 1.0, size=num_requests)
    outputs = np.clip(np.ceil(outputs), 1, max_new_tokens).astype(int)
    if arrival == "burst":
        arrivals = np.zeros(num_requests, dtype=int)
    else:
        arrivals = np.floor(np.cumsum(rng.exponential(1.0 / arrival_rate, size=num_requests))).astype(int)
        arrivals -= arrivals[0]
    requests = tuple(Request(i, int(p), int(o), int(a))
                     for i, (p, o, a) in enumerate(zip(prompts, outputs, arrivals), start=1))
    params = dict(seed=int(seed), num_requests=num_requests, prompt_len_range=[lo, hi],
                  output_mean=float(output_mean), output_distribution=output_distribution,
                  max_new_tokens=max_new_tokens, arrival=arrival,
                  arrival_rate=float(arrival_rate) if arrival == "trickle" else None)
    return Workload(name=name, requests=requests, max_new_tokens=max_new_tokens, params=params)


#: Parameters of the default ``classroom-40`` workload. Chosen so that, in a 2048-slot pool,
#: the claims of ``assets/reference_figures.md`` R7 emerge from the simulation: reserve-max
#: holds 3 requests at once at 20-40 % utilisation, paged (block 16) holds about 30 at over 90 %.
CLASSROOM_40 = dict(seed=25, num_requests=40, prompt_len_range=(32, 96), output_mean=250.0,
                    output_distribution="exponential", max_new_tokens=600, arrival="burst")


def classroom_40(*, seed: int | None = None, max_new_tokens: int | None = None, arrival: str | None = None,
                 arrival_rate: float = 1.0) -> Workload:
    """The default lesson workload: forty chat-like requests (see ``CLASSROOM_40`` for parameters).

    Any argument left as None keeps the calibrated default; changing one (the page's seed,
    max_new_tokens or arrival controls) regenerates the same kind of workload with that change.
    """
    p = dict(CLASSROOM_40)
    if seed is not None:
        p["seed"] = seed
    if max_new_tokens is not None:
        p["max_new_tokens"] = max_new_tokens
    if arrival is not None:
        p["arrival"] = arrival
    p["arrival_rate"] = arrival_rate
    return generate_workload(name="classroom-40", **p)


def with_shared_prefix(workload: Workload, tokens: int) -> Workload:
    """The same requests with one ``tokens``-long system prompt put in front of every prompt.

    Each prompt_len grows by ``tokens``; the result's ``shared_prefix`` records it so a paged
    allocator can share the prefix's full blocks. ``tokens`` = 0 returns ``workload`` unchanged.

    Raises:
        FieldError: ``shared_prefix`` negative or not a whole number.
    """
    tokens = whole_number("shared_prefix", tokens, 0, MAX_PROMPT_TOKENS)
    if tokens == 0:
        return workload
    reqs = tuple(Request(r.id, r.prompt_len + tokens, r.output_len, r.arrival_step, r.arrival_s)
                 for r in workload.requests)
    return Workload(name=f"{workload.name} + {tokens}-token system prompt", requests=reqs,
                    max_new_tokens=workload.max_new_tokens, params=dict(workload.params, shared_prefix=tokens),
                    notes=workload.notes, shared_prefix=tokens + workload.shared_prefix)


def workload_from_lengths(name: str, rows: Iterable[tuple], max_new_tokens: int, notes=(),
                          first_id: int = 1) -> Workload:
    """Build a Workload from (prompt_len, output_len, arrival_step[, arrival_s]) rows, ids first_id,
    first_id+1, ..."""
    reqs = tuple(Request(i, *row) for i, row in enumerate(rows, start=first_id))
    return Workload(name=name, requests=reqs, max_new_tokens=max_new_tokens, notes=tuple(notes))
