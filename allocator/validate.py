"""One validation layer for every input the core accepts, and one exception type for bad input.

Every check here takes its arguments in the same order -- ``(field, value, ...limits)`` -- and
raises :class:`FieldError`, a ``ValueError`` that carries the name of the input it is about in
``.field``. Pages mark the widget that holds ``.field`` and the CLI prints the message; nobody
has to read the message text to know which input was wrong.

Message format (one for the whole project): ``"<subject> = <value> <problem>"``, for example
``"block_size = 0 must be at least 1"``, ``"lengths[2] = 2.5 is not a whole number"`` or
``"free_gib = inf is not a finite number"``; an empty value reads ``"<subject> is empty: ..."``.
``subject`` is the field's name, with ``[i]`` for entry ``i`` of a list input, or whatever the
caller passes (``"request 3: prompt_len"``, ``"row 2, column ContextTokens"``).
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import numpy as np


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


def _show(value: object) -> str:
    """A value as a message shows it: numbers plainly (``2.5``, ``inf``), anything else repr'd."""
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    return repr(value)


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
                             and math.isnan(float(value)))


def whole_number(field: str, value: object, minimum: int | None = None, maximum: int | None = None, *,
                 index: int | None = None, subject: str | None = None) -> int:
    """Return ``value`` as an int if it is a whole number in ``[minimum, maximum]`` (units: the caller's).

    Python and numpy integers and integral floats (``5.0``, as a table editor returns) are accepted;
    booleans, None/NaN, infinities, fractions and non-numbers are not.

    Raises:
        FieldError: ``"<subject> is empty: ..."``, ``"<subject> = 2.5 is not a whole number"``,
            ``"<subject> = 0 must be at least 1"`` or ``"<subject> = 5000 must be at most 4096"``.
    """
    def fail(problem: str):
        return FieldError(field, problem, index=index, subject=subject)

    at_least = f"at least {minimum}" if minimum is not None else "any whole number"
    if _blank(value):
        raise fail(f" is empty: enter a whole number ({at_least})")
    if isinstance(value, (bool, np.bool_)):
        raise fail(f" = {_show(value)} is not a number")
    if isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise fail(f" = {_show(value)} is not a whole number")
        result = int(as_float)
    else:
        raise fail(f" = {_show(value)} is not a number")
    if minimum is not None and result < minimum:
        raise fail(f" = {result} must be at least {minimum}")
    if maximum is not None and result > maximum:
        raise fail(f" = {result} must be at most {maximum}")
    return result


def real_number(field: str, value: object, minimum: float | None = None, maximum: float | None = None, *,
                above: float | None = None, subject: str | None = None) -> float:
    """Return ``value`` as a finite float in range: ``>= minimum``, ``<= maximum``, ``> above``.

    Raises:
        FieldError: ``"<subject> = 'x' is not a number"``, ``"<subject> = inf is not a finite
            number"``, ``"<subject> = -1.0 must not be negative"`` (minimum 0), ``"... must be at
            least ..."``, ``"... must be at most ..."`` or ``"... must be more than ..."``.
    """
    def fail(problem: str):
        return FieldError(field, problem, subject=subject)

    if value is None or isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise fail(f" = {_show(value)} is not a number")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise fail(f" = {_show(value)} is not a finite number")
    if minimum is not None and as_float < minimum:
        raise fail(f" = {_show(value)} must not be negative" if minimum == 0
                   else f" = {_show(value)} must be at least {minimum:g}")
    if above is not None and as_float <= above:
        raise fail(f" = {_show(value)} must be more than {above:g}")
    if maximum is not None and as_float > maximum:
        raise fail(f" = {_show(value)} must be at most {maximum:g}")
    return as_float


def one_of(field: str, value: object, choices: Iterable, *, subject: str | None = None):
    """Return ``value`` if it is one of ``choices``.

    Raises:
        FieldError: ``"<subject> = 'x' must be one of 'a', 'b'"``.
    """
    choices = tuple(choices)
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise FieldError(field, f" = {_show(value)} must be one of {listed}", subject=subject)
    return value


def whole_numbers(field: str, values: object, minimum: int | None = 1, *, what: str = "value") -> list[int]:
    """Check a non-empty list of whole numbers; return it as ``list[int]`` (same order).

    Args:
        what: what one entry is, for the empty-list message (``"request length (tokens)"``).

    Raises:
        FieldError: ``"<field> must be a list of whole numbers"`` (a string, None or a scalar),
            ``"<field> is empty: give at least one <what>"``, or entry ``i``'s problem with
            ``index=i`` (subject ``"<field>[i]"``).
    """
    if values is None or isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise FieldError(field, " must be a list of whole numbers")
    items = list(values)
    if not items:
        raise FieldError(field, f" is empty: give at least one {what}")
    return [whole_number(field, v, minimum, index=i) for i, v in enumerate(items)]
