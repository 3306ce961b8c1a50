"""The exported static site without a browser: the compact encodings round-trip, the sweep chart
put together in the page equals the builder's, the texts are escaped, the lesson's reveals quote
the run each step shows, the whole site fits 10 MB, and export-site refuses a bad destination
before building anything. (tests/browser/test_site_browser.py opens the site in Chromium.)"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator.__main__ import main as cli_main
from allocator.engine.scenario import (SWEEP_BLOCK_SIZES, Scenario, build_workload, run_scenario, scenario_sweep,
                                       scenario_sweeps)
from allocator.viz.explainer_chart import explainer_figure, for_projector
from allocator.viz.sweep_chart import sweep_figure, sweep_figures_json
from allocator.viz.claims.explainer import reservation_name, reveal
from allocator.viz.lesson import STEPS
from allocator.viz.export.markup import markdown_html
from allocator.viz.export.site import lesson_applies, site_bytes, site_zip, sweep_marker, with_marker
from allocator.viz.export.sitecodec import (PAD, decode_frames, decode_runs, encode_frames, encode_runs,
                                            plain_frames, pool_refs, resolve_refs)


# ------------------------------------------------------------------------------ encodings

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 9), st.data())
def test_runs_round_trip_any_map(rows, cols, data):
    codes = data.draw(st.lists(st.integers(0, 9), min_size=rows * cols, max_size=rows * cols))
    owners = data.draw(st.lists(st.integers(0, 40), min_size=rows * cols, max_size=rows * cols))
    z, owner = np.array(codes, np.int8).reshape(rows, cols), np.array(owners, np.int16).reshape(rows, cols)
    runs = encode_runs(z, owner)
    assert sum(runs[2::3]) == rows * cols and all(n > 0 for n in runs[2::3])
    assert decode_runs(runs, cols) == (z.tolist(), owner.tolist())


def test_runs_keep_padding_cells_as_none_and_merge_equal_neighbours():
    z = np.array([[1, 1, 2], [2, np.nan, np.nan]], np.float32)
    owner = np.array([[3, 3, 3], [3, 0, 0]], np.int16)
    runs = encode_runs(z, owner)
    assert runs == [1, 3, 2, 2, 3, 2, PAD, 0, 2]
    assert decode_runs(runs, 3) == ([[1, 1, 2], [2, None, None]], [[3, 3, 3], [3, 0, 0]])
    with pytest.raises(ValueError, match="shapes differ"):
        encode_runs(z, owner[:1])


@pytest.fixture(scope="module")
def default_run():
    sc = Scenario().checked()
    workload = build_workload(sc)
    return sc, workload, run_scenario(sc, workload)


def test_the_sweep_charts_at_every_cost_equal_those_drawn_directly(default_run):
    """``sweep_figures_json`` draws the first cost's chart and writes the others' cost parts into
    copies of it: each equals the chart drawn directly; a sweep whose runs differ is drawn whole."""
    sc, workload, results = default_run
    reserve, name = results["reserve_max"].summary, reservation_name(results)
    costs = [0.0, 0.75, 1.25, 3.0, 8.0]
    rows_by_cost = scenario_sweeps(sc, costs, workload)

    def drawn(rows, c):
        return json.loads(sweep_figure(rows, 64, c, reserve, name).to_json())

    got = sweep_figures_json(rows_by_cost, costs, 64, reserve, name)
    assert got == [drawn(rows_by_cost[c], c) for c in costs]
    assert len({json.dumps(g["layout"]["yaxis2"], sort_keys=True) for g in got}) > 1   # the cost axis did change
    odd = {**rows_by_cost, 3.0: [dict(r, steps=r["steps"] + 1) for r in rows_by_cost[3.0]]}
    assert sweep_figures_json(odd, costs, 64, reserve, name)[3] == drawn(odd[3.0], 3.0)


def test_frames_round_trip_the_explainer_figure_and_its_projector_form(default_run):
    _, _, results = default_run
    fig = explainer_figure(results).freeze()
    frames = fig.to_dict()["frames"]
    enc = encode_frames(frames)
    assert decode_frames(enc) == plain_frames(frames)
    present = for_projector(fig).to_dict()["frames"]
    enc_p = encode_frames(present)
    assert enc_p["maps"] == enc["maps"] and enc_p["texts"] == enc["texts"]
    assert enc_p["template"] != enc["template"]                     # only the readouts' font differs
    assert decode_frames(dict(enc, template=enc_p["template"])) == plain_frames(present)
    raw = len(json.dumps(frames))
    assert len(json.dumps(enc["maps"])) < raw / 10                  # the runs are what make the site small


def test_frames_that_do_not_share_a_layout_are_refused():
    frame = {"name": "0", "traces": [0], "data": [{"z": [[1]], "customdata": [[1]]}],
             "layout": {"annotations": [{"text": "a", "x": 0}], "shapes": [{"x0": 0, "x1": 0}]}}
    other = json.loads(json.dumps(frame))
    other["layout"]["annotations"][0]["x"] = 1
    with pytest.raises(ValueError, match="does not share"):
        encode_frames([frame, other])


_json = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=4),
                     max_leaves=30)


@settings(max_examples=60, deadline=None)
@given(_json, st.integers(1, 40))
def test_pool_refs_round_trip(tree, min_chars):
    doubled = {"a": tree, "b": [tree, {"c": tree}]}
    packed, pool = pool_refs(doubled, min_chars=min_chars)
    assert resolve_refs(packed, pool) == doubled


def test_pool_refs_stores_a_repeated_subtree_once():
    big = {"x": list(range(100))}
    packed, pool = pool_refs({"a": big, "b": [big, big]})
    assert packed == {"a": {"$ref": 0}, "b": [{"$ref": 0}, {"$ref": 0}]}
    assert json.dumps(pool).count("99") == 1 and resolve_refs(packed, pool) == {"a": big, "b": [big, big]}
    with pytest.raises(ValueError, match=r"\$ref"):
        pool_refs({"$ref": 1})


# ------------------------------------------------------------------------------ texts

def test_markdown_html_escapes_before_it_formats():
    out = markdown_html('<script>alert("x")</script> **bold** *it* `code`\n\n- one & two\n- <b>three</b>')
    assert "<script>" not in out and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in out
    assert "<strong>bold</strong>" in out and "<em>it</em>" in out and "<code>code</code>" in out
    assert "<ul><li>one &amp; two</li><li>&lt;b&gt;three&lt;/b&gt;</li></ul>" in out


def test_a_trace_file_name_reaches_the_site_only_escaped(tmp_path):
    from allocator.viz.export.site import attribution_html
    sc = Scenario(workload="upload", trace_name='<img src=x onerror="alert(1)">.csv', trace_bytes=b"x")
    out = attribution_html(sc)
    assert "<img" not in out and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;.csv" in out


# ------------------------------------------------------------------------------ the data

@pytest.fixture(scope="module")
def data(default_site):
    """``build_data(Scenario())``, as the run's one ``export-site`` built it (tests/conftest.py)."""
    return default_site[1]


def test_every_block_size_of_the_sweep_is_there_with_the_cards_of_its_own_run(data, default_run):
    sc, workload, _ = default_run
    assert data["meta"]["block_sizes"] == list(SWEEP_BLOCK_SIZES)
    assert set(data["cards"]["main"]) == {str(b) for b in SWEEP_BLOCK_SIZES}
    for bs in (1, 256):
        s = run_scenario(dataclasses.replace(sc, block_size=bs), workload, record_snapshots=False)["paged"].summary
        cards = data["cards"]["main"][str(bs)]["paged"]["cards"]
        assert cards[0]["value"] == f"{s.mean_running_busy:.1f}" and cards[2]["value"] == f"{s.steps:,}"
    assert data["meta"]["costs"][0] == 0 and data["meta"]["costs"][-1] == 8 and len(data["meta"]["costs"]) == 33


def test_the_sweep_chart_put_together_in_the_page_equals_the_builders(data, default_run):
    sc, workload, results = default_run
    reserve, name = results["reserve_max"].summary, reservation_name(results)
    costs = data["meta"]["costs"]
    for bs, c in ((1, 0.0), (16, 1.25), (256, 8.0)):
        rows = scenario_sweep(dataclasses.replace(sc, metadata_cost=c), workload)
        want = json.loads(sweep_figure(rows, bs, c, reserve, name).to_json())
        got = json.loads(json.dumps(data["sweep"]["main"]["curves"][costs.index(c)]))
        got = with_marker(got, data["sweep"]["main"]["marker"][str(bs)])
        assert got == want, (bs, c)
    with pytest.raises(ValueError, match="no shape"):
        unmarked = sweep_figure([], 16, 0.0)
        unmarked.layout.shapes = ()
        sweep_marker(unmarked)


def test_each_lesson_step_shows_its_scenario_and_reveals_from_that_run(data, default_run):
    sc, workload, _ = default_run
    steps = data["lesson"]["steps"]
    assert [s["title"] for s in steps] == [s["title"] for s in STEPS]
    views = [(s["view"]["block_size"], s["view"]["variant"]) for s in steps]
    assert views == [(16, "main"), (16, "main"), (16, "main"), (256, "main"), (16, "prefix")]
    rows = scenario_sweep(sc, workload)
    at256 = run_scenario(dataclasses.replace(sc, block_size=256), workload, record_snapshots=False)
    assert steps[3]["reveal_html"]["main"]["256"] == markdown_html(
        reveal("big_blocks", at256, slots=sc.slots, max_new=sc.max_new, sweep_rows=rows))
    prefix = Scenario(shared_prefix=256).checked()
    wp = build_workload(prefix)
    with_prompt = run_scenario(prefix, wp, record_snapshots=False)
    assert steps[4]["reveal_html"]["prefix"]["16"] == markdown_html(
        reveal("prefix", with_prompt, slots=prefix.slots, max_new=prefix.max_new,
               sweep_rows=scenario_sweep(prefix, wp)))
    assert "<strong>" in steps[3]["reveal_html"]["main"]["256"]


def test_the_details_table_at_each_cost_is_put_back_exactly(data, default_run):
    from allocator.viz.claims.explainer import details_rows
    from allocator.viz.export.site import join_rows
    _, _, results = default_run
    split = data["details"]["main"]["16"]
    assert len(split["vary"]) == 1                                   # only the cost row changes with c
    for k in (0, 5, 32):
        assert join_rows(split, k) == details_rows(results, data["meta"]["costs"][k])


def test_the_lesson_comes_only_with_its_own_scenario():
    assert lesson_applies(Scenario()) and lesson_applies(Scenario(block_size=64, metadata_cost=2.0))
    assert not lesson_applies(Scenario(total_slots=4096)) and not lesson_applies(Scenario(workload="azure-conv"))


# ------------------------------------------------------------------------------ the folder and the CLI

@pytest.fixture(scope="module")
def files(default_site):
    """``build_site(Scenario())``'s files as ``export-site`` wrote them: {relative path: bytes}."""
    folder = default_site[0]
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_the_default_site_fits_10_mb_and_loads_only_its_own_files(files):
    assert site_bytes(files) <= 10_000_000
    assert set(files) == {"index.html", "plotly.min.js", "site.js", "site.css", "data/site-data.js",
                          "data/lessons-data.js"}
    page = files["index.html"].decode()
    for name in ("plotly.min.js", "data/site-data.js", "data/lessons-data.js", "site.js", "site.css"):
        assert f'"{name}"' in page
    assert "http" not in page and "http" not in files["site.js"].decode() and "fetch(" not in files["site.js"].decode()
    assert files["data/site-data.js"].startswith(b"window.KV_SITE = {")
    assert "KV Cache Paging Lab" in files["data/site-data.js"].decode()        # attribution travels with it
    with zipfile.ZipFile(io.BytesIO(site_zip(files))) as zf:
        # files, plus an entry per folder (which carries the folder's 0755 for a static host)
        assert sorted(n for n in zf.namelist() if not n.endswith("/")) == sorted(f"kv-paging-lesson/{n}"
                                                                          for n in files)
        assert zf.read("kv-paging-lesson/index.html") == files["index.html"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(argv)
    return code, out.getvalue(), err.getvalue()


def test_export_site_refuses_a_bad_destination_before_building(tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    code, _, err = _run(["export-site", str(busy)])
    assert code == 2 and "out" in err and "not empty" in err
    assert sorted(p.name for p in busy.iterdir()) == ["notes.txt"]
    code, _, err = _run(["export-site", str(tmp_path / "missing" / "site")])
    assert code == 2 and "parent folder does not exist" in err
    code, _, err = _run(["export-site", str(tmp_path / "s"), "--block-size", "0"])
    assert code == 2 and err.startswith("error: --block-size 0 must be") and not (tmp_path / "s").exists()


def test_the_export_menu_offers_the_static_site_as_a_zip():
    from tests.conftest import open_page
    at = open_page("pages/explainer.py", {"slots_classroom-40": 4096})   # not the lesson's pool: one variant
    at.toggle(key="export_prepare").set_value(True).run()
    assert "Static site (zip)" not in [b.proto.label for b in at.get("download_button")]   # built only when asked
    at.toggle(key="export_site").set_value(True).run(timeout=300)
    assert not at.exception, at.exception
    assert "Static site (zip)" in [b.proto.label for b in at.get("download_button")]


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""
    def isatty(self):
        return True


def test_export_site_shows_its_progress_on_a_terminal_and_nothing_when_piped(tmp_path):
    from allocator.cli.site import progress_line
    small = ["--slots", "256", "--max-new-tokens", "64"]                  # nine block sizes, a few seconds
    out, err = io.StringIO(), _Terminal()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli_main(["export-site", str(tmp_path / "tty"), *small]) == 0
    lines = err.getvalue().split("\r")
    steps = [line.split(": ", 1)[1].split("\u2026")[0] for line in lines if line.startswith("building the site: ")]
    sizes = [b for b in SWEEP_BLOCK_SIZES if b <= 256]
    assert steps == (["block-size sweep at 33 metadata costs"]
                     + [f"block size {b} ({i} of {len(sizes)})" for i, b in enumerate(sizes, 1)]
                     + ["the arithmetic pages and the Block tables walk-through"])
    assert lines[-1] == "" and not lines[-2].strip()                    # the line is blanked at the end
    assert out.getvalue().startswith(f"wrote {tmp_path / 'tty'} (")
    smaller = ["--slots", "64", "--max-new-tokens", "16"]     # any scenario will do for the quiet pipe
    code, printed, piped = _run(["export-site", str(tmp_path / "piped"), *smaller])   # stderr not a terminal
    assert code == 0 and piped == "" and printed.startswith("wrote ")
    assert progress_line(_Terminal(), quiet=True)[0] is None            # --json: quiet on a terminal too
    assert progress_line(io.StringIO(), quiet=False)[0] is None


def test_the_zip_stores_modes_a_static_host_can_serve():
    """Issue 40: every file 0644 and every folder (all ancestors, each once) 0755 in the zip's Unix
    permissions, with a fixed timestamp so the same site makes the same zip."""
    import io
    import stat
    import zipfile

    from allocator.viz.export.site import site_zip
    data = site_zip({"index.html": b"<html>", "data/bs/16.json": b"{}"})
    zf = zipfile.ZipFile(io.BytesIO(data))
    modes = {i.filename: i.external_attr >> 16 for i in zf.infolist()}
    assert modes == {"kv-paging-lesson/": stat.S_IFDIR | 0o755, "kv-paging-lesson/data/": stat.S_IFDIR | 0o755,
                     "kv-paging-lesson/data/bs/": stat.S_IFDIR | 0o755,
                     "kv-paging-lesson/data/bs/16.json": stat.S_IFREG | 0o644,
                     "kv-paging-lesson/index.html": stat.S_IFREG | 0o644}
    assert zf.read("kv-paging-lesson/data/bs/16.json") == b"{}"
    assert site_zip({"index.html": b"<html>", "data/bs/16.json": b"{}"}) == data


def test_every_lesson_chart_of_the_site_is_drawn_on_white():
    """Issue 40: the static site's Capacity and Slot accounting charts had Plotly's grey plot area (the
    app's theme paints it white, the site has no theme); every chart now says its background."""
    from allocator.viz.export.site_lessons import lessons_data
    found = []

    def walk(o):
        if isinstance(o, dict):
            fig = o.get("figure")
            if isinstance(fig, dict) and "layout" in fig:
                found.append(fig["layout"])
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
    data = lessons_data()
    walk(data)
    assert len(found) >= 9 and {"accounting", "capacity"} <= set(data)
    for layout in found:
        assert layout["plot_bgcolor"] == "white"
        assert all(layout[k].get("gridcolor") or layout[k].get("showgrid") is False
                   for k in layout if k.startswith(("xaxis", "yaxis")))
