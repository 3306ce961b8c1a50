"""Where a request stands inside the engine: :class:`SequenceStatus`.

Both schedulers (``allocator/engine/classroom.py``, ``allocator/engine/v1.py``) keep one status
per sequence, named as vLLM names them (v1's ``RequestStatus`` in vllm/v1/request.py, with v0's
``SequenceStatus.SWAPPED``; nano-vllm's ``SequenceStatus`` has the first, second and last)::

    WAITING --admit--> RUNNING --last token--> FINISHED
                        |   ^
          preempt       |   | admit again
                        v   |
                PREEMPTED (recompute) or SWAPPED (swap)

A preempted sequence waits at the head of the queue again; its status says how it comes back:
PREEMPTED prefills its prompt and generated tokens again (recompute), SWAPPED copies its K/V
back from host memory and decodes (swap, the classroom scheduler's other preemption mode).
"""
from __future__ import annotations

from enum import Enum


class SequenceStatus(Enum):
    """A sequence's place in its lifecycle (see the module's docstring).

    The hot loops compare statuses with ``is`` against module-level aliases (a global is read
    faster than an enum member: Python 3.11 looks a member up through the class each time).
    """

    WAITING = "waiting"        # arrived, never admitted: its first admission counts its prompt once
    RUNNING = "running"        # holds memory and emits a token every step
    PREEMPTED = "preempted"    # preempted by recompute: waits, to prefill its context again
    SWAPPED = "swapped"        # preempted by swap: waits, its K/V in host memory
    FINISHED = "finished"      # emitted its last token; its memory is freed
