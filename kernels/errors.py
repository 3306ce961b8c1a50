"""The kernels' bad-input error: the core's :class:`allocator.common.errors.FieldError`.

kernels/ raises it as the core does, so a page or a CLI reads which input was wrong from
``.field`` and never from the message text. It comes from :mod:`allocator.common.errors`, which imports
nothing beyond the standard library, so ``python3 -m kernels.gpu_check`` still runs on a GPU
machine whose python3 has torch and Triton but no numpy. :func:`read_json` reads the records
kernel tools write, naming the file when one is damaged. Never imports streamlit.
"""
from __future__ import annotations

import json
from pathlib import Path

from allocator.common.errors import FieldError

__all__ = ["FieldError", "read_json"]


def read_json(path: Path):
    """The parsed contents of a JSON record a kernel tool wrote (a compile record, a GPU check, a
    recorded sweep), for its loader to check the shape of.

    Raises:
        FieldError (``file``; the message starts with the file's name): unreadable or not JSON.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FieldError("file", f": not readable JSON ({exc})", subject=Path(path).name) from None
