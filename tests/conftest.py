"""Shared pytest set-up: make the repository root importable (allocator, kernels, pages)."""
import os
import sys

import pytest

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
    """The text a reader sees of Markdown that ``allocator.common.validate.plain_markdown`` wrote: its
    backslash escapes undone, its code spans around ``--`` and the like unwrapped and its zero-width
    spaces dropped (for asserting on message words)."""
    import re
    markdown = re.sub(r"`(<->|->|<-|--|>=|<=|~=)`", r"\1", markdown)
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown).replace("\u200b", "")


#: What Streamlit's Markdown renderer replaces in text (not in code spans) when it stands between
#: spaces: the pairs of its frontend's StreamlitMarkdown (bundled as static/js/StreamlitMarkdown*.js).
STREAMLIT_TYPOGRAPHY = (("<->", "\u2194"), ("->", "\u2192"), ("<-", "\u2190"), ("--", "\u2014"), (">=", "\u2265"),
                        ("<=", "\u2264"), ("~=", "\u2248"))


def rendered(markdown: str) -> str:
    """The text a reader sees of ``markdown`` in Streamlit: outside inline code, the typographic
    replacements of :data:`STREAMLIT_TYPOGRAPHY` applied as the frontend does, then the escapes undone
    and code spans unwrapped. For checking that a command such as ``git checkout -- file`` survives."""
    import re
    out = []
    for i, part in enumerate(re.split(r"(?<!\\)`([^`]*)`", markdown)):
        if i % 2 == 0:                     # escapes are undone before the replacements (a text node's value)
            part = re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", part)
            for sign, shown in STREAMLIT_TYPOGRAPHY:
                part = re.sub(rf"(^|\s){re.escape(sign)}(\s|$)", rf"\g<1>{shown}\g<2>", part)
        out.append(part)
    return "".join(out).replace("\u200b", "")


@pytest.fixture(scope="session")
def default_site(tmp_path_factory):
    """The default scenario's static site, written once a run by ``python -m allocator export-site``
    (its slowest part, ``allocator.viz.export.site.build_data``, takes about 16 s on 2 cores), with the data
    that run built. Returns ``(folder, data)``: the written folder (a ``pathlib.Path``) and
    ``build_data(Scenario())``'s dict exactly as export-site made it (before ``build_site`` copied it
    to add the attribution). Shared by tests/core/test_site.py and tests/browser/test_site_browser.py,
    which used to build the same site twice (and the data a third time)."""
    import contextlib
    import io

    import allocator.viz.export.site as site
    from allocator.__main__ import main as cli_main

    built = []

    def recording(sc, **kwargs):
        built.append(real(sc, **kwargs))
        return built[-1]

    real = site.build_data
    out = tmp_path_factory.mktemp("site") / "lesson"
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(io.StringIO()):
        mp.setattr(site, "build_data", recording)
        assert cli_main(["export-site", str(out)]) == 0
    assert len(built) == 1
    return out, built[0]


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist (``-n 2 --dist loadgroup``), keep the tests that share a one-time fixture on
    one worker each, so it is built once a run: group "site" for every test of the exported default
    site (the ``default_site`` fixture: tests/core/test_site.py, tests/browser/test_site_browser.py),
    group "browser" for the other browser tests (the app server of tests/browser/conftest.py). Two
    groups, not one, so the two workers can each take one (one group of both was the longest
    stretch of a run). Without xdist the marks do nothing."""
    browser = pytest.mark.xdist_group("browser")
    site = pytest.mark.xdist_group("site")
    # the paper replication, its Figure 13 spread over ten seeds and the section 7 ablations are memoised
    # per process (allocator.studies.paper.spread_for, allocator.studies.ablations.ablations_for): the
    # tests that read them share one worker, so each is computed once a run, not once per worker
    paper = pytest.mark.xdist_group("paper")
    for item in items:
        if "default_site" in getattr(item, "fixturenames", ()):
            item.add_marker(site)
        elif "tests/browser/" in item.nodeid:
            item.add_marker(browser)
        elif "tests/core/test_paper.py" in item.nodeid or _reads_the_paper(item):
            item.add_marker(paper)


def _reads_the_paper(item) -> bool:
    """Whether a test's own code calls one of the memoised paper computations (or the page button that does)."""
    import inspect

    try:
        source = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return False
    return any(name in source for name in ("replication_for", "spread_for", "ablations_for", "paper_replication"))


def assert_metrics_csv_adds_up(df, out: dict, kinds) -> None:
    """Each allocator's per-step rows of the metrics CSV ``df`` (from :func:`read_metrics_csv`) add up
    to ``simulate --json``'s summary ``out[kind]``: steps, peaks, finished, preemptions, swapped
    blocks, recomputed tokens, mean tokens per step and mean utilisation, each row weighted by the
    steps it covers."""
    import numpy as np

    span = df["steps covered"].to_numpy()
    for kind in kinds:
        s = out[kind]
        ran = df[f"{kind} running (sequences)"].notna().to_numpy()

        def col(name, unit):
            return df[f"{kind} {name} ({unit})"].to_numpy(dtype=float)[ran]

        def total(name, unit):
            return int(np.sum(col(name, unit) * span[ran]))

        assert int(span[ran].sum()) == s["steps"], kind
        assert int(col("running", "sequences").max()) == s["peak_running"], kind
        assert int(col("used_slots", "slots").max()) == s["peak_used_slots"], kind
        assert int(col("finished", "requests").max()) == s["finished"], kind
        assert total("preemptions", "sequences this step") == s["preemptions"], kind
        assert total("swapped_blocks", "blocks this step") == s["swapped_blocks"], kind
        assert total("recomputed_tokens", "tokens this step") == s["recomputed_tokens"], kind
        assert round(total("tokens", "tokens this step") / s["steps"], 4) == s["mean_tokens_per_step"], kind
        util = np.sum(col("utilization", "fraction of pool") * span[ran]) / s["steps"]
        assert util == pytest.approx(s["mean_utilization"], abs=1e-6), kind


def read_metrics_csv(source):
    """The metrics CSV as a user reads it: plain ``pandas.read_csv`` (no ``comment=``, no skipped rows).
    ``source``: a path or the CSV text. Returns (the frame without its ``scenario`` column, the
    scenario text from that column's first row, or None for a CSV written without a scenario)."""
    import io as _io

    import pandas as pd
    df = pd.read_csv(_io.StringIO(source) if isinstance(source, str) and "\n" in source else source)
    if "scenario" not in df.columns:
        return df, None
    assert list(df.columns)[-1] == "scenario"
    assert df["scenario"].iloc[1:].isna().all()           # the name once, in the first row
    return df.drop(columns="scenario"), df["scenario"].iloc[0]
