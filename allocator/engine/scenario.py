"""A scenario: one workload, one pool, both allocators — what the explainer page and the CLI run.

Keeping this here (not in a page) is what makes ``python -m allocator simulate`` and the
explainer print the same numbers.

Every numeric setting has a documented range in :data:`LIMITS` (from :mod:`allocator.common.limits`, the
one table the CLI, the core and the pages' URL parameters read); :meth:`Scenario.checked` applies
it, and :func:`build_workload` calls it before anything runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from allocator.memory.reserve_max import PLACEMENTS, RESERVATION_POLICIES, ReserveMaxAllocator
from allocator.memory.paged import PagedAllocator
from allocator.memory.sliding_window import WindowedPagedAllocator
from allocator.engine.result import SimulationResult
from allocator.engine.simulate import simulate
from allocator.engine.v1 import (DEFAULT_ACCEPTANCE_RATE, V1_DEFAULT_MAX_NUM_BATCHED_TOKENS, V1_DEFAULT_MAX_NUM_SEQS,
                                 V1Rules)
from allocator.common.limits import check
from allocator.workloads.mooncake import is_mooncake_path, load_mooncake, mooncake_workload
from allocator.workloads.sharegpt import sharegpt_trace
from allocator.engine.summary import FieldMapping
from allocator.workloads.reader import file_label
from allocator.workloads.trace import load_trace, shipped_trace, trace_workload
from allocator.common.errors import FieldError
from allocator.common.validate import one_line, one_of
from allocator.workloads.requests import ARRIVAL_PATTERNS, Workload, classroom_40, with_shared_prefix

WORKLOADS = ("classroom-40", "azure-conv", "sharegpt-opt")
#: What a scenario's ``workload`` can name (:func:`workload_kind`): the synthetic classroom, a trace
#: the repository ships (named), a CSV uploaded through the page, or a trace file by path -- a CSV
#: (request lengths) or a Mooncake JSONL (``.jsonl``, ``.jsonl.gz``: prompts as block ids, so
#: prefix caching has something to find).
WORKLOAD_KINDS = ("classroom", "shipped", "upload", "csv", "mooncake")
#: Block sizes of the sweep: powers of two 1..256 (1, 16 and 256 are the lesson's three questions:
#: assets/reference_figures.md, R7).
SWEEP_BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: Default pool per workload (slots). The trace's requests average ~1,150 prompt tokens, so its
#: pool is 4x the classroom's: about 4-6 reserve-max reservations fit in it at once.
DEFAULT_SLOTS = {"classroom-40": 2048, "azure-conv": 8192, "sharegpt-opt": 8192}
DEFAULT_MAX_NEW = {"classroom-40": 600, "azure-conv": 1024, "sharegpt-opt": 2048}
#: Defaults for a Mooncake JSONL trace (prompts average ~12,000 tokens, outputs up to 2,000).
MOONCAKE_SLOTS = 1 << 20
MOONCAKE_MAX_NEW = 2048
#: Row cap for a trace uploaded through the page (the CLI accepts up to ``trace.MAX_ROWS``).
UPLOAD_MAX_ROWS = 20_000
#: The numeric settings of a Scenario, each checked against ``LIMITS[name]`` (None, where a field
#: allows it, means "the workload's default").
NUMERIC_SETTINGS = ("total_slots", "block_size", "max_new_tokens", "seed", "arrival_rate", "offset", "count",
                    "steps_per_second", "metadata_cost", "shared_prefix", "max_num_seqs", "max_num_batched_tokens",
                    "num_speculative_tokens", "acceptance_rate", "spec_seed",
                    "sliding_window", "full_groups", "window_groups")
PREEMPTION_MODES = ("recompute", "swap")
#: The scheduling rules a scenario's paged run follows (:attr:`Scenario.rules`): "classroom" (the
#: lesson's scheduler, ``allocator/engine/classroom.py``) or "v1" (vLLM v1's, :class:`V1Rules`).
RULES = ("classroom", "v1")


@dataclass(frozen=True)
class Scenario:
    """Every setting of the explainer.

    Attributes:
        workload: "classroom-40", "azure-conv" (the shipped trace slice), "sharegpt-opt" (the
            PagedAttention paper's ShareGPT lengths in file order, arriving as a Poisson stream of
            2 requests/s, :func:`allocator.workloads.sharegpt.sharegpt_trace`) or a CSV path.
        total_slots: pool size in slots (None: the workload's default, see ``DEFAULT_SLOTS``).
        block_size: slots per block for the paged allocator (1..256 on the page).
        max_new_tokens: generation cap in tokens (None: the workload's default).
        seed: classroom-40's random seed (None: the calibrated default).
        arrival: classroom-40's arrival pattern, "burst" or "trickle".
        arrival_rate: trickle rate in requests per step.
        offset, count: which trace rows to replay (0-based offset, number of rows).
        steps_per_second: engine steps per second of trace time.
        metadata_cost: cost per block (or per reservation) in slot equivalents (the c of
            assets/reference_figures.md, R2).
        trace_bytes: content of an uploaded trace CSV (workload "upload").
        trace_name: that file's name, for labels.
        shared_prefix: tokens of one system prompt put in front of every prompt (0: none); the
            paged allocator shares its full blocks.
        preemption: the paged allocator's preemption mode, "recompute" or "swap".
        policy: the reservation allocator's policy (the PagedAttention paper's baselines): "max"
            (prompt + max_new_tokens, the default), "pow2" (prompt + the next power of two of the
            answer length) or "oracle" (prompt + the exact answer length).
        prefix_caching: the paged allocator keeps finished prompts' blocks findable (a Mooncake
            JSONL trace's prompts, or the shared system prompt).
        placement: where the reservation allocator puts a reservation: "first-fit" (default, the
            lesson's) or "buddy" (the PagedAttention paper's artifact: power-of-two runs of 16-slot
            blocks, capped at 2,048 tokens; :mod:`allocator.memory.buddy`).
        rules: the scheduler of the paged run, one of :data:`RULES`: "classroom" (default, every
            lesson's) or "v1" (vLLM v1's: a token budget per step, chunked prefill, a cap on running
            sequences, recompute-only preemption; :class:`allocator.engine.v1.V1Rules`). The
            reservation run keeps the classroom scheduler under either: vLLM v1 has no reservation
            allocator to follow, so the baseline stays the one every lesson compares against.
        max_num_seqs: under v1 rules, the cap on running sequences (default 256, vLLM's).
        max_num_batched_tokens: under v1 rules, the step's token budget (default 2,048, vLLM's).
            Both are vLLM's ``EngineArgs.get_batch_defaults`` for ``vllm serve`` (the OpenAI API
            server usage context) on a GPU under 70 GiB or an A100 (vllm/engine/arg_utils.py; see
            :data:`allocator.engine.v1.V1_DEFAULT_MAX_NUM_SEQS`). Under classroom rules they do
            not apply (:meth:`canonical` resets them).
        num_speculative_tokens: under v1 rules, draft tokens per decode step (0, the default: no
            speculative decoding); each reserves a lookahead slot (:class:`V1Rules`).
        acceptance_rate: the probability that the verifier accepts a draft token (each
            independently, until the first rejection; default 0.7, a lesson's value).
        spec_seed: the seed of the acceptance draws (default 0).
            All three apply only under v1 rules, the last two only with drafts.
        sliding_window: the paged run's model attends through a sliding window of this many tokens
            (0, the default: full attention, every lesson's). Blocks wholly behind the window go
            back to the pool as vLLM v1's sliding-window manager releases them
            (:mod:`allocator.memory.sliding_window`); needs ``rules`` "v1".
            The reservation run is unchanged: it is the baseline that reserves every token.
        full_groups, window_groups: with a window, the model's KV-cache groups (vLLM's hybrid
            manager: equally many layers per group, one block pool): ``full_groups`` of
            full-attention layers (default 0: every layer windowed) and ``window_groups`` of
            windowed ones (default 1); gpt-oss-120b is 1 and 1 with a 128-token window. With more
            than one group the paged run's slots are slots of one group (memory of ``total_slots``
            whole-model slots holds groups x total_slots of them).
    """

    workload: str = "classroom-40"
    total_slots: int | None = None
    block_size: int = 16
    max_new_tokens: int | None = None
    seed: int | None = None
    arrival: str = "burst"
    arrival_rate: float = 1.0
    offset: int = 0
    count: int = 40
    steps_per_second: float = 20.0
    metadata_cost: float = 0.0
    trace_bytes: bytes | None = None
    trace_name: str = ""
    shared_prefix: int = 0
    preemption: str = "recompute"
    policy: str = "max"
    prefix_caching: bool = False
    placement: str = "first-fit"
    rules: str = "classroom"
    max_num_seqs: int = V1_DEFAULT_MAX_NUM_SEQS
    max_num_batched_tokens: int = V1_DEFAULT_MAX_NUM_BATCHED_TOKENS
    num_speculative_tokens: int = 0
    acceptance_rate: float = DEFAULT_ACCEPTANCE_RATE
    spec_seed: int = 0
    sliding_window: int = 0
    full_groups: int = 0
    window_groups: int = 1

    @property
    def v1_rules(self) -> V1Rules | None:
        """The :class:`V1Rules` the paged run follows (None under classroom rules).

        Raises:
            FieldError: ``max_num_seqs`` or ``max_num_batched_tokens`` out of range (see
                :meth:`checked`).
        """
        if self.rules != "v1":
            return None
        return V1Rules(max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                       num_speculative_tokens=self.num_speculative_tokens, acceptance_rate=self.acceptance_rate,
                       spec_seed=self.spec_seed)

    @property
    def slots(self) -> int:
        """The pool size actually used (slots)."""
        if self.total_slots is not None:
            return self.total_slots
        if self.kind == "mooncake":
            return MOONCAKE_SLOTS
        return DEFAULT_SLOTS.get(self.workload, 8192)

    @property
    def max_new(self) -> int:
        """The generation cap actually used (tokens)."""
        if self.max_new_tokens is not None:
            return self.max_new_tokens
        if self.kind == "mooncake":
            return MOONCAKE_MAX_NEW
        return DEFAULT_MAX_NEW.get(self.workload, 1024)

    @property
    def kind(self) -> str:
        """What ``workload`` names, one of :data:`WORKLOAD_KINDS` (see :func:`workload_kind`)."""
        return workload_kind(self.workload)

    @property
    def trace_path(self) -> str | None:
        """The trace file this scenario reads by path (a CSV or a Mooncake JSONL), or None for a
        named workload or an upload."""
        return self.workload if self.kind in ("csv", "mooncake") else None

    def canonical(self) -> "Scenario":
        """The same scenario with defaults resolved and settings that do not apply reset, so two
        scenarios that simulate the same thing compare (and hash) equal — a cache key."""
        from allocator.workloads.requests import CLASSROOM_40
        classroom = self.kind == "classroom"
        speculating = self.rules == "v1" and bool(self.num_speculative_tokens)
        return replace(
            self, total_slots=self.slots, max_new_tokens=self.max_new,
            seed=(CLASSROOM_40["seed"] if self.seed is None else self.seed) if classroom else None,
            arrival=self.arrival if classroom else "burst",
            arrival_rate=self.arrival_rate if classroom and self.arrival == "trickle" else 1.0,
            offset=0 if classroom else self.offset, count=40 if classroom else self.count,
            steps_per_second=20.0 if classroom else self.steps_per_second,
            trace_bytes=self.trace_bytes if self.workload == "upload" else None,
            trace_name=one_line(self.trace_name) if self.workload == "upload" else "",
            max_num_seqs=self.max_num_seqs if self.rules == "v1" else V1_DEFAULT_MAX_NUM_SEQS,
            max_num_batched_tokens=self.max_num_batched_tokens if self.rules == "v1"
            else V1_DEFAULT_MAX_NUM_BATCHED_TOKENS,
            num_speculative_tokens=self.num_speculative_tokens if self.rules == "v1" else 0,
            acceptance_rate=self.acceptance_rate if speculating else DEFAULT_ACCEPTANCE_RATE,
            spec_seed=self.spec_seed if speculating else 0,
            full_groups=self.full_groups if self.sliding_window else 0,
            window_groups=self.window_groups if self.sliding_window else 1)

    def checked(self) -> "Scenario":
        """The same scenario with every numeric setting checked against :data:`LIMITS` -- all of
        them, whether or not the workload uses it -- and counts as ints, rates as floats.

        Raises:
            FieldError: the first setting out of range, naming it, its value and the allowed range
                (``"count = 0 must be a whole number from 1 to 200,000 (requests)"``), an
                unknown ``arrival``, ``preemption``, ``policy``, ``placement`` or ``rules``, a block
                larger than the pool, ``preemption`` "swap" under v1 rules (vLLM v1 preempts by
                recompute only), or speculative decoding (``num_speculative_tokens`` > 0) or a
                ``sliding_window`` under classroom rules, or both at once (not modelled together).
        """
        values = {}
        for name in NUMERIC_SETTINGS:
            value = getattr(self, name)
            values[name] = None if value is None and name in ("total_slots", "max_new_tokens", "seed") \
                else check(name, value)
        one_of("arrival", self.arrival, ARRIVAL_PATTERNS)
        one_of("preemption", self.preemption, PREEMPTION_MODES)
        one_of("policy", self.policy, RESERVATION_POLICIES)
        one_of("placement", self.placement, PLACEMENTS)
        one_of("rules", self.rules, RULES)
        if self.rules == "v1" and self.preemption != "recompute":
            raise FieldError("preemption", f" = {self.preemption!r}: vLLM v1 preempts by recompute only (swap "
                             "is older vLLM's option; use rules 'classroom' for it)")
        if values["num_speculative_tokens"] and self.rules != "v1":
            raise FieldError("num_speculative_tokens", f" = {values['num_speculative_tokens']}: speculative decoding "
                             "runs under vLLM v1's rules only (rules 'v1'); the classroom scheduler decodes one "
                             "token per step")
        if values["sliding_window"] and self.rules != "v1":
            raise FieldError("sliding_window", f" = {values['sliding_window']}: a sliding window follows vLLM v1's "
                             "KV-cache managers, so it needs vLLM v1's rules (--rules v1; the classroom scheduler "
                             "keeps every token)")
        if values["sliding_window"] and values["num_speculative_tokens"]:
            raise FieldError("num_speculative_tokens", f" = {values['num_speculative_tokens']} with a sliding window "
                             f"of {values['sliding_window']} tokens: the lab does not model both at once (a "
                             "windowed pool's releases do not yet account for lookahead slots); use one or the other")
        checked = replace(self, **values)
        if checked.block_size > checked.slots:       # the paged allocator's own refusal, said up front
            raise FieldError("block_size", f" = {checked.block_size} is larger than the pool ({checked.slots} slots)")
        return checked

    def refuse_a_prefix_that_fills_the_pool(self) -> None:
        """For a command line, which prints a table of zeros where a page shows its "every request
        was rejected" note: refuse a shared prompt that leaves no room for any request.

        Raises:
            FieldError (``shared_prefix``): ``shared_prefix`` >= the pool's slots (every request
                stores the shared prompt and at least one token more, so none could ever fit).
        """
        if self.shared_prefix and self.shared_prefix >= self.slots:
            raise FieldError("shared_prefix", f" = {self.shared_prefix:,} tokens fills the whole pool "
                             f"({self.slots:,} slots), so no request could ever fit (each stores the shared "
                             f"prompt and at least one token more); use fewer than {self.slots:,}")

    def as_dict(self) -> dict:
        """JSON-ready settings, with defaults resolved."""
        d = asdict(self)
        d["trace_bytes"] = None if self.trace_bytes is None else len(self.trace_bytes)
        d["total_slots"] = self.slots
        d["max_new_tokens"] = self.max_new
        return d


def workload_kind(workload: str) -> str:
    """Decide once what a scenario's ``workload`` names (every caller asks this, none re-reads a
    file name's suffix): "classroom" (classroom-40), "shipped" (azure-conv, sharegpt-opt), "upload"
    (a CSV uploaded through the page, in ``Scenario.trace_bytes``), "mooncake" (a path ending in
    ``.jsonl`` or ``.jsonl.gz``, any case) or "csv" (any other path).
    """
    if workload == "classroom-40":
        return "classroom"
    if workload in WORKLOADS:
        return "shipped"
    if workload == "upload":
        return "upload"
    return "mooncake" if is_mooncake_path(workload) else "csv"


def build_workload(sc: Scenario) -> Workload:
    """The workload a scenario names (classroom-40, the shipped trace, or a trace file).

    Raises:
        FieldError: bad settings (see :meth:`Scenario.checked`) or a malformed trace file, naming
            the field or row.
    """
    sc = sc.checked()
    kind = sc.kind
    if kind == "classroom":
        return with_shared_prefix(classroom_40(seed=sc.seed, max_new_tokens=sc.max_new, arrival=sc.arrival,
                                               arrival_rate=sc.arrival_rate), sc.shared_prefix)
    if sc.workload == "azure-conv":
        df = shipped_trace()
        name = "azure-conv"
    elif sc.workload == "sharegpt-opt":
        df = sharegpt_trace()
        name = "sharegpt-opt"
    elif kind == "upload":
        if not sc.trace_bytes:
            raise FieldError("trace_file", ": no trace file uploaded yet", subject="trace_file")
        df = load_trace(sc.trace_bytes, max_rows=UPLOAD_MAX_ROWS)
        name = f"upload: {one_line(sc.trace_name) or 'trace.csv'}"
    elif kind == "mooncake":
        return with_shared_prefix(mooncake_workload(load_mooncake(sc.workload), offset=sc.offset, count=sc.count,
                                                    steps_per_second=sc.steps_per_second,
                                                    max_new_tokens=sc.max_new, name=file_label(sc.workload)),
                                  sc.shared_prefix)
    else:                                                   # kind == "csv"
        df = load_trace(sc.workload)
        name = file_label(sc.workload)          # never the path as typed: exports quote the name (issue 42)
    return with_shared_prefix(trace_workload(df, offset=sc.offset, count=sc.count,
                                             steps_per_second=sc.steps_per_second, max_new_tokens=sc.max_new,
                                             name=name), sc.shared_prefix)


def paged_allocator(total_slots: int, block_size: int, *, preemption: str = "recompute",
                    prefix_caching: bool = False, sliding_window: int = 0, full_groups: int = 0,
                    window_groups: int = 1) -> PagedAllocator:
    """The paged run's allocator: a :class:`PagedAllocator`, or with ``sliding_window`` > 0 a
    :class:`~allocator.memory.sliding_window.WindowedPagedAllocator` of those KV-cache groups.

    Raises:
        FieldError: a bad pool, block, window or group count, naming the field.
    """
    if sliding_window:
        return WindowedPagedAllocator(total_slots, block_size, sliding_window=sliding_window,
                                      full_groups=full_groups, window_groups=window_groups,
                                      preemption=preemption, prefix_caching=prefix_caching)
    return PagedAllocator(total_slots, block_size, preemption=preemption, prefix_caching=prefix_caching)


def run_both(workload: Workload, total_slots: int, block_size: int, *, record_snapshots: bool = True,
             preemption: str = "recompute", policy: str = "max", prefix_caching: bool = False,
             placement: str = "first-fit", rules: V1Rules | None = None, sliding_window: int = 0,
             full_groups: int = 0, window_groups: int = 1) -> dict[str, SimulationResult]:
    """Simulate ``workload`` under a reservation allocator and paged allocation of the same pool.

    ``preemption`` ("recompute" or "swap") is the paged allocator's preemption mode; ``policy``
    ("max", "pow2" or "oracle") the reservation allocator's (its result stays under the key
    "reserve_max", the left side of every page, and its ``label`` names the policy);
    ``prefix_caching`` turns on the paged allocator's prefix cache; ``placement`` ("first-fit" or
    "buddy") is where the reservation allocator puts each reservation; ``rules`` (None: the
    classroom scheduler; a :class:`V1Rules`: vLLM v1's) is the paged run's scheduler -- the
    reservation run keeps the classroom scheduler (see :attr:`Scenario.rules`); ``sliding_window``
    (0: full attention), ``full_groups`` and ``window_groups`` describe the paged run's model
    (:func:`paged_allocator`; see :class:`Scenario`).

    Returns:
        {"reserve_max": result, "paged": result}.

    Raises:
        FieldError: a bad pool or block size (e.g. block_size 0), naming the field.
    """
    reserve = ReserveMaxAllocator(total_slots, workload.max_new_tokens, policy, placement=placement)
    paged = paged_allocator(total_slots, block_size, preemption=preemption, prefix_caching=prefix_caching,
                            sliding_window=sliding_window, full_groups=full_groups, window_groups=window_groups)
    return {"reserve_max": simulate(workload, reserve, record_snapshots=record_snapshots),
            "paged": simulate(workload, paged, record_snapshots=record_snapshots, rules=rules)}


def run_scenario(sc: Scenario, workload: Workload | None = None, *, record_snapshots: bool = True
                 ) -> dict[str, SimulationResult]:
    """Run both allocators on a scenario with every one of its settings (see ``run_both``): the one
    way every caller -- the explainer's cache, ``simulate``, ``export-html`` with its handout and
    CSV, ``export-site`` at each block size -- runs a scenario, so no caller can drop a setting (an
    export once recorded ``prefix_caching`` but ran without it; the static site once ran without
    the placement and the prefix cache). Its block-size sweep is :func:`scenario_sweeps`.

    Args:
        sc: the scenario.
        workload: ``build_workload(sc)`` when the caller has already built it (it is built here
            otherwise).
        record_snapshots: keep per-step pool snapshots (for the maps).

    Raises:
        FieldError: bad settings or trace (see :meth:`Scenario.checked` and ``build_workload``).
    """
    sc = sc.checked()
    if workload is None:
        workload = build_workload(sc)
    return run_both(workload, sc.slots, sc.block_size, record_snapshots=record_snapshots,
                    preemption=sc.preemption, policy=sc.policy, prefix_caching=sc.prefix_caching,
                    placement=sc.placement, rules=sc.v1_rules, **window_settings(sc))


def full_attention_run(sc: Scenario, workload: Workload | None = None) -> SimulationResult:
    """The scenario's paged run with every layer attending to every token: the same workload,
    pool, block size, preemption, prefix caching and scheduler rules as :func:`run_scenario`'s
    paged run, without the sliding window. Beside a windowed run it says what paging alone gives
    and how much of the difference the window makes (the CLI's ``simulate --sliding-window``
    line, the explainer's comparison, the handout).

    Args:
        sc: the scenario (its window settings are ignored).
        workload: ``build_workload(sc)`` when the caller has already built it.

    Returns:
        The paged :class:`SimulationResult`, without snapshots.

    Raises:
        FieldError: bad settings or trace (see :meth:`Scenario.checked`).
    """
    sc = sc.checked()
    if workload is None:
        workload = build_workload(sc)
    return simulate(workload, paged_allocator(sc.slots, sc.block_size, preemption=sc.preemption,
                                              prefix_caching=sc.prefix_caching),
                    record_snapshots=False, rules=sc.v1_rules)


def full_attention_figures(full: SimulationResult, windowed: SimulationResult) -> dict:
    """The full-attention paged run (:func:`full_attention_run`) beside the windowed one: how many
    more sequences the window lets run in the same memory under the same rules.

    Batch sizes are the summaries' mean running (sequences per step) over the steps when requests
    waited in both runs (``waited`` True), else over every step, so the two share one basis.

    Returns:
        {"mean_running", "peak_running", "steps" (the full-attention run's), "waited",
        "window_mean_running", "window_peak_running", "window_steps" (the windowed run's),
        "ratio" (windowed ÷ full mean running; None when the full run's mean is 0)}.
    """
    f, w = full.summary, windowed.summary
    waited = bool(f.waited and w.waited)            # one basis for both: busy steps, or every step
    a, b = (f.mean_running_busy, w.mean_running_busy) if waited else (f.mean_running, w.mean_running)
    return {"mean_running": a, "peak_running": f.peak_running, "steps": f.steps, "waited": waited,
            "window_mean_running": b, "window_peak_running": w.peak_running, "window_steps": w.steps,
            "ratio": (b / a) if a else None}


def window_settings(sc: Scenario) -> dict:
    """The scenario's model as :func:`paged_allocator` takes it: {} for full attention, else its
    ``sliding_window``, ``full_groups`` and ``window_groups``."""
    if not sc.sliding_window:
        return {}
    return {"sliding_window": sc.sliding_window, "full_groups": sc.full_groups, "window_groups": sc.window_groups}


@dataclass(frozen=True)
class SweepRow(FieldMapping):
    """One block size of :func:`block_size_sweep`: the paged allocator alone on the workload.

    Each mean comes twice: ``*_busy`` over the steps when requests waited (None when none did) and
    plain over every step; charts and texts compare rows on one basis
    (``allocator.viz.claims.sweep_basis``).
    """

    block_size: int                              # slots per block
    blocks: int                                  # blocks in the pool (pool // block size)
    waited: bool                                 # some request had to wait at this block size
    mean_utilization_busy: float | None          # distinct tokens / pool (0..1), busy mean
    mean_utilization: float | None               # the same, all steps
    mean_internal_fragmentation_busy: float | None   # allocated, never written (fraction of pool), busy mean
    mean_internal_fragmentation: float | None    # the same, all steps
    mean_total_cost_busy: float | None           # allocated slots + c x blocks (slot equivalents), busy mean
    mean_total_cost: float | None                # the same, all steps
    cost_per_token_busy: float | None            # mean total cost / mean distinct tokens, busy steps
    cost_per_token: float | None                 # the same, all steps (None: nothing stored a token)
    peak_running: int                            # the largest batch, sequences
    steps: int                                   # engine steps to drain
    preemptions: int                             # sequences preempted in total
    mean_tokens_per_step: float                  # tokens emitted per step, mean over all steps


def block_size_sweep(workload: Workload, total_slots: int, block_sizes=SWEEP_BLOCK_SIZES,
                     metadata_cost: float = 0.0, preemption: str = "recompute", *,
                     prefix_caching: bool = False, rules: V1Rules | None = None) -> list[SweepRow]:
    """Run the paged allocator at each block size (the reserve-max run does not depend on it).

    ``preemption``, ``prefix_caching`` and ``rules`` are the paged run's, as in :func:`run_both`; a
    scenario's sweep takes them from the scenario (:func:`scenario_sweeps`).

    Returns:
        One :class:`SweepRow` per block size that fits the pool, ascending.

    Source: total cost = allocated slots + c x blocks is the metadata-cost objective of
    assets/reference_figures.md, R2, applied here to the running engine instead of a snapshot.
    """
    return [_sweep_row(res, bs, total_slots, metadata_cost)
            for bs, res in _paged_runs(workload, total_slots, block_sizes, preemption, prefix_caching, rules)]


def scenario_sweep(sc: Scenario, workload: Workload | None = None) -> list[SweepRow]:
    """The block-size sweep of a scenario at its own metadata cost: :func:`scenario_sweeps` at
    ``sc.metadata_cost`` alone, over :data:`SWEEP_BLOCK_SIZES` (what ``simulate --sweep``,
    ``export-html --sweep`` and the explainer show).

    Raises:
        FieldError: bad settings or trace (see :meth:`Scenario.checked` and ``build_workload``).
    """
    sc = sc.checked()
    return scenario_sweeps(sc, (sc.metadata_cost,), workload)[sc.metadata_cost]


def scenario_sweeps(sc: Scenario, metadata_costs=None, workload: Workload | None = None,
                    block_sizes=SWEEP_BLOCK_SIZES) -> dict[float, list[SweepRow]]:
    """The block-size sweep of a scenario with its paged settings (preemption, prefix caching), at
    each metadata cost: the sweep's one path, as :func:`run_scenario` is the run's, so every
    output's sweep (the explainer's, ``simulate --sweep``, ``export-html --sweep``, the static
    site's) runs what the scenario says. Each block size is simulated once, whatever the number of
    costs (c only prices the blocks).

    Args:
        sc: the scenario (its block size does not matter: every size of ``block_sizes`` that fits
            the pool is run).
        metadata_costs: the costs c (slot equivalents per block); None: ``(sc.metadata_cost,)``.
        workload: ``build_workload(sc)`` when the caller has already built it.
        block_sizes: the sizes to sweep, slots per block.

    Returns:
        ``{c: [SweepRow, ...]}``, one list per cost (float keys, in the order given), each as
        :func:`block_size_sweep` returns it.

    Raises:
        FieldError: bad settings or trace (see :meth:`Scenario.checked` and ``build_workload``).
    """
    sc = sc.checked()
    if workload is None:
        workload = build_workload(sc)
    costs = [sc.metadata_cost] if metadata_costs is None else [float(c) for c in metadata_costs]
    runs = list(_paged_runs(workload, sc.slots, block_sizes, sc.preemption, sc.prefix_caching, sc.v1_rules,
                            window_settings(sc)))
    return {c: [_sweep_row(res, bs, res.total_slots, c) for bs, res in runs] for c in costs}


def _paged_runs(workload: Workload, total_slots: int, block_sizes, preemption: str, prefix_caching: bool,
                rules: V1Rules | None = None, window: dict | None = None):
    """``(block size, result)`` of the paged allocator at each block size that fits the pool,
    without snapshots, under ``rules`` (None: the classroom scheduler), for the model ``window``
    describes (:func:`window_settings`; None or {}: full attention)."""
    for bs in block_sizes:
        if bs > total_slots:
            continue
        alloc = paged_allocator(total_slots, bs, preemption=preemption, prefix_caching=prefix_caching,
                                **(window or {}))
        yield bs, simulate(workload, alloc, record_snapshots=False, rules=rules)


def _sweep_row(res: SimulationResult, bs: int, total_slots: int, metadata_cost: float) -> SweepRow:
    """One :class:`SweepRow` of a paged run at block size ``bs``, its costs at ``metadata_cost``."""
    m = res.metrics
    return SweepRow(
        block_size=bs,
        blocks=total_slots // bs,
        waited=bool(res.busy_mask().any()),
        **_both_bases(res, "mean_utilization", m["utilization"]),
        **_both_bases(res, "mean_internal_fragmentation", m["internal_fragmentation"] / total_slots),
        **_both_bases(res, "mean_total_cost", res.total_cost(metadata_cost)),
        cost_per_token_busy=res.cost_per_token(metadata_cost, busy=True),
        cost_per_token=res.cost_per_token(metadata_cost, busy=False),
        peak_running=res.summary.peak_running,
        steps=res.steps,
        preemptions=res.summary.preemptions,
        mean_tokens_per_step=res.summary.mean_tokens_per_step,
    )


def _both_bases(res: SimulationResult, name: str, values) -> dict:
    """``{name + "_busy": mean over the steps when requests waited (None if none), name: mean over
    every step}`` of a per-record array."""
    busy = res.busy_mask()
    return {f"{name}_busy": res.mean(values, busy) if busy.any() else None, name: res.mean(values)}
