"""The PagedAttention paper's Orca baselines as its artifact built them: estimators and a buddy allocator.

The paper compares vLLM with three versions of Orca that differ only in how much KV memory a
request reserves up front (Kwon et al., "Efficient Memory Management for Large Language Model
Serving with PagedAttention", SOSP 2023, section 6.1, "Baseline 2: Orca"). Its artifact
repository (sosp-ae-39/sosp-ae-astra) implements that Orca as a proxy on vLLM's own code base:
``orca/cacheflow/master/block_manager.py`` (``BuddyBlockSpaceManager``) and the statistics in
``orca/cacheflow/master/scheduler.py``. The rules this module follows (also summed up in
``assets/reference_figures.md`` R9):

* a request reserves ``ceil(min(prompt + estimate, 2048) / 16)`` blocks of 16 tokens, where the
  estimate of its output length is 2,048 (Orca (Max), the artifact's "constant"), the next power of
  two at or above the true output length (Orca (Pow2)) or the true output length (Orca (Oracle))
  -- :func:`reservation_blocks`;
* the reservation is placed by a **buddy allocator** over blocks (:class:`BuddyBlocks`): the block
  count is rounded up to a power of two; the largest run is 2,048 / 16 = 128 blocks; the pool
  starts as runs of 128 blocks and its remainder as halves (64, 32, ... blocks); an allocation
  takes the smallest free run that fits (the lowest address among equals) and splits it in
  halves until it is the right size; a freed run merges with its buddy (start XOR size) while the
  buddy is free and the same size.

The rounding to a power of two is memory a request holds and never writes: internal
fragmentation, drawn orange in the maps like the rest of an unreached reservation. Free runs too
small for the queue's head are external fragmentation. Used by
:class:`allocator.memory.allocators.ReserveMaxAllocator` with ``placement="buddy"``.
"""
from __future__ import annotations

from allocator.common.mathutils import cdiv
from allocator.common.errors import FieldError
from allocator.common.validate import one_of, whole_number

#: The artifact's output-length estimators, by this project's policy names (its names in brackets):
#: max ("constant"), pow2 ("power2"), oracle ("oracle").
ESTIMATORS = ("max", "pow2", "oracle")
#: OPT's context window: no reservation is longer (tokens).
ORCA_MAX_CONTEXT = 2048
#: The artifact's block size (tokens per block).
ORCA_BLOCK_SIZE = 16


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1): 1 -> 1, 5 -> 8, 8 -> 8."""
    return 1 << (int(n) - 1).bit_length()


def output_estimate(output_len: int, estimator: str, max_context: int = ORCA_MAX_CONTEXT) -> int:
    """The artifact's estimate of a request's output length (tokens).

    Args:
        output_len: the true output length (tokens, >= 1).
        estimator: ``"max"`` (``max_context``, the artifact's constant 2,048), ``"pow2"`` (the next
            power of two >= ``output_len``) or ``"oracle"`` (``output_len`` itself).

    Raises:
        FieldError: an unknown ``estimator`` or an ``output_len`` below 1.

    Examples: output 300 -> 2048 (max), 512 (pow2), 300 (oracle).
    """
    one_of("estimator", estimator, ESTIMATORS)
    output_len = whole_number("output_len", output_len, 1)
    if estimator == "max":
        return max_context
    if estimator == "pow2":
        return next_pow2(output_len)
    return output_len


def reservation_blocks(prompt_len: int, output_len: int, estimator: str, block_size: int = ORCA_BLOCK_SIZE,
                       max_context: int = ORCA_MAX_CONTEXT) -> int:
    """Blocks a request asks for: ceil(min(prompt + estimate, max_context) / block_size).

    The buddy allocator then places a run of the next power of two of blocks (:func:`next_pow2`;
    39 -> 64).
    Examples with blocks of 16 and the 2,048 cap, prompt 100 and output 300: max -> 128,
    pow2 -> ceil(612 / 16) = 39, oracle -> ceil(400 / 16) = 25.
    """
    est = output_estimate(output_len, estimator, max_context)
    return cdiv(min(int(prompt_len) + est, max_context), block_size)


class BuddyBlocks:
    """A buddy allocator over ``num_blocks`` blocks with runs of at most ``max_run`` blocks.

    Args:
        num_blocks: blocks in the pool (>= 1).
        max_run: largest run (a power of two >= 1; 128 = 2,048 tokens / 16 in the artifact).

    Raises:
        FieldError: ``num_blocks`` below 1 or ``max_run`` not a power of two.

    Runs are (start block, size in blocks); a run of size 2**k always starts at a multiple of 2**k.
    Free runs are kept in one set per size. :meth:`allocate` returns the start of a run of
    ``next_pow2(blocks)`` blocks, or None if no free run is large enough.
    """

    def __init__(self, num_blocks: int, max_run: int = 128):
        self.num_blocks = whole_number("num_blocks", num_blocks, 1)
        self.max_run = whole_number("max_run", max_run, 1)
        if self.max_run & (self.max_run - 1):
            raise FieldError("max_run", f" = {self.max_run} must be a power of two")
        self.reset()

    def reset(self) -> None:
        """Every block free: runs of ``max_run`` from block 0, then the remainder as halves."""
        self.free_runs: dict[int, set[int]] = {}     # size -> starts of free runs of that size
        self.owned: dict[int, int] = {}              # start -> size of allocated runs
        self.num_free = self.num_blocks
        for start, size in self.initial_runs():
            self.free_runs.setdefault(size, set()).add(start)

    def initial_runs(self) -> list[tuple[int, int]]:
        """The free runs of an empty pool, (start, size) by address (what :meth:`reset` builds)."""
        runs, pos, size = [], 0, self.max_run
        while pos < self.num_blocks:
            while size > self.num_blocks - pos:
                size //= 2
            runs.append((pos, size))
            pos += size
        return runs

    def largest_free(self) -> int:
        """Size of the largest free run (blocks; 0 if none)."""
        return max((s for s, starts in self.free_runs.items() if starts), default=0)

    def largest_possible(self) -> int:
        """Size of the largest run the empty pool has (blocks): no larger request can ever fit."""
        return max(s for _, s in self.initial_runs())

    def fits(self, blocks: int) -> bool:
        """Whether a run for ``blocks`` blocks can be placed now."""
        return self.largest_free() >= next_pow2(blocks)

    def allocate(self, blocks: int) -> int | None:
        """Place a run of next_pow2(``blocks``) blocks: take the smallest free run that is large
        enough (lowest start among equals), split it in halves until it has that size (the upper
        halves stay free) and return its start block; None if nothing is large enough."""
        size = next_pow2(blocks)
        if size > self.max_run:
            return None
        fit = min((s for s, starts in self.free_runs.items() if s >= size and starts), default=None)
        if fit is None:
            return None
        start = min(self.free_runs[fit])
        self.free_runs[fit].discard(start)
        while fit > size:
            fit //= 2
            self.free_runs.setdefault(fit, set()).add(start + fit)
        self.owned[start] = size
        self.num_free -= size
        return start

    def free(self, start: int) -> None:
        """Return the run at ``start``; merge it with its buddy (start XOR size) while the buddy is
        a free run of the same size and the merged run is at most ``max_run``.

        Raises:
            KeyError: no allocated run starts there.
        """
        size = self.owned.pop(start)
        self.num_free += size
        while size < self.max_run:
            buddy = start ^ size
            starts = self.free_runs.get(size)
            if not starts or buddy not in starts:
                break
            starts.discard(buddy)
            start = min(start, buddy)
            size *= 2
        self.free_runs.setdefault(size, set()).add(start)

    def free_list(self) -> list[tuple[int, int]]:
        """Every free run as (start, size), by address."""
        return sorted((s, size) for size, starts in self.free_runs.items() for s in starts)

    def check_invariants(self) -> None:
        """Assert runs are aligned, inside the pool, never overlap, cover every block exactly once
        (free or owned), the free count adds up, and no two free buddies are left unmerged.

        Raises:
            AssertionError naming the first inconsistency.
        """
        runs = [(s, n, "free") for s, n in self.free_list()] + [(s, n, "owned") for s, n in self.owned.items()]
        runs.sort()
        pos = 0
        for s, n, what in runs:
            assert s == pos, f"{what} run at block {s} leaves a gap or overlap at {pos}"
            assert s % n == 0, f"{what} run at {s} of {n} blocks is not aligned"
            assert n <= self.max_run and n & (n - 1) == 0, f"{what} run of {n} blocks"
            pos = s + n
        assert pos == self.num_blocks, f"runs cover {pos} of {self.num_blocks} blocks"
        assert self.num_free == sum(n for _, n in self.free_list()), "free count drifted"
        for size, starts in self.free_runs.items():
            if size < self.max_run:
                for s in starts:
                    assert (s ^ size) not in starts, f"free buddies at {s} and {s ^ size} ({size} blocks) not merged"
