"""The kernels' bad-input error: the core's :class:`allocator.validate.FieldError`.

kernels/ raises it as the core does, so a page or a CLI reads which input was wrong from
``.field`` and never from the message text. ``python3 -m kernels.gpu_check`` runs on a GPU
machine whose python3 may have torch and Triton but no numpy (torch does not require it), and
the core's validation module imports numpy; there a stand-in with the same constructor,
attributes and message is defined instead (still a ``ValueError``). Never imports streamlit.
"""
from __future__ import annotations

try:
    from allocator.validate import FieldError
except ImportError:                      # torch + Triton only: the core's module needs numpy
    class FieldError(ValueError):  # type: ignore[no-redef]
        """Stand-in for :class:`allocator.validate.FieldError` (same arguments, attributes and
        message: ``subject + problem``) where numpy, and so the core, cannot be imported."""

        def __init__(self, field: str, problem: str, *, index: int | None = None, subject: str | None = None):
            self.field = field
            self.index = index
            self.subject = subject if subject is not None else (field if index is None else f"{field}[{index}]")
            self.problem = problem
            super().__init__(self.subject + problem)

        def reworded(self, label: str) -> str:
            """The message with the subject replaced by ``label`` (a flag's or a control's name)."""
            return label + self.problem

__all__ = ["FieldError"]
