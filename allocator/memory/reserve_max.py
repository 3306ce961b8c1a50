"""Reserve-the-maximum allocators: one contiguous run of slots per request, sized at admission.

:class:`ReserveMaxAllocator` is the PagedAttention paper's baseline family ("Orca (Max)",
"Orca (Pow2)", "Orca (Oracle)"): a request's run holds its prompt plus the room a policy sets
aside for its answer -- ``max`` (max_new_tokens, how pre-2023 engines such as FasterTransformer
and Orca held the cache), ``pow2`` (the next power of two >= the output) or ``oracle`` (the exact
output). The run is placed first fit (the lesson's contiguous pool) or by a buddy allocator over
power-of-two runs of blocks (the paper's artifact, :mod:`allocator.memory.buddy`). It never grows and
is held until the request ends; its waste is the run's unreached tail (internal fragmentation)
and free runs too short for the next request (external fragmentation).

Sources: Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023 (arXiv:2309.06180), section 3 (reservation waste, Figure 2) and
section 6 (the Orca baselines); ``assets/reference_figures.md`` R1, R4 and R7 (the lesson's
figures for reservations); the engine's rules it runs under are R9.
"""
from __future__ import annotations

from bisect import insort

from allocator.memory.buddy import ORCA_BLOCK_SIZE, ORCA_MAX_CONTEXT, BuddyBlocks, reservation_blocks
from allocator.common.limits import MAX_BLOCK_SIZE, MAX_POOL_SLOTS
from allocator.common.errors import FieldError
from allocator.common.validate import one_of, whole_number

#: Reservation policies of :class:`ReserveMaxAllocator` (the PagedAttention paper's baselines).
RESERVATION_POLICIES = ("max", "pow2", "oracle")
#: Where a reservation is placed: "first-fit" (one contiguous run of slots, lowest address; the
#: explainer's lesson, ``assets/reference_figures.md`` R7 and R9) or "buddy" (the paper's
#: artifact: power-of-two runs of blocks, :mod:`allocator.memory.buddy`).
PLACEMENTS = ("first-fit", "buddy")


def _next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    return 1 << (n - 1).bit_length()


class ReserveMaxAllocator:
    """Contiguous reservation per request, first fit (lowest address), held until the request ends.

    Args:
        total_slots: pool size in slots (>= 1).
        max_new_tokens: the server's cap on generated tokens (>= 1).
        policy: how big a reservation is (the PagedAttention paper's Orca baselines):
            ``"max"`` prompt + max_new_tokens (default); ``"pow2"`` prompt + the next power of
            two >= the output length, but never more than max_new_tokens (a server does not set
            aside room for tokens its cap forbids: with a cap of 600, a 513-token answer gets
            600, not 1,024); ``"oracle"`` prompt + the exact output length.

        placement: ``"first-fit"`` (default: exactly ``reservation`` slots, the lowest free run
            long enough) or ``"buddy"`` (the PagedAttention paper's artifact, :mod:`allocator.memory.buddy`:
            ``ceil(min(prompt + estimate, max_context) / block_size)`` blocks, where the estimate
            is ``max_context`` for max, the next power of two of the output for pow2 and the
            output for oracle, rounded up to a power of two of blocks and placed by a buddy
            allocator whose largest run is ``max_context / block_size`` blocks; ``max_new_tokens``
            plays no part in the size then).
        block_size: tokens per block of the buddy placement (default 16, the artifact's).
        max_context: the buddy placement's cap on a reservation (tokens; default 2,048, OPT's
            context window); must be a power-of-two multiple of ``block_size``.

    Raises:
        FieldError: ``total_slots`` or ``max_new_tokens`` not a whole number >= 1, an unknown
            ``policy`` or ``placement``, or (buddy) a pool smaller than one block or a
            ``max_context`` that is not a power-of-two number of blocks.

    A reservation never needs to grow, so this allocator never preempts. Its waste is the
    unreached tail of each reservation (internal fragmentation: with buddy placement this includes
    the rounding up to a power of two of blocks) and the free runs between reservations that are
    too short for the next reservation (external fragmentation).
    """

    kind = "reserve_max"
    block_size = None
    preemption = None
    shared_saving = 0
    last_hit_tokens = hit_tokens = prompt_tokens = cached_blocks = cache_evictions = 0
    prefix_caching = False
    swap_traffic = 0
    LABELS = {"max": "Reserve-max", "pow2": "Reserve-pow2", "oracle": "Reserve-oracle"}

    def __init__(self, total_slots: int, max_new_tokens: int, policy: str = "max", placement: str = "first-fit",
                 block_size: int = ORCA_BLOCK_SIZE, max_context: int = ORCA_MAX_CONTEXT):
        self.total_slots = whole_number("total_slots", total_slots, 1, MAX_POOL_SLOTS)
        self.max_new_tokens = whole_number("max_new_tokens", max_new_tokens, 1)
        self.policy = one_of("policy", policy, RESERVATION_POLICIES)
        self.placement = one_of("placement", placement, PLACEMENTS)
        self.label = self.LABELS[self.policy]
        self._buddy = None
        if self.placement == "buddy":
            self.unit = whole_number("block_size", block_size, 1, MAX_BLOCK_SIZE)
            self.max_context = whole_number("max_context", max_context, 1)
            run = self.max_context // self.unit
            if self.max_context % self.unit or run & (run - 1):
                raise FieldError("max_context", f" = {self.max_context} must be a power-of-two number of "
                                 f"{self.unit}-token blocks")
            if self.total_slots < self.unit:
                raise FieldError("block_size", f" = {self.unit} is larger than the pool ({self.total_slots} slots)")
            self._buddy = BuddyBlocks(self.total_slots // self.unit, run)
            self.label += " (buddy)"
        self.reset()

    def reset(self, shared_prefix: int = 0, prompts=None) -> None:
        """Forget every reservation (an empty pool). Contiguous runs cannot share blocks, so a
        shared prefix or known prompt tokens change nothing here: each reservation stores its
        own copy and prefills all of it."""
        self._runs: list[tuple[int, int, int]] = []     # sorted (start, length, seq_id)
        self._by_seq: dict[int, tuple[int, int]] = {}    # seq_id -> (start, length)
        self.allocated_slots = 0
        if self._buddy is not None:
            self._buddy.reset()
        self._unwritten: dict[int, int] = {}             # seq_id -> slots of its run it will never write
        self.never_written = 0                           # their sum: internal fragmentation
        self._version = 0                                # bumped whenever the runs change
        self._ext_key: tuple | None = None
        self._ext_value = 0
        self._no_room: tuple | None = None               # (version, need) of the last admit that found no run

    @property
    def units_in_use(self) -> int:
        """Number of reservations held (one metadata entry each)."""
        return len(self._by_seq)

    def reservation(self, prompt_len: int, output_len: int | None = None) -> int:
        """Slots reserved for a request (see ``policy`` and ``placement``); ``output_len`` is needed
        for pow2/oracle. With buddy placement this is the whole power-of-two run of blocks."""
        if self._buddy is not None:
            if output_len is None and self.policy != "max":
                raise FieldError("output_len", f" is needed by the {self.policy!r} reservation policy")
            blocks = reservation_blocks(prompt_len, output_len or 1, self.policy, self.unit, self.max_context)
            return _next_pow2(blocks) * self.unit
        if self.policy == "max":
            return prompt_len + self.max_new_tokens
        if output_len is None:
            raise FieldError("output_len", f" is needed by the {self.policy!r} reservation policy")
        if self.policy == "oracle":
            return prompt_len + output_len
        return prompt_len + min(_next_pow2(output_len), self.max_new_tokens)

    def validate_workload(self, workload) -> None:
        """Every output must fit the cap the reservation is sized by.

        Raises:
            FieldError (``max_new_tokens``): an output_len above this allocator's max_new_tokens.
        """
        if self._buddy is not None:        # the cap sizes reservations; longer requests are rejected one by one
            return
        for r in workload.requests:
            if r.output_len > self.max_new_tokens:
                raise FieldError("max_new_tokens", f" = {self.max_new_tokens} is below request {r.id}'s "
                                 f"output_len {r.output_len}: a reservation could not hold its answer")

    def never_fits(self, prompt_len: int, output_len: int) -> str | None:
        """Reason the request can never be admitted (its reservation exceeds the pool), else None."""
        need = self.reservation(prompt_len, output_len)
        if self._buddy is not None:
            if prompt_len + output_len > self.max_context:
                return (f"holds {prompt_len + output_len} tokens at its longest (prompt {prompt_len} + output "
                        f"{output_len}), more than the {self.max_context}-token context its buddy reservation is "
                        "capped at")
            largest = self._buddy.largest_possible() * self.unit
            if need > largest:
                return (f"needs a buddy run of {need} slots ({need // self.unit} blocks of {self.unit}) but the "
                        f"largest run this pool has is {largest} slots")
            return None
        if need > self.total_slots:
            what = {"max": f"max_new_tokens {self.max_new_tokens}", "oracle": f"output {output_len}",
                    "pow2": f"{min(_next_pow2(output_len), self.max_new_tokens)} for its {output_len}-token output"
                    }[self.policy]
            return (f"needs a contiguous reservation of {need} slots (prompt {prompt_len} + {what}) "
                    f"but the pool has only {self.total_slots} slots")
        return None

    def admission_need(self, prompt_len: int, context_len: int, output_len: int, seq_id: int | None = None) -> int:
        """Contiguous slots the request needs to be admitted (its whole reservation)."""
        return self.reservation(prompt_len, output_len)

    def _gaps(self):
        """Yield (start, length) of every free run, in address order (buddy placement: the buddy
        allocator's free runs, in slots, then the slots past the last whole block)."""
        if self._buddy is not None:
            for start, size in self._buddy.free_list():
                yield start * self.unit, size * self.unit
            tail = self.total_slots - self._buddy.num_blocks * self.unit
            if tail:
                yield self._buddy.num_blocks * self.unit, tail
            return
        pos = 0
        for start, length, _ in self._runs:
            if start > pos:
                yield pos, start - pos
            pos = start + length
        if pos < self.total_slots:
            yield pos, self.total_slots - pos

    def admit(self, seq_id: int, prompt_len: int, context_len: int, output_len: int) -> int | None:
        """Reserve the first (lowest-address) free run long enough; its length is the room, or
        None if no run is long enough."""
        need = self.reservation(prompt_len, output_len)
        if self._buddy is not None:
            block = self._buddy.allocate(need // self.unit)
            if block is None:
                return None
            return self._place(seq_id, block * self.unit, need, prompt_len + output_len)
        key = (self._version, need)
        if key == self._no_room:           # the runs have not changed since this need last found no room
            return None
        for start, length in self._gaps():
            if length >= need:
                return self._place(seq_id, start, need, prompt_len + output_len)
        self._no_room = key
        return None

    def _place(self, seq_id: int, start: int, need: int, final: int) -> int:
        """Record a reservation of ``need`` slots at ``start`` for a sequence that ends at ``final``
        tokens; the slots past ``final`` are never written (internal fragmentation). Returns need."""
        insort(self._runs, (start, need, seq_id))
        self._by_seq[seq_id] = (start, need)
        self.allocated_slots += need
        self._unwritten[seq_id] = need - final
        self.never_written += need - final
        self._version += 1
        return need

    def grow(self, seq_id: int) -> int | None:
        """A contiguous reservation cannot grow: None. (The engine never asks, since a reservation
        holds the whole answer; :meth:`validate_workload` makes sure of that.)"""
        return None

    def grow_all(self, seq_ids: list) -> int | None:
        """Reservations cannot grow: None."""
        return None

    def free(self, seq_id: int) -> None:
        """Release the sequence's reservation."""
        start, length = self._by_seq.pop(seq_id)
        self._runs.remove((start, length, seq_id))
        self.allocated_slots -= length
        self.never_written -= self._unwritten.pop(seq_id)
        self._version += 1
        if self._buddy is not None:
            self._buddy.free(start // self.unit)

    def preempt(self, seq_id: int) -> str:
        """Release the sequence's reservation for recompute (never needed: reservations never grow)."""
        self.free(seq_id)
        return "recompute"

    def external_fragmentation(self, need: int) -> int:
        """Free slots lying in runs shorter than ``need`` slots, counted only when all free slots
        together would hold ``need`` (then placement, not shortage, keeps the request out); 0 when
        nothing waits or the queue head needs more than the whole free pool (free memory, not
        fragmentation: no allocator could admit it).

        Cached until the reservations or ``need`` change, so the engine can ask every step."""
        if need <= 0 or need > self.total_slots - self.allocated_slots:
            return 0
        key = (self._version, need)
        if key != self._ext_key:
            self._ext_key = key
            self._ext_value = sum(length for _, length in self._gaps() if length < need)
        return self._ext_value

    def holes(self, need: int) -> list[tuple[int, int]]:
        """Free runs (start, length) shorter than ``need`` slots: the holes the map marks (none when
        ``need`` exceeds the whole free pool, as :meth:`external_fragmentation` counts them)."""
        if need <= 0 or need > self.total_slots - self.allocated_slots:
            return []
        return [(s, n) for s, n in self._gaps() if n < need]

    def run_of(self, seq_id: int) -> tuple[int, int]:
        """(start slot, length in slots) of a sequence's reservation."""
        return self._by_seq[seq_id]

    def snapshot(self, lengths: dict) -> tuple:
        """Reservations as a tuple of (owner id, start slot, reserved slots, tokens held), by address."""
        return tuple((seq_id, start, length, lengths[seq_id]) for start, length, seq_id in self._runs)

    def check_invariants(self, lengths: dict) -> None:
        """Assert reservations never overlap, never hold more tokens than reserved, and add up.

        Raises:
            AssertionError naming the first inconsistency.
        """
        pos = held = 0
        for start, length, seq_id in self._runs:
            assert start >= pos, f"reservations overlap at slot {start}"
            assert lengths[seq_id] <= length, f"seq {seq_id} holds more tokens than it reserved"
            pos = start + length
            held += length
        assert pos <= self.total_slots, "a reservation runs past the pool"
        assert held == self.allocated_slots, "allocated slots do not add up"
        if self._buddy is not None:
            self._buddy.check_invariants()
            assert {(s // self.unit, n // self.unit) for s, n, _ in self._runs} == set(self._buddy.owned.items()), \
                "reservations and buddy runs differ"
        assert {s for _, _, s in self._runs} == set(lengths), "reservations and running sequences differ"
