"""Byte units of the lesson: binary multiples only, and how the app writes them.

Every multiple is *binary*: ``KiB = 2**10``, ``MiB = 2**20``, ``GiB = 2**30`` bytes. The lesson
writes "KB", "MB", "GB" for these same binary quantities (for example "512 KB per token" in
``assets/reference_figures.md`` R5 is 524,288 bytes = 512 KiB, and the PagedAttention paper's
"800 KB" for OPT-13B is 819,200 bytes = 800 KiB). Nothing in the accounting package
uses decimal kB/MB/GB.
"""
from __future__ import annotations

from allocator.validate import FieldError

#: Binary byte multiples. The app never uses decimal kB/MB/GB.
KIB = 1024
MIB = 1024 ** 2
GIB = 1024 ** 3

_SCALES = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB}


def format_bytes(n_bytes: float, unit: str | None = None) -> str:
    """Format a byte count in binary units, e.g. ``"512 KiB"``, ``"1 GiB"``, ``"175 MiB"``.

    ``unit`` forces one of ``"bytes"``, ``"KiB"``, ``"MiB"``, ``"GiB"``; by default the largest
    unit in which the value is at least 1 is chosen. Up to 2 decimals, trailing zeros dropped.

    Raises
    ------
    FieldError (field ``unit``) for any other unit.
    """
    if unit is None:
        unit = "bytes"
        for name in ("GiB", "MiB", "KiB"):
            if abs(n_bytes) >= _SCALES[name]:
                unit = name
                break
    if unit not in _SCALES:
        raise FieldError("unit", f" = {unit!r} must be one of {', '.join(_SCALES)}")
    value = n_bytes / _SCALES[unit]
    if unit == "bytes":
        return f"{value:,.0f} bytes" if float(value).is_integer() else f"{value:,.2f} bytes"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"


def bytes_in_units(n_bytes: float) -> dict[str, float]:
    """The same quantity in bytes, KiB, MiB and GiB (binary), for JSON output."""
    return {"bytes": n_bytes, "KiB": n_bytes / KIB, "MiB": n_bytes / MIB, "GiB": n_bytes / GIB}
