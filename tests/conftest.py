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
