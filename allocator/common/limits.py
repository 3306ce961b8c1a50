"""The documented range of every numeric input: one table for the CLI, the core and the pages.

Each entry of :data:`LIMITS` is an :class:`allocator.common.validate.Limit` keyed by the input's field
name (the name a :class:`~allocator.common.validate.FieldError` carries). The ranges are what the machine
can actually run, not what a lesson needs: the explainer's sidebar and its URL parameters offer
narrower ranges of their own, written once in ``pages._ui.url_params.number_rules`` (which takes
each unit, and the row offset's whole range, from here; both the widgets and the URL check read it).

* Scenario settings (:class:`allocator.engine.scenario.Scenario`, ``simulate`` and ``export-html``):
  ``total_slots``, ``block_size``, ``max_new_tokens``, ``seed``, ``arrival_rate``, ``offset``,
  ``count``, ``steps_per_second``, ``metadata_cost``, ``shared_prefix``, and under vLLM v1 rules
  ``max_num_seqs``, ``max_num_batched_tokens`` and speculative decoding's
  ``num_speculative_tokens``, ``acceptance_rate`` and ``spec_seed``.
* Slot accounting (``account``, the Accounting page): ``lengths`` (each entry), ``reserve``,
  ``block_size`` (as above), ``candidates`` (each entry), ``pool_slots``, ``length_a``, ``length_b``,
  ``prefix_tokens``, and ``metadata_cost`` as above.
* Capacity (``capacity``, the Capacity page): ``free_gib``, ``max_context``, ``mean_tokens``,
  ``block_size`` (as above), ``layers``, ``kv_heads``, ``head_dim``, ``bytes_per_element``.
* Rate sweep (``rate-sweep``, the Throughput and latency page; :mod:`allocator.studies.rate_sweep`):
  ``requests``, ``rates`` (each entry), ``latency_factor``, and ``seed``, ``block_size``,
  ``max_new_tokens`` as above.
* Sharing (``sharing``): ``width``, ``replacement``, ``sharing_requests`` (``--requests``), and
  ``seed`` as above.

Pools (``total_slots``, ``pool_blocks``): one range, up to ``MAX_POOL_SLOTS`` = 2**30 slots, for
the CLI, the core and every page (a prefix cache spanning GPU, host memory and disk is that big;
the block pool's memory grows with the blocks used, not with the pool). ``pool_blocks`` (a trace
replay's pool in blocks, the Prefix cache page and ``allocator.studies.prefix_cache``) is the same range
in blocks: at most ``MAX_POOL_SLOTS // block_size``. Only a pool *drawn slot by slot* (the
animated memory maps of ``export-html``) keeps to ``drawn_slots``, 4,194,304 slots, because each
frame's picture holds every slot.

Why the other ends: a block larger than ``MAX_BLOCK_SIZE`` is no page at all; ``MAX_TOKENS``
(10 million) is longer than any model's context; an output cap past ``MAX_NEW_TOKENS`` would make
one decode millions of engine events; a trace has at most ``MAX_ROWS`` rows; a seed is 32 bits; a metadata
cost past a million slots per block only turns every total into noise; arrivals slower than one per
thousand steps or faster than a thousand per step, and clocks outside 0.001 .. 1,000,000 steps per
second, stop describing a serving engine (and far enough out overflow its clock).
"""
from __future__ import annotations

from allocator.common.validate import Limit, in_range

#: Largest block size accepted (slots).
MAX_BLOCK_SIZE = 4096
#: Largest pool simulated (slots), for every allocator, the CLI and every page: 2**30. Production
#: prefix caches span GPU, host memory and disk (Mooncake, Qin et al., FAST 2025), so pools this
#: large are real; the block pool's memory grows with the blocks used, not with the pool's size
#: (``allocator.memory.block_pool``), so they cost what they hold. ``tests/core/test_pool_range.py``
#: runs pools at this top end.
MAX_POOL_SLOTS = 1 << 30
#: Longest shared system prompt accepted (tokens): far past any pool the app simulates.
MAX_PROMPT_TOKENS = 1 << 22
#: Largest uploaded file (bytes): 5 MB, counted as Streamlit's browser side counts the app's
#: ``.streamlit/config.toml`` ``maxUploadSize = 5`` (megabytes of 1,000,000 bytes; it refused a
#: 5,200,028-byte file as over "5.0MB"). The CLI caps the same files at the same number, and every
#: message and help text states it in MB (``tests/core/test_upload_limit.py`` holds the three together).
MAX_UPLOAD_BYTES = 5_000_000
#: One megabyte (bytes): every size cap is a whole number of them and every message states sizes in
#: MB, the unit Streamlit states the upload limit in (:data:`MAX_UPLOAD_BYTES`).
MB = 1_000_000
#: Largest trace accepted (rows) and largest single length (tokens): bounds that keep a bad file
#: from hanging the app. The page states a lower row cap.
MAX_ROWS = 200_000
MAX_TOKENS = 10_000_000

#: Largest cap on running sequences under vLLM v1 rules (``max_num_seqs``).
MAX_NUM_SEQS = 1_000_000

#: Most draft tokens a speculating sequence proposes per decode step (``num_speculative_tokens``).
MAX_SPEC_TOKENS = 64

#: Most sequences one request of a sharing run asks for (parallel samples or beams); the engine's
#: ``allocator.engine.sampling.MAX_WIDTH`` (``tests/core/test_cli_wording.py`` holds the two together).
MAX_WIDTH = 16

#: Largest random seed (32 bits, as most tools write seeds).
MAX_SEED = 2 ** 32 - 1
#: Largest metadata cost c (slot equivalents per block); the engine's ``total_cost`` takes the same.
MAX_METADATA_COST = 1_000_000
#: Largest output cap (tokens): a decode that long is already 262,144 block boundaries of 16; the
#: pool's range grew to 2**30 slots (issue 24), this one stays where it was.
MAX_NEW_TOKENS = 1 << 22
#: Largest pool drawn slot by slot (``export-html``'s animated maps: every frame holds every slot).
MAX_DRAWN_SLOTS = 1 << 22
#: Largest pool of the Accounting page's "how many fit" arithmetic (slots).
MAX_ACCOUNT_POOL = 10 ** 12
#: Largest memory budget of the Capacity arithmetic (GiB): one PiB.
MAX_FREE_GIB = 2 ** 20

LIMITS: dict[str, Limit] = {
    # scenario (simulate, export-html, the explainer)
    "total_slots": Limit(1, MAX_POOL_SLOTS, unit="slots"),
    "pool_blocks": Limit(1, MAX_POOL_SLOTS, unit="blocks, at most 2**30 slots in all"),
    "drawn_slots": Limit(1, MAX_DRAWN_SLOTS, unit="slots: a pool drawn slot by slot"),
    "block_size": Limit(1, MAX_BLOCK_SIZE, unit="slots per block"),
    "max_new_tokens": Limit(1, MAX_NEW_TOKENS, unit="tokens"),
    "seed": Limit(0, MAX_SEED),
    "arrival_rate": Limit(0.001, 1000, integer=False, unit="requests per step"),
    "offset": Limit(0, MAX_ROWS - 1, unit="trace rows, from 0"),
    "count": Limit(1, MAX_ROWS, unit="requests"),
    "steps_per_second": Limit(0.001, 1_000_000, integer=False, unit="engine steps per second of trace time"),
    "metadata_cost": Limit(0, MAX_METADATA_COST, integer=False, unit="slot equivalents per block"),
    "shared_prefix": Limit(0, MAX_PROMPT_TOKENS, unit="tokens"),
    # vLLM v1 rules (--rules v1; allocator.engine.v1.V1Rules): a cap past a million sequences or a
    # budget past the longest length accepted describes no engine
    "max_num_seqs": Limit(1, MAX_NUM_SEQS, unit="running sequences"),
    "max_num_batched_tokens": Limit(1, MAX_TOKENS, unit="tokens per engine step"),
    # speculative decoding under vLLM v1 rules (allocator.engine.v1.V1Rules): past 64 draft tokens a
    # step, a draft's chance of surviving to the end is nil at any real acceptance rate
    "num_speculative_tokens": Limit(0, MAX_SPEC_TOKENS, unit="draft tokens per decode step"),
    "acceptance_rate": Limit(0, 1, integer=False, unit="probability that a draft token is accepted"),
    "spec_seed": Limit(0, MAX_SEED),
    # sliding-window and hybrid paging (--sliding-window; allocator.memory.sliding_window): a window past the
    # longest length accepted is full attention; vLLM's hybrid models have a handful of KV-cache groups
    "sliding_window": Limit(0, MAX_TOKENS, unit="tokens; 0: full attention"),
    "full_groups": Limit(0, 16, unit="KV-cache groups of full-attention layers"),
    "window_groups": Limit(1, 16, unit="KV-cache groups of sliding-window layers"),
    # slot accounting (account, the Accounting page)
    "lengths": Limit(1, MAX_TOKENS, unit="tokens"),
    "reserve": Limit(1, MAX_TOKENS, unit="slots per request"),
    "candidates": Limit(1, MAX_BLOCK_SIZE, unit="slots per block"),
    "pool_slots": Limit(0, MAX_ACCOUNT_POOL, unit="slots"),
    "length_a": Limit(1, MAX_TOKENS, unit="tokens"),
    "length_b": Limit(1, MAX_TOKENS, unit="tokens"),
    "prefix_tokens": Limit(0, MAX_TOKENS, unit="tokens"),
    # capacity (capacity, the Capacity page)
    "free_gib": Limit(0, MAX_FREE_GIB, integer=False, unit="GiB"),
    "max_context": Limit(1, MAX_TOKENS, unit="tokens"),
    "mean_tokens": Limit(0, MAX_TOKENS, integer=False, unit="tokens", low_open=True),
    "layers": Limit(1, 1024),
    "kv_heads": Limit(1, 1024),
    "head_dim": Limit(1, 16384),
    "bytes_per_element": Limit(1, 8, unit="bytes"),
    # rate sweep (rate-sweep, the Throughput and latency page): a run of 20,000 requests takes
    # seconds, and rates past a million a second are all arrivals at once
    "requests": Limit(1, 20_000, unit="requests per run"),
    "rates": Limit(0, 1_000_000, integer=False, unit="requests per second", low_open=True),
    "latency_factor": Limit(1, 1000, integer=False, unit="times the latency of a request served alone",
                            low_open=True),
    # sharing (sharing, the Sharing page; allocator.engine.sampling.Sampling, allocator.studies.sharing):
    # a request of 2 to MAX_WIDTH sequences, and runs of at most 10,000 requests
    "width": Limit(2, MAX_WIDTH, unit="samples or beams per request"),
    "replacement": Limit(0, 1, integer=False, unit="probability that a beam is replaced per step"),
    "sharing_requests": Limit(1, 10_000, unit="requests per run"),
}


def check_pool_blocks(pool_blocks: object, block_size: int) -> int:
    """Check a pool given in blocks: a whole number of blocks from 1 to ``MAX_POOL_SLOTS // block_size``
    (the one pool range, in blocks of ``block_size`` slots).

    Raises:
        FieldError: ``pool_blocks``, naming the value and the range for this block size.
    """
    high = max(1, MAX_POOL_SLOTS // block_size)
    return in_range("pool_blocks", pool_blocks,
                    Limit(1, high, unit=f"blocks of {block_size} slots: at most 2**30 slots in all"))


def check(field: str, value: object, *, index: int | None = None, subject: str | None = None):
    """Check ``value`` against ``LIMITS[field]`` (see :func:`allocator.common.validate.in_range`).

    Returns:
        The value as an int (a count) or a float.

    Raises:
        FieldError: naming ``field`` (or ``subject``), the value and the allowed range.
        KeyError: ``field`` has no entry in :data:`LIMITS` (a programming error).
    """
    return in_range(field, value, LIMITS[field], index=index, subject=subject)
