"""Shared ground of the core: the one error type, input validation and limits, number formats, metric names, paths."""
