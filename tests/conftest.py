"""Shared pytest set-up: make the repository root importable (allocator, kernels, pages)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

#: Absolute path of the Streamlit entry point (AppTest resolves relative paths against the caller).
APP_PATH = os.path.join(ROOT, "app.py")


def metric(at, label):
    """Values of every ``st.metric`` with this label in an AppTest run, in page order."""
    return [m.value for m in at.metric if m.label == label]


def open_page(page_file: str, state: dict | None = None, timeout: float = 120):
    """Run one page of the app in AppTest with ``state`` put in session state first; asserts it
    raised nothing. ``page_file``: e.g. ``"pages/throughput.py"``."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP_PATH, default_timeout=timeout)
    at.switch_page(page_file)
    for key, value in (state or {}).items():
        at.session_state[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def markdown_text(at) -> str:
    """Every st.markdown of an AppTest run, joined by newlines."""
    return "\n".join(m.value for m in at.markdown)


def seen(markdown: str) -> str:
    """The text a reader sees of Markdown that ``allocator.validate.plain_markdown`` wrote: its
    backslash escapes undone and its zero-width spaces dropped (for asserting on message words)."""
    import re
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u200b", "")
