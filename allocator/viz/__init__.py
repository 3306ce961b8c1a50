"""Plotly figures and the sentences beside them, built from allocator results (no streamlit).

Shared by the app's pages, the CLI (``python -m allocator export-html``), the benchmarks and the
tests, so every one of them draws and writes the same numbers. Nothing here imports streamlit or
``pages``: imports point one way, pages -> allocator, never back.
"""
