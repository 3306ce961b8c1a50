"""The kernels' bad-input error: the core's :class:`allocator.errors.FieldError`.

kernels/ raises it as the core does, so a page or a CLI reads which input was wrong from
``.field`` and never from the message text. It comes from :mod:`allocator.errors`, which imports
nothing beyond the standard library, so ``python3 -m kernels.gpu_check`` still runs on a GPU
machine whose python3 has torch and Triton but no numpy. Never imports streamlit.
"""
from __future__ import annotations

from allocator.errors import FieldError

__all__ = ["FieldError"]
