"""Issue 42: the ShareGPT lengths file (``assets/sharegpt_opt_lengths_filtered.csv.gz``) missing,
truncated or corrupt is named relative to the project, with what to do, wherever it is read: the
command line, the home page's sharegpt-opt workload, the Throughput page's sweep and its paper
replication -- no Python exception, no server path. (Issue 19 fixed this kind for the other shipped
files: ``tests/pages/test_shipped_data.py``.)

The real file is never touched: each case points the loader at a damaged copy in a temporary folder.
"""
from __future__ import annotations

import os

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import allocator.studies.paper as paper
import allocator.workloads.sharegpt as sharegpt
from allocator.__main__ import main
from allocator.workloads.trace import ShippedDataError
from pages._ui import heavy
from tests.conftest import APP_PATH, ROOT, rendered, seen
from tests.pages.test_shipped_data import DAMAGES, _damage

NAME = "assets/sharegpt_opt_lengths_filtered.csv.gz"


@pytest.fixture(params=DAMAGES)
def damaged(tmp_path, monkeypatch, request):
    how = request.param
    dst = tmp_path / os.path.basename(sharegpt.SHAREGPT_FILE)
    _damage(sharegpt.SHAREGPT_FILE, str(dst), how)
    monkeypatch.setattr(sharegpt, "SHAREGPT_FILE", str(dst))
    monkeypatch.setattr(paper, "_MEMO", {})             # a replication computed earlier would hide the damage

    def clear():
        sharegpt._CACHE.clear()
        st.cache_data.clear()
        st.cache_resource.clear()
        heavy.STORE.clear()
    clear()
    yield how, str(tmp_path)
    clear()


def _said(texts: list[str], how: str, tmp: str) -> list[str]:
    for t in texts:
        assert tmp not in t and ROOT not in t, t[:300]            # no server path
        assert "Traceback" not in t and "Error" not in t, t[:300]  # no Python words
    said = [t for t in texts if f"the shipped data file {NAME}" in t]
    assert said and all(("missing" if how == "missing" else "damaged") in t and f"git checkout -- {NAME}" in t
                        for t in said), texts
    return said


def test_the_loader_names_the_file(damaged):
    how, tmp = damaged
    with pytest.raises(ShippedDataError) as info:
        sharegpt.sharegpt_lengths()
    assert info.value.path == NAME
    _said([str(info.value)], how, tmp)
    assert "\n" not in str(info.value)


def test_the_cli_names_the_file_plainly(damaged, capsys):
    how, tmp = damaged
    code = main(["simulate", "--workload", "sharegpt-opt"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    _said([err], how, tmp)


def _texts(at: AppTest) -> list[str]:
    return [seen(e.value) for kind in ("error", "warning", "info", "markdown", "caption") for e in getattr(at, kind)]


def test_the_home_page_names_the_file(damaged):
    how, tmp = damaged
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["workload"] = "sharegpt-opt"
    at.switch_page("pages/explainer.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    _said(_texts(at), how, tmp)


def test_the_throughput_sweep_and_the_paper_replication_name_the_file(damaged):
    how, tmp = damaged
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.switch_page("pages/throughput.py")
    at.session_state["tp_workload"] = "sharegpt-opt"
    at.session_state["tp_paper"] = True
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    said = _said([seen(e.value) for e in at.error], how, tmp)
    assert any(t.startswith("The paper replication cannot run: ") for t in said), said
    assert any(t.startswith("These settings cannot run: ") for t in said), said


def test_the_restore_command_survives_streamlits_typography(damaged):
    """Streamlit's renderer turns a ``--`` between spaces into an em dash, so the shown
    ``git checkout -- file`` failed when copied; the message keeps it in code, and what a reader sees
    (the frontend's replacements applied to the page's Markdown) holds the command exactly."""
    how, tmp = damaged
    if how != "missing":
        pytest.skip("one damage is enough: the command is the same for every one")
    at = AppTest.from_file(APP_PATH, default_timeout=120)
    at.query_params["workload"] = "sharegpt-opt"
    at.switch_page("pages/explainer.py")
    at.run()
    assert not at.exception
    sources = [e.value for kind in ("error", "warning", "info") for e in getattr(at, kind)
               if f"shipped data file" in seen(e.value)]
    assert sources and all(f"git checkout -- {NAME}" in rendered(s) and "\u2014" not in rendered(s)
                           for s in sources), sources
