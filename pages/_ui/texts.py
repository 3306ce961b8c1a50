"""Moved to :mod:`allocator.viz.texts` (the exported site quotes them too); re-exported here so the
pages' imports keep working."""
from allocator.viz.texts import COPY_ON_WRITE, COPY_ON_WRITE_SHORT  # noqa: F401
