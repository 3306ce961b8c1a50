"""The project's one exception type for bad input, :class:`FieldError`, and its out-of-blocks kind.

Kept apart from :mod:`allocator.common.validate` (which checks inputs and needs numpy) so that anything
may raise it without importing numpy: ``kernels/`` raises it too, and ``python3 -m
kernels.gpu_check`` runs on a GPU machine whose python3 may have torch and Triton but no numpy.
``allocator.common.validate`` re-exports both names, the way most of the code imports them.
"""
from __future__ import annotations


class FieldError(ValueError):
    """Bad input, with the name of the input it is about.

    Args:
        field: the input's name as the code calls it (``"block_size"``, ``"lengths"``,
            ``"num_blocks"``); pages map it to their own control.
        problem: what is wrong, as it follows the subject in the message (``" = 0 must be at
            least 1"``, ``": out of blocks: ..."``).
        index: for a list input, the 0-based entry that is wrong (a table row), else None.
        subject: how the message names the input (default ``field``, or ``field[index]``).

    Attributes:
        field, index, subject, problem: as given; ``str(error)`` is ``subject + problem``.
    """

    def __init__(self, field: str, problem: str, *, index: int | None = None, subject: str | None = None):
        self.field = field
        self.index = index
        self.subject = subject if subject is not None else (field if index is None else f"{field}[{index}]")
        self.problem = problem
        super().__init__(self.subject + problem)

    def reworded(self, label: str) -> str:
        """The message with the subject replaced by ``label`` (a control's caption or a table row)."""
        return label + self.problem

    @property
    def detail(self) -> str:
        """``problem`` without its joining ``": "`` (for a sentence of one's own):
        ``"sequence 'A' is not swapped out"`` for the problem ``": sequence 'A' is not swapped out"``."""
        return self.problem[2:] if self.problem.startswith(": ") else self.problem.lstrip()

    def __reduce__(self):  # keep .field and friends across pickling (streamlit caches, multiprocessing)
        return (_rebuild, (self.field, self.problem, self.index, self.subject))


def _rebuild(field, problem, index, subject):
    return FieldError(field, problem, index=index, subject=subject)


class OutOfBlocksError(FieldError):
    """An operation needs more free blocks than the pool (GPU or host) has; nothing was changed.

    Args:
        field: ``"num_blocks"`` (the GPU pool) or ``"num_host_blocks"`` (the host swap pool).
        detail: what was asked for and what was free, in words.
        needed, available: blocks.

    The message is ``"num_blocks: out of blocks: <detail>"`` or ``"num_host_blocks: host pool is
    full: <detail>"``; ``.detail``, ``.needed`` and ``.available`` carry the parts.
    """

    KINDS = {"num_blocks": "out of blocks", "num_host_blocks": "host pool is full"}

    def __init__(self, field: str, detail: str, *, needed: int, available: int):
        super().__init__(field, f": {self.KINDS.get(field, 'out of blocks')}: {detail}")
        self.out_of_blocks_detail = detail
        self.needed = needed
        self.available = available

    @property
    def detail(self) -> str:
        """What was asked for and what was free (the message after its kind)."""
        return self.out_of_blocks_detail

    def __reduce__(self):
        return (_rebuild_out_of_blocks, (self.field, self.detail, self.needed, self.available))


def _rebuild_out_of_blocks(field, detail, needed, available):
    return OutOfBlocksError(field, detail, needed=needed, available=available)
