"""The lesson's arithmetic, moving from ``allocator/accounting.py`` into a package split by lesson.

This step only moves the module to ``allocator/accounting/memory.py`` (so its history follows the
part that keeps the capacity arithmetic) and re-exports its public names unchanged.
"""
from .memory import *  # noqa: F401,F403
