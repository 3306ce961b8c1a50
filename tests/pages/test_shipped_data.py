"""Issue 19: with a shipped data file missing, truncated or corrupt, every page that needs it names
the file relative to the project and what to do -- no traceback, no absolute server path -- and the
pages that do not need it keep working.

The real assets are never touched: each case copies the file (or not) into a temporary folder and
points the loader at the copy (``allocator.workloads.trace.AZURE_TRACE``, ``allocator.workloads.mooncake.MOONCAKE_TRACE``),
with every in-process and Streamlit cache cleared so nothing read earlier hides the damage.
"""
from __future__ import annotations

import os

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import allocator.workloads.mooncake as mooncake
import allocator.workloads.trace as trace
from allocator.__main__ import main
from pages._ui import heavy
from tests.conftest import APP_PATH, ROOT, metric, seen

FILES = {"azure": ("AZURE_TRACE", trace, "assets/azure_llm_conv_2023.csv"),
         "mooncake": ("MOONCAKE_TRACE", mooncake, "assets/mooncake_conversation_trace.jsonl.gz")}
DAMAGES = ("missing", "truncated", "corrupt")
#: The pages that read each file, and a state that makes them read it.
NEEDS = {"azure": [("pages/explainer.py", {"workload": "azure-conv"}), ("pages/throughput.py", {})],
         "mooncake": [("pages/prefix_cache.py", {})]}
#: A page that must keep working when the other file is damaged: (page, params, a metric it shows).
OTHERS = {"azure": ("pages/prefix_cache.py", {}), "mooncake": ("pages/explainer.py", {"workload": "azure-conv"})}


def _damage(src: str, dst: str, how: str) -> None:
    """Write a damaged copy of ``src`` to ``dst`` (or nothing, for "missing")."""
    if how == "missing":
        return
    data = open(src, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2 + 7]                  # mid-row / mid-stream
        assert not data.endswith(b"\n")
    else:
        mid = len(data) // 2
        data = data[:mid] + bytes(range(256)) * 4 + data[mid + 1024:]
    with open(dst, "wb") as fh:
        fh.write(data)


@pytest.fixture
def damaged(tmp_path, monkeypatch, request):
    """(which file, how) -> the loader points at a damaged copy; caches cleared before and after."""
    which, how = request.param
    attr, module, _ = FILES[which]
    dst = tmp_path / os.path.basename(getattr(module, attr))
    _damage(getattr(module, attr), str(dst), how)
    monkeypatch.setattr(module, attr, str(dst))

    def clear():
        trace._CACHE.clear()
        mooncake._CACHE.clear()
        st.cache_data.clear()
        st.cache_resource.clear()
        heavy.STORE.clear()
    clear()
    yield which, how, str(tmp_path)
    clear()


def _run(page: str, params: dict) -> AppTest:
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    for k, v in params.items():
        at.query_params[k] = v
    at.switch_page(page)
    at.run()
    return at


def _texts(at: AppTest) -> list[str]:
    return [seen(e.value) for kind in ("error", "warning", "info", "markdown", "caption")
            for e in getattr(at, kind)]


CASES = [(w, h) for w in FILES for h in DAMAGES]


@pytest.mark.parametrize("damaged", CASES, indirect=True, ids=[f"{w}-{h}" for w, h in CASES])
def test_each_page_names_the_damaged_file_and_the_rest_work(damaged):
    which, how, tmp = damaged
    name = FILES[which][2]
    for page, params in NEEDS[which]:
        at = _run(page, params)
        assert not at.exception, (page, [e.value for e in at.exception])
        texts = _texts(at)
        said = [t for t in texts if f"the shipped data file {name}" in t]
        assert said, (page, [e.value for e in at.error])
        assert any(("missing" if how == "missing" else "damaged") in t and "git checkout -- " + name in t
                   for t in said), said
        for t in texts:
            assert tmp not in t and ROOT not in t, (page, t[:300])         # no server path
            assert "Traceback" not in t
    if how != "missing":
        return                                  # the other page's check needs one damage kind only
    page, params = OTHERS[which]
    at = _run(page, params)
    assert not at.exception and not [e for e in at.error if "shipped data file" in e.value]
    assert at.get("plotly_chart") or metric(at, "Steps to drain"), page


@pytest.mark.parametrize("damaged", [("azure", "missing"), ("mooncake", "corrupt")], indirect=True,
                         ids=["azure-missing", "mooncake-corrupt"])
def test_the_explainers_default_lesson_runs_without_the_data(damaged):
    at = _run("pages/explainer.py", {})
    assert not at.exception and not at.error
    assert metric(at, "Steps to drain")


@pytest.mark.parametrize("damaged", [("azure", "truncated")], indirect=True, ids=["azure-truncated"])
def test_the_cli_names_the_damaged_file_plainly(damaged, capsys):
    code = main(["simulate", "--workload", "azure-conv"])
    err = capsys.readouterr().err
    assert code != 0 and "the shipped data file assets/azure_llm_conv_2023.csv" in err and "damaged" in err, err
    assert damaged[2] not in err and "Traceback" not in err
