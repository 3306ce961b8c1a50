"""Byte units of the lesson: binary multiples only, and how the app writes them.

Every multiple is *binary*: ``KiB = 2**10``, ``MiB = 2**20``, ``GiB = 2**30`` bytes. The lesson
writes "KB", "MB", "GB" for these same binary quantities (for example "512 KB per token" in
``assets/reference_figures.md`` R5 is 524,288 bytes = 512 KiB, and the PagedAttention paper's
"800 KB" for OPT-13B is 819,200 bytes = 800 KiB). Nothing in the accounting package
uses decimal kB/MB/GB.
"""
from __future__ import annotations

# The multiples live in allocator.common.formats (one module writes every number the app shows).
from allocator.common.formats import GIB, KIB, MIB


def bytes_in_units(n_bytes: float) -> dict[str, float]:
    """The same quantity in bytes, KiB, MiB and GiB (binary), for JSON output."""
    return {"bytes": n_bytes, "KiB": n_bytes / KIB, "MiB": n_bytes / MIB, "GiB": n_bytes / GIB}
