"""Integer arithmetic every module shares (one spelling of ceiling division); no numpy, so the kernels
can use it on a machine without it."""
from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """Ceiling of ``a / b`` for integers, ``b > 0``: blocks needed for ``a`` tokens in blocks of ``b``.

    ``cdiv(17, 4) == 5``; ``cdiv(0, 4) == 0``. Exact for integers of any size (no float).
    Works on numpy integer arrays elementwise as well.

    Raises
    ------
    ZeroDivisionError when ``b == 0`` (callers validate block sizes first with
    :func:`allocator.common.validate.whole_number`, which names the field).
    """
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b`` (``b > 0``): slots taken by ``a`` tokens in blocks of ``b``.

    ``round_up(17, 4) == 20``. Raises ZeroDivisionError when ``b == 0``.
    """
    return cdiv(a, b) * b
