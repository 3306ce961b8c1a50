"""What speculative decoding costs in KV memory: the lookahead slots of draft tokens, per sequence.

A speculating engine proposes k draft tokens per decode step and lets the target model verify
them all in one pass, so each running sequence needs slots for its k drafts on top of the token a
plain decode writes: k **lookahead slots** (vLLM's ``KVCacheManager.allocate_slots`` reserves
computed + new + lookahead tokens, vllm/v1/core/kv_cache_manager.py; the engine's version is
:class:`allocator.engine.v1.V1Rules`). The drafts the verifier rejects give their slots back to
the sequence for its next step, but while it runs it always holds room for k more tokens than it
has. On the Capacity page's arithmetic (a mean length paged into blocks, reference figures R5)
that is ceil((mean + k) / block_size) blocks a sequence instead of ceil(mean / block_size) -- never
past the max context, where vLLM caps the slots a request needs (``max_model_len``).

The acceptance rate does not change that reservation (every step reserves all k); it changes how
many tokens a step yields: with each draft accepted independently with probability a until the
first rejection, a step yields (1 - a**(k + 1)) / (1 - a) tokens on average (k + 1 when a = 1) --
Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding", ICML
2023 (arXiv:2211.17192), section 3.1, equation (1) -- and k + 1 less that is the drafts rejected.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from allocator.accounting.memory import Capacity
from allocator.common.limits import check

#: The draft lengths the Capacity page tabulates (draft tokens per decode step).
SPEC_KS = tuple(range(9))


@dataclass(frozen=True)
class SpeculationRow:
    """One draft length k of :func:`speculation_capacity` (per sequence unless said otherwise).

    Attributes:
        k: draft tokens per decode step (0: no speculation).
        lookahead_slots: slots reserved ahead of the sequence's tokens (= k).
        blocks: ceil(min(mean + k, max_context) / block_size) blocks a sequence holds at the mean
            length.
        slots: blocks x block_size.
        bytes: slots x bytes per token.
        extra_bytes: bytes over k = 0's.
        fit: floor(free bytes / bytes): sequences that fit the memory.
        fewer: sequences fewer than at k = 0 (>= 0).
        tokens_per_step: expected tokens a decode step yields at the acceptance rate (the model's
            figure: (1 - a**(k + 1)) / (1 - a)).
        rejected_per_step: expected drafts rejected a step (k + 1 - tokens_per_step): the slots
            given back to the sequence for its next step.
    """

    k: int
    lookahead_slots: int
    blocks: int
    slots: int
    bytes: int
    extra_bytes: int
    fit: int
    fewer: int
    tokens_per_step: float
    rejected_per_step: float


def expected_tokens_per_step(k: int, acceptance_rate: float) -> float:
    """Expected tokens one speculative decode step yields: (1 - a**(k + 1)) / (1 - a), k + 1 when
    a = 1 (Leviathan et al. 2023, section 3.1, equation 1; see the module docstring).

    Raises:
        FieldError: ``num_speculative_tokens`` (k) not a whole number 0 .. 64, or
            ``acceptance_rate`` not a number from 0 to 1.
    """
    k = check("num_speculative_tokens", k)
    a = check("acceptance_rate", acceptance_rate)
    if a == 1:
        return float(k + 1)
    return (1 - a ** (k + 1)) / (1 - a)


def speculation_capacity(cap: Capacity, acceptance_rate: float, ks=SPEC_KS) -> list[SpeculationRow]:
    """The per-sequence KV cost of k lookahead slots, and the sequences that still fit, for each k.

    Args:
        cap: the Capacity page's result (:func:`allocator.accounting.capacity`): its bytes per
            token, free bytes, block size and mean tokens used are taken as they are.
        acceptance_rate: probability a draft token is accepted (0 .. 1); changes only the tokens a
            step yields, not the memory (see the module docstring).
        ks: the draft lengths, each a whole number 0 .. 64 (default 0 .. 8).

    Returns:
        One :class:`SpeculationRow` per k, in the order given; ``fewer`` and ``extra_bytes``
        against k = 0 at the same inputs (whether or not 0 is listed).

    Raises:
        FieldError: ``acceptance_rate`` or a k out of range (``num_speculative_tokens``).
    """
    a = check("acceptance_rate", acceptance_rate)
    ks = [check("num_speculative_tokens", k) for k in ks]
    bs, bpt, free = cap.block_size, cap.bytes_per_token, cap.free_bytes

    def per_sequence(k: int) -> tuple[int, int, int]:
        # vLLM caps the slots a request needs at max_model_len (allocate_slots: min(..., max_model_len))
        blocks = math.ceil(min(cap.mean_tokens + k, cap.max_context) / bs)
        return blocks, blocks * bs, blocks * bs * bpt

    base_bytes = per_sequence(0)[2]
    base_fit = free // base_bytes
    rows = []
    for k in ks:
        blocks, slots, nbytes = per_sequence(k)
        fit = free // nbytes
        tokens = expected_tokens_per_step(k, a)
        rows.append(SpeculationRow(k=k, lookahead_slots=k, blocks=blocks, slots=slots, bytes=nbytes,
                                   extra_bytes=nbytes - base_bytes, fit=fit, fewer=base_fit - fit,
                                   tokens_per_step=tokens, rejected_per_step=k + 1 - tokens))
    return rows
