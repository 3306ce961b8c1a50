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

A :class:`Limit` is the documented range of one numeric input (``allocator.common.limits.LIMITS`` holds
every one the CLI and the pages take); :func:`in_range` checks a value against it and names the
whole range when it is wrong: ``"seed = -1 must be a whole number from 0 to 4,294,967,295"``.
:func:`number_from_text` turns what a user typed into a number for those checks.
"""
from __future__ import annotations

import math
import numbers
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from allocator.common.errors import FieldError


class TypedFloat(float):
    """A float read from text by :func:`number_from_text` that remembers the text (``.typed``), so a
    message echoes what was typed (``rates[0] = 1e400 is not a finite number``), not what the number
    became (``inf``). Arithmetic on it gives plain floats; every check returns a plain int or float."""

    typed: str

    def __new__(cls, value: float, typed: str):
        self = super().__new__(cls, value)
        self.typed = typed
        return self

    def __reduce__(self):
        return float, (float(self),)


#: Most digits a number typed on the command line or in a page's field may have: a longer one is
#: refused as too long (:class:`LongNumber`) before Python converts it (it refuses integers of over
#: 4,300 digits, and every range here ends below 10**13).
MAX_NUMBER_DIGITS = 400


class LongNumber:
    """A number written too long to read: kept as its length, so every check refuses it in one
    message, ``": a 5,001-digit value is too long (at most 400 digits)"``.

    Args:
        text: the number as written (``"999...9"``, ``"1.000...05"``).
        limit: the most ``unit`` a number may have.
        unit: ``"digits"`` (of the mantissa) or ``"characters"`` (of the whole text).

    Attributes:
        size: the text's length in ``unit``; limit, unit, negative: as given or read.
    """

    def __init__(self, text: str, limit: int, unit: str = "digits"):
        text = text.strip()
        mantissa = re.split("[eE]", text, maxsplit=1)[0]
        self.size = sum(ch.isdigit() for ch in mantissa) if unit == "digits" else len(text)
        self.limit, self.unit = limit, unit
        self.negative = text.startswith("-")

    def __repr__(self) -> str:
        return f"a {self.size:,}-{self.unit[:-1]} value"

    @property
    def detail(self) -> str:
        """What is wrong, as a sentence: ``"a 5,001-digit value is too long (at most 400 digits)"``."""
        return f"{self!r} is too long (at most {self.limit:,} {self.unit})"

    @property
    def problem(self) -> str:
        """The FieldError problem every check raises for it: ``": "`` + :attr:`detail`."""
        return ": " + self.detail


class TypedInt(int):
    """An int read from text by :func:`number_from_text` whose text is not its plain spelling
    (``"+0"``, ``"007"``): it remembers the text (``.typed``), so a message echoes what was typed.
    Arithmetic on it gives plain ints; every check returns a plain int."""

    typed: str

    def __new__(cls, value: int, typed: str):
        self = super().__new__(cls, value)
        self.typed = typed
        return self

    def __reduce__(self):
        return int, (int(self),)


def _show(value: object, limit: int = 40) -> str:
    """A value as a message shows it: numbers plainly (``2.5``, ``inf``), as typed when it was read
    from text (:class:`TypedFloat`: ``1e400``, not ``inf``), booleans as JSON spells them (``true``:
    a check meets one only in a JSON file, never typed), anything else repr'd; cut to about
    ``limit`` characters (a 400-digit number or a pasted paragraph is not echoed)."""
    if isinstance(value, (TypedFloat, TypedInt)):
        return cut(value.typed, limit)
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        size = abs(int(value))
        if size < 10 ** 4000:
            digits = str(size)
            if len(digits) <= limit:
                return str(int(value))
            return f"{'-' if value < 0 else ''}{digits[:12]}… ({len(digits):,} digits)"
        n = int(size.bit_length() * 0.30102999566398) + 1          # digits, to within one
        while size < 10 ** (n - 1):
            n -= 1
        head = str(size // 10 ** (n - 12))[:12]
        return f"{'-' if value < 0 else ''}{head}… ({n:,} digits)"
    if isinstance(value, numbers.Real):
        return repr(float(value))
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def show(value: object, limit: int = 40) -> str:
    """A value as the project's messages show it (``2.5``, ``inf``, ``'abc'``), cut to about
    ``limit`` characters; for callers wording a FieldError of their own."""
    return _show(value, limit)


#: Every ASCII punctuation character: CommonMark lets each be backslash-escaped, and an escaped one
#: is always shown as itself (https://spec.commonmark.org/0.31.2/#backslash-escapes).
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
#: Where GitHub-flavoured Markdown would turn plain words into a link by itself (``www.``,
#: ``scheme://``, ``name@host``): Streamlit's renderer does this on the text after escapes are
#: undone, so these spots get a zero-width space that breaks the pattern and changes nothing seen.
_AUTOLINK_SPOTS = re.compile(r"(?i)(?<=www)(?=\.)|(?<=:)(?=/)|(?=@)")
#: What Streamlit's Markdown renderer replaces by a typographic sign when it stands between spaces
#: (``--`` by an em dash, ``->`` by an arrow, ``<=`` by a less-or-equal sign, ...), in text but not in
#: code (frontend StreamlitMarkdown: its replacement runs on text nodes only).
_TYPOGRAPHIC = re.compile(r"(?:(?<=\s)|^)(<->|->|<-|--|>=|<=|~=)(?=\s|$)")
#: Longest piece of user text a message quotes (characters), unless the caller says otherwise.
PLAIN_LIMIT = 80


def cut(text: object, limit: int = PLAIN_LIMIT) -> str:
    """``str(text)`` cut to at most ``limit`` characters, the last being "…" when it was longer (a
    100,000-character URL value or file name is never echoed whole)."""
    text = str(text)
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "…"


def one_line(text: object, limit: int = PLAIN_LIMIT) -> str:
    """A user's text (an uploaded file's name) as a label other outputs can quote: control, format
    (e.g. right-to-left overrides) and line-break characters each become a space, so it stays one
    line in a CSV comment, a title or a terminal; then cut to ``limit`` characters (:func:`cut`).
    Still Markdown- and HTML-active: show it with :func:`plain_markdown` or ``html.escape``."""
    text = "".join(" " if unicodedata.category(ch)[0] == "C" or unicodedata.category(ch) in ("Zl", "Zp") else ch
                   for ch in cut(text, limit))
    return text


def plain_markdown(text: object, limit: int | None = None) -> str:
    """Text that a Markdown renderer (Streamlit's ``st.markdown``, ``st.warning``, ``st.error``,
    labels and captions) shows exactly as written: no link, image, emphasis, colour
    (``:red-background[...]``), maths, HTML or heading can come out of it.

    The one way the project shows text that came from a user (a URL parameter's name or value, an
    uploaded file's name, a CSV header or cell) or a message that quotes such text: every ASCII
    punctuation character is backslash-escaped, line breaks become spaces, and the spots where
    GitHub-flavoured Markdown would make a bare address into a link get a zero-width space.
    Streamlit's renderer also turns ``--``, ``->``, ``<-``, ``<->``, ``>=``, ``<=`` and ``~=`` standing
    between spaces into typographic signs (a copied ``git checkout -- file`` would read ``git checkout
    — file`` and fail); escapes do not stop it, so each of those becomes a code span, which it leaves
    alone (:data:`_TYPOGRAPHIC`; Streamlit's StreamlitMarkdown.tsx).

    Args:
        text: anything; ``str()`` of it is shown.
        limit: if given, the text is first cut to this many characters (see :func:`cut`).

    Returns:
        The Markdown source, e.g. ``plain_markdown("[a](b)") == "\\[a\\]\\(b\\)"``.
    """
    text = cut(text, limit) if limit is not None else str(text)
    text = text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")
    parts = _TYPOGRAPHIC.split(_AUTOLINK_SPOTS.sub("\u200b", text))
    # split() with one group: even items are text to escape, odd ones the signs to keep as code
    return "".join(f"`{part}`" if i % 2 else _MARKDOWN_PUNCTUATION.sub(r"\\\1", part)
                   for i, part in enumerate(parts))


def _blank(value: object) -> bool:
    """None, or a NaN that stands for an empty cell (a table editor's); a typed "nan" is not blank."""
    return value is None or not isinstance(value, TypedFloat) and (isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral)
                             and math.isnan(float(value)))


def whole_number(field: str, value: object, minimum: int | None = None, maximum: int | None = None, *,
                 index: int | None = None, subject: str | None = None) -> int:
    """Return ``value`` as an int if it is a whole number in ``[minimum, maximum]`` (units: the caller's).

    Python and numpy integers and integral floats (``5.0``, as a table editor returns) are accepted;
    booleans, None/NaN, infinities, fractions and non-numbers are not.

    Raises:
        FieldError: ``"<subject> is empty: ..."``, ``"<subject> = 2.5 is not a whole number"``,
            ``"<subject> = 0 must be at least 1"`` or ``"<subject> = 5000 must be at most 4,096"``.
    """
    def fail(problem: str):
        return FieldError(field, problem, index=index, subject=subject)

    at_least = f"at least {minimum}" if minimum is not None else "any whole number"
    if isinstance(value, LongNumber):
        raise fail(value.problem)
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
    # a whole float past 2**53 is shown as written (1e+30), not as the 31 digits it stands for
    typed = isinstance(value, (TypedFloat, TypedInt))       # echoed as typed: 1e3, +0
    shown = _show(value) if typed or not isinstance(value, numbers.Integral) and abs(result) > 2 ** 53 \
        else _show(result)
    if minimum is not None and result < minimum:
        raise fail(f" = {shown} must be at least {_bound(minimum)}")
    if maximum is not None and result > maximum:
        raise fail(f" = {shown} must be at most {_bound(maximum)}")   # a limit written as the range is
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

    if isinstance(value, LongNumber):
        raise fail(value.problem)
    if value is None or isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise fail(f" = {_show(value)} is not a number")
    try:
        as_float = float(value)
    except OverflowError:                      # an int past the float range (10**400)
        as_float = math.inf if value > 0 else -math.inf
    if not math.isfinite(as_float):
        raise fail(f" = {_show(value)} is not a finite number")
    if minimum is not None and as_float < minimum:
        raise fail(f" = {_show(value)} must not be negative" if minimum == 0
                   else f" = {_show(value)} must be at least {_bound(minimum)}")
    if above is not None and as_float <= above:
        raise fail(f" = {_show(value)} must be more than {_bound(above)}")
    if maximum is not None and as_float > maximum:
        raise fail(f" = {_show(value)} must be at most {_bound(maximum)}")
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


def whole_numbers(field: str, values: object, minimum: int | None = 1, *, maximum: int | None = None,
                  what: str = "value") -> list[int]:
    """Check a non-empty list of whole numbers in ``[minimum, maximum]``; return it as ``list[int]`` (same order).

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
    return [whole_number(field, v, minimum, maximum, index=i) for i, v in enumerate(items)]


def _bound(x: float) -> str:
    """A range's end as messages write it: ``4,194,304``, ``0.001``, ``1,000,000``."""
    x = float(x)
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e18 else f"{x:g}"


@dataclass(frozen=True)
class Limit:
    """The documented range of one numeric input.

    Attributes:
        low, high: inclusive ends (``low`` is exclusive when ``low_open``), in ``unit``.
        integer: only whole numbers are allowed (a count: slots, tokens, rows).
        unit: what the number counts, for messages (``"slots per block"``); may be empty.
        low_open: the value must be more than ``low`` (a rate, a mean length).
    """

    low: float
    high: float
    integer: bool = True
    unit: str = ""
    low_open: bool = False

    def describe(self) -> str:
        """The allowed values in words: ``"a whole number from 1 to 4,096 (slots per block)"``."""
        kind = "a whole number" if self.integer else "a number"
        span = (f"more than {_bound(self.low)} and at most {_bound(self.high)}" if self.low_open
                else f"from {_bound(self.low)} to {_bound(self.high)}")
        return f"{kind} {span}" + (f" ({self.unit})" if self.unit else "")

    def contains(self, value: float) -> bool:
        """True if the number ``value`` (finite) lies in the range; integrality is not checked."""
        above_low = value > self.low if self.low_open else value >= self.low
        return above_low and value <= self.high

    def check(self, field: str, value: object, *, index: int | None = None, subject: str | None = None):
        """``in_range(field, value, self)``: the value as int (``integer``) or float, else FieldError."""
        return in_range(field, value, self, index=index, subject=subject)


def in_range(field: str, value: object, limit: Limit, *, index: int | None = None,
             subject: str | None = None):
    """Return ``value`` as an int (``limit.integer``) or a float if it lies in ``limit``'s range.

    Accepts Python and numpy numbers (an integral float such as ``5.0`` for a whole number); a
    string reaches here only when it was not a number (see :func:`number_from_text`). Integers are
    compared exactly, so ``10**400`` is refused as too large, never converted to a float.

    Raises:
        FieldError: every message names the field, the value and the allowed range:
            ``"count = 0 must be a whole number from 1 to 200,000 (requests)"``,
            ``"arrival_rate = nan is not a number: give a number from 0.001 to 1,000 (...)"``,
            ``"metadata_cost = inf is not a finite number: give ..."``,
            ``"seed = 2.5 is not a whole number: give ..."``, ``"seed is empty: give ..."``.
    """
    allowed = limit.describe()

    def fail(problem: str):
        return FieldError(field, problem, index=index, subject=subject)

    if value is None:
        raise fail(f" is empty: give {allowed}")
    if isinstance(value, LongNumber):
        raise fail(f"{value.problem}: give {allowed}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise fail(f" = {_show(value)} is not a number: give {allowed}")
    if isinstance(value, numbers.Integral):
        number = int(value)
    else:
        number = float(value)
        if math.isnan(number):
            raise fail(f" = {_show(value)} is not a number: give {allowed}")
        if not math.isfinite(number):
            raise fail(f" = {_show(value)} is not a finite number: give {allowed}")
        if limit.integer:
            if not number.is_integer():
                raise fail(f" = {_show(value)} is not a whole number: give {allowed}")
            number = int(number)
    if not limit.contains(number):
        raise fail(f" = {_show(value)} must be {allowed}")    # as given: 1e+30, not its 31 digits
    return number if limit.integer else float(number)


#: A decimal number as written (sign, digits, point, exponent): what :func:`number_from_text` measures.
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def number_from_text(text: object) -> object:
    """What a user typed, as a number when it reads as one: ``"16"`` -> 16, ``"0.5"`` -> 0.5,
    ``"1e400"`` -> inf, ``"nan"`` -> nan (floats as :class:`TypedFloat`, and ints written
    otherwise than plainly, ``"+0"``, as :class:`TypedInt`: both remember the text for
    messages); a number of more than :data:`MAX_NUMBER_DIGITS` digits -> :class:`LongNumber` (every
    check refuses it as too long); text with an underscore (``"1_000"``) or a character outside ASCII
    is not a number; anything else comes back unchanged (a non-number is
    named by the check it goes to, e.g. :func:`in_range`). Non-strings are returned as they are."""
    if not isinstance(text, str):
        return text
    stripped = text.strip()
    if not stripped.isascii() or "_" in stripped:
        # Python's int() and float() also read "1_000" and other scripts' digits ("１２"); the lab
        # takes numbers as written in ASCII without separators, the same for every flag and field
        return text
    if len(stripped) > MAX_NUMBER_DIGITS and _DECIMAL.fullmatch(stripped):
        long = LongNumber(stripped, MAX_NUMBER_DIGITS)
        if long.size > MAX_NUMBER_DIGITS:
            return long
    try:
        whole = int(stripped)
    except ValueError:                  # not an integer
        pass
    else:
        return whole if str(whole) == stripped else TypedInt(whole, stripped)
    try:
        return TypedFloat(float(stripped), stripped)
    except ValueError:
        return text
