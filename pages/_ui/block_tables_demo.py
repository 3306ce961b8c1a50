"""Moved to :mod:`allocator.viz.block_tables_demo` (no streamlit; the exported static site draws it too).
This name is the same module, so the page's and the tests' imports keep working."""
import sys

from allocator.viz import block_tables_demo as _moved

sys.modules[__name__] = _moved
