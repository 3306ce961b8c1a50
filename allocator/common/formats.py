"""How the app writes a number: percentages, ratios, counts with their noun, durations, rates and
byte sizes. One module, so a figure reads the same on every page, export and CLI line.

Pure Python (no numpy, not even through an import: ``kernels.gpu_check`` runs on a GPU machine whose
python may lack it; FieldError comes from the numpy-free ``allocator.common.errors``): the core, ``allocator.viz``, the pages and ``kernels/`` may all import it.
"""
from __future__ import annotations

from decimal import Decimal

from allocator.common.errors import FieldError


#: Binary byte multiples (the lesson's: the PagedAttention paper's "800 KB" for OPT-13B is
#: 819,200 bytes = 800 KiB).
KIB = 1024
MIB = 1024 ** 2
GIB = 1024 ** 3
_BINARY = {"bytes": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB}
#: Decimal multiples, for measured working sets and cache sizes (what CPU and GPU datasheets print).
_DECIMAL = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))


def pct(fraction: float | None, digits: int = 0) -> str:
    """A fraction as a percentage with enough figures to stay true: ``0.314 -> "31 %"``,
    ``0.034 -> "3.4 %"``, ``0.0012 -> "0.12 %"``, ``0 -> "0 %"``; "—" when there is none."""
    if fraction is None:
        return "—"
    v = 100 * fraction
    if v and abs(v) < 1:
        return f"{v:.2g} %"
    if abs(v) < 10 and round(v, digits) != round(v, 1):
        return f"{v:.1f} %"
    return f"{v:.{digits}f} %"


def pct_fixed(fraction: float, digits: int = 1) -> str:
    """A fraction as a percentage with a fixed number of decimals: ``0.3142 -> "31.4 %"``
    (for tables whose column should line up; :func:`pct` for sentences)."""
    return f"{100 * fraction:.{digits}f} %"


def ratio(x: float) -> str:
    """A ratio such as a speed-up with enough figures to stay true: ``3.04 -> "3.0x"``,
    ``0.253 -> "0.25x"``, ``38.4 -> "38x"``."""
    if x >= 10:
        return f"{x:.0f}x"
    if x >= 1:
        return f"{x:.1f}x"
    return f"{x:.2g}x"


def and_list(items) -> str:
    """``["a"]`` -> ``"a"``, ``["a", "b"]`` -> ``"a and b"``, ``[4, 8, 16]`` -> ``"4, 8 and 16"``."""
    items = [str(i) for i in items]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``"1 token"``, ``"2 tokens"``, ``"1,024 steps"`` (counts always as integers; ``nouns`` for an
    irregular plural)."""
    n = int(n)
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def seconds(x: float | None) -> str:
    """A duration as the pages print it: ``0.0213 -> "21.3 ms"``, ``0.033 -> "33.0 ms"``, ``1.234 -> "1.23 s"``,
    ``0.0004 -> "0.4 ms"``, ``30.98 -> "31.0 s"``, ``16_600.4 -> "16,600 s"``; "—" when there is
    none. Seconds keep their decimals, so two durations side by side are written alike."""
    if x is None:
        return "—"
    if x == 0:
        return "0 s"
    if x < 1:
        # three significant figures, trailing zeros kept: 0.0330 reads "33.0 ms" beside "32.5 ms",
        # never "33 ms" (issue 40); below 1 ms, as before ("0.4 ms")
        ms = x * 1000
        if ms >= 100:
            return f"{ms:.0f} ms"
        if ms >= 10:
            return f"{ms:.1f} ms"
        return f"{ms:.2f} ms" if ms >= 1 else f"{ms:.3g} ms"
    if x >= 100:
        return f"{x:,.0f} s"
    # fixed decimals, not significant figures: 30.98 s reads "31.0 s" beside "30.6 s", never "31 s"
    return f"{x:.1f} s" if x >= 10 else f"{x:.2f} s"


def shown_value(text: str) -> Decimal:
    """The number a displayed figure reads, exactly as shown: ``"1,234 s" -> Decimal("1234")``,
    ``"21.3 ms" -> Decimal("0.0213")`` (durations in seconds), ``"31 %" -> Decimal("31")``,
    ``"26.0" -> Decimal("26.0")``. The exponent keeps the shown precision, so a difference of two
    shown values is written to the finer of the two.

    Raises:
        ValueError: ``text`` is not a number with an optional unit "s", "ms" or "%".
    """
    number, _, unit = text.replace(",", "").replace("\u2212", "-").strip().partition(" ")
    value = Decimal(number)
    if unit == "ms":
        return value.scaleb(-3)
    if unit in ("", "s", "%"):
        return value
    raise ValueError(f"not a displayed figure: {text!r}")


def shown_difference(shown: str, other: str) -> Decimal:
    """``shown`` minus ``other``, both as displayed (:func:`shown_value`): the difference a reader
    gets by subtracting the two figures on the screen, so a delta beside rounded figures never
    disagrees with them ("68.7 s" and "13.4 s" differ by 55.3 s, even when the unrounded figures
    differ by 55.36 s)."""
    return shown_value(shown) - shown_value(other)


def seconds_difference(shown: str, other: str) -> str:
    """:func:`shown_difference` of two :func:`seconds` texts as a signed duration written with the
    finer precision of the two: ``("13.4 s", "68.7 s") -> "−55.3 s"``, ``("1.23 s", "900 ms") ->
    "+330 ms"``; "" when they read the same. The sign is a typographic minus (for sentences)."""
    d = shown_difference(shown, other)
    if not d:
        return ""
    sign, m = ("+" if d > 0 else "\u2212"), abs(d)
    decimals = max(0, -m.as_tuple().exponent)
    if m >= 1:
        return f"{sign}{m:,.{decimals}f} s"
    return f"{sign}{m.scaleb(3):,.{max(0, decimals - 3)}f} ms"


def rate(x: float) -> str:
    """A request rate: two decimals (``1.8053 -> "1.81"``), requests per second."""
    return f"{x:.2f}"


def format_bytes(n_bytes: float, unit: str | None = None) -> str:
    """A byte count in binary units, e.g. ``"512 KiB"``, ``"1 GiB"``, ``"175 MiB"`` (the lesson's
    sizes: KV per token, pools, weights).

    ``unit`` forces one of ``"bytes"``, ``"KiB"``, ``"MiB"``, ``"GiB"``; by default the largest
    unit in which the value is at least 1 is chosen. Up to 2 decimals, trailing zeros dropped.

    Raises:
        FieldError (field ``unit``): any other unit.
    """
    if unit is None:
        unit = "bytes"
        for name in ("GiB", "MiB", "KiB"):
            if abs(n_bytes) >= _BINARY[name]:
                unit = name
                break
    if unit not in _BINARY:
        raise FieldError("unit", f" = {unit!r} must be one of {', '.join(_BINARY)}")
    value = n_bytes / _BINARY[unit]
    if unit == "bytes":
        return f"{value:,.0f} bytes" if float(value).is_integer() else f"{value:,.2f} bytes"
    text = f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{text} {unit}"


def format_bytes_decimal(n: float) -> str:
    """``n`` bytes in decimal units, three significant figures: ``"67.1 MB"``, ``"1.07 GB"``,
    ``"16.4 kB"``, ``"512 B"`` (measured working sets and cache sizes, as hardware reports them)."""
    for unit, size in _DECIMAL:
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"
