"""Issue 42, the exports' kinds: what a user names (a file, a path) cannot change an export's code,
a spreadsheet's formulas or reveal where the file lay.

* Templates are filled in one pass: a file named ``{{SCRIPTS}}.csv`` put the site's script tags
  into its ``index.html`` when placeholders were replaced one after another.
* CSV injection: the metrics CSV's first line was unquoted text, so an upload named
  ``a,=HYPERLINK(...).csv`` became a formula cell, and "8,192 slots" split in two. Every text cell
  is now quoted and one that starts like a formula gets a leading apostrophe.
* A trace given by an absolute path (maybe under a home directory) is named in every export by
  its base name, or its path inside the project.
"""
from __future__ import annotations

import csv
import io

import pytest

from tests.conftest import read_metrics_csv
from allocator.engine.scenario import Scenario, build_workload, run_scenario
from allocator.viz.export.html import csv_text_cell, metrics_csv, scenario_summary
from allocator.viz.export.site import attribution_html, fill_template

TRACE = b"prompt_tokens,output_tokens\n10,5\n20,3\n"


def test_templates_are_filled_in_one_pass():
    page = "<title>{{TITLE}}</title><p>{{SUMMARY}}</p>{{SCRIPTS}}{{OTHER}}"
    out = fill_template(page, {"TITLE": "{{SCRIPTS}}", "SUMMARY": "{{TITLE}} {{SUMMARY}}", "SCRIPTS": "<script>"})
    assert out == "<title>{{SCRIPTS}}</title><p>{{TITLE}} {{SUMMARY}}</p><script>{{OTHER}}"
    assert out.count("<script>") == 1


def test_the_site_page_carries_a_placeholder_in_a_name_as_text(monkeypatch):
    """The site's index.html with an upload named like a placeholder: the script tags appear once."""
    import allocator.viz.export.site as site
    import allocator.viz.export.site_lessons as lessons
    monkeypatch.setattr(lessons, "lessons_data", lambda: {})
    sc = Scenario(workload="upload", trace_bytes=TRACE, trace_name="{{SCRIPTS}}{{TITLE}}.csv", total_slots=512,
                  max_new_tokens=64)
    data = {"meta": {"title": "{{SCRIPTS}} title", "summary": scenario_summary(sc, build_workload(sc))}}
    page = site.build_site(sc, data=data)["index.html"].decode("utf-8")
    scripts = page.count("<script src=")
    assert scripts == len(site.SCRIPTS) and "{{SCRIPTS}}{{TITLE}}.csv" in page and "{{SCRIPTS}} title" in page


@pytest.mark.parametrize("text, cell", [
    ("plain", '"plain"'), ("8,192 slots", '"8,192 slots"'), ('say "hi"', '"say ""hi"""'),
    ("=HYPERLINK(1)", "\"'=HYPERLINK(1)\""), ("+1", "\"'+1\""), ("-1", "\"'-1\""), ("@SUM(A1)", "\"'@SUM(A1)\""),
])
def test_a_text_cell_is_quoted_and_never_a_formula(text, cell):
    assert csv_text_cell(text) == cell


@pytest.mark.parametrize("name", ['a,=HYPERLINK("https://evil.example","x").csv', "=1+1.csv", '"q",@x.csv',
                                  "-2+3,+4.csv"])
def test_the_metrics_csv_has_no_formula_cell_and_reads_back(name):
    sc = Scenario(workload="upload", trace_bytes=TRACE, trace_name=name, total_slots=8192, max_new_tokens=64)
    results = run_scenario(sc)
    workload = build_workload(sc)
    text = metrics_csv(results, sc, workload)
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows[1]) == len(rows[0])                           # the name stays in one cell, "8,192 slots" too
    assert rows[1][-1] == "KV Cache Paging Lab: " + scenario_summary(sc, workload) and "8,192 slots" in rows[1][-1]
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "@")), cell
            assert not cell.startswith("-") or cell.lstrip("-").replace(".", "").isdigit(), cell
    df, named = read_metrics_csv(text)                          # plain pd.read_csv reads it back
    assert list(df.columns[:2]) == ["step", "steps covered"] and len(df) == len(rows) - 1 and named == rows[1][-1]


def test_an_absolute_trace_path_is_named_by_its_base_name(tmp_path, monkeypatch):
    home = tmp_path / "home" / "xyzzy-user" / "secret-project"
    home.mkdir(parents=True)
    path = home / "rows.csv"
    path.write_bytes(TRACE)
    sc = Scenario(workload=str(path), total_slots=512, max_new_tokens=64)
    workload = build_workload(sc)
    results = run_scenario(sc)
    texts = [scenario_summary(sc, workload), scenario_summary(sc), metrics_csv(results, sc, workload),
             attribution_html(sc), workload.name]
    from allocator.viz.explainer_chart import explainer_figure
    from allocator.viz.export.handout import handout_html
    from allocator.viz.export.html import animation_html
    texts += [animation_html(sc, workload, results, explainer_figure(results)), handout_html(sc, results, workload)]
    for text in texts:
        assert "xyzzy-user" not in text and "secret-project" not in text and str(tmp_path) not in text, text[:300]
    assert workload.name == "rows.csv" and scenario_summary(sc, workload).startswith("rows.csv, 512 slots")


def test_a_trace_inside_the_project_is_named_by_its_project_path():
    from allocator.workloads.trace import AZURE_TRACE
    sc = Scenario(workload=AZURE_TRACE, total_slots=8192, count=5)
    assert build_workload(sc).name == "assets/azure_llm_conv_2023.csv"
