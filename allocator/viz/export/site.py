"""The lesson as a static site: a folder that opens from ``file://`` or any static host, no server.

``python -m allocator export-site DIR`` (``allocator.cli.site``) and the explainer's Export menu
write what :func:`build_site` returns: ``index.html``, plotly.js (shipped inside the plotly Python
package), the page's script and style (``allocator/viz/export/site_static/``), and data files that are
``<script>`` files (``window.KV_SITE = {...}``) rather than JSON, because browsers refuse
``fetch()`` of local files opened from ``file://``.

Everything the site shows is precomputed here with the app's own builders, for every block size
of the sweep (``allocator.engine.scenario.SWEEP_BLOCK_SIZES``), so the block-size slider switches
instantly in the browser:

* the explainer figure (``allocator.viz.explainer_chart.explainer_figure``, and ``for_projector`` for
  presentation mode) with its frames stored compactly (``allocator.viz.export.sitecodec``);
* the headline cards (``claims.headline``) and the details table (``claims.details_rows``);
* the block-size sweep (``charts.sweep_figure``, ``claims.sweep_summary``) at every metadata cost
  c the app's slider offers (0 to 8 in steps of 0.25);
* the guided lesson (``allocator.viz.lesson``) with every reveal (``claims.reveal``) computed from
  the result the step shows, when the scenario is the lesson's own;
* the arithmetic pages' worked examples and the Block tables walk-through
  (``allocator.viz.export.site_lessons``).

No text is inserted into the page as HTML unless it was escaped here first
(:func:`allocator.viz.export.markup.markdown_html`); the page's script writes every other string
with ``textContent``.

Each block size runs through ``allocator.engine.scenario.run_scenario`` and the sweep through
``scenario_sweeps``, the paths ``simulate`` takes, so the site shows the numbers ``simulate``
prints for the same options (tests/core/test_export_run_path.py).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import json
import re
from pathlib import Path

import numpy as np

from allocator.engine.scenario import SWEEP_BLOCK_SIZES, Scenario, build_workload, run_scenario, scenario_sweeps
from allocator.viz.explainer_chart import explainer_figure, explainer_lines_figure, for_projector
from allocator.viz.sweep_chart import sweep_figure, sweep_figures_json
from allocator.viz.claims.explainer import details_rows, headline, reservation_name, reveal
from allocator.viz.claims.sweep import sweep_summary
from allocator.viz.export.html import APP_CREDIT, PAPER, scenario_summary
from allocator.viz.lesson import BASE, CHALLENGES, STEPS
from allocator.viz.export.markup import markdown_html
from allocator.viz.export.site_lessons import lessons_data
from allocator.viz.export.sitecodec import encode_frames, pool_refs

STATIC = Path(__file__).with_name("site_static")
#: The metadata-cost slider's values (slot equivalents per block), as on the explainer's sidebar.
METADATA_COSTS = tuple(i * 0.25 for i in range(33))
#: The folder's files, in the order index.html loads them.
SCRIPTS = ("plotly.min.js", "data/site-data.js", "data/lessons-data.js", "site.js")
#: The lesson's shared system prompt (step 5's setting), when the site carries the lesson.
LESSON_PREFIX = 256

def lesson_applies(sc: Scenario) -> bool:
    """Whether ``sc`` is the guided lesson's scenario (``allocator.viz.lesson.BASE``), whatever its
    block size and metadata cost: the lesson's texts quote that pool and cap."""
    base = Scenario(workload=BASE["workload"], total_slots=BASE["slots_classroom-40"],
                    max_new_tokens=BASE["max_new_classroom-40"], seed=BASE["seed"], arrival=BASE["arrival"],
                    shared_prefix=BASE["shared_prefix"], preemption=BASE["preemption"], policy=BASE["policy"])
    mine = dataclasses.replace(sc.canonical(), block_size=16, metadata_cost=0.0)
    return mine == base.canonical()


def _step_view(settings: dict, sizes: list[int], variants: dict) -> dict:
    """A lesson step's settings as the site's controls: {"block_size", "variant"}.

    Raises:
        ValueError: a setting the site cannot show (the lesson moved a control the site lacks).
    """
    merged = {"block_size": BASE["block_size"], "shared_prefix": BASE["shared_prefix"], **settings}
    unknown = set(settings) - {"block_size", "shared_prefix"}
    if unknown:
        raise ValueError(f"lesson step settings {sorted(unknown)} have no control on the static site")
    variant = next((k for k, v in variants.items() if v["shared_prefix"] == merged["shared_prefix"]), None)
    if variant is None or merged["block_size"] not in sizes:
        raise ValueError(f"lesson step settings {settings} are not among the site's precomputed scenarios")
    return {"block_size": merged["block_size"], "variant": variant}


def _key(bs) -> str:
    return str(int(bs))


def split_rows(tables: list[list[dict]]) -> dict:
    """Tables that differ in a few rows (the details table at each metadata cost: only the cost row
    changes) as ``{"base": the first table, "vary": {row index: [that row in each table]}}``; the
    page puts table k back together from them.

    Raises:
        ValueError: tables of different lengths.
    """
    base = tables[0]
    if any(len(t) != len(base) for t in tables):
        raise ValueError("the tables differ in length; cannot store them as one base")
    vary = {str(i): [t[i] for t in tables] for i in range(len(base)) if any(t[i] != base[i] for t in tables)}
    return {"base": base, "vary": vary}


def join_rows(split: dict, k: int) -> list[dict]:
    """Table ``k`` back from :func:`split_rows` (the page's script does the same)."""
    rows = list(split["base"])
    for i, versions in split["vary"].items():
        rows[int(i)] = versions[k]
    return rows


def _plain(fig) -> dict:
    """A plotly figure as plain JSON data."""
    return json.loads(fig.to_json())


#: The parts of the sweep chart's layout that mark the current block size (``charts.sweep_figure``
#: draws it as a labelled vertical line, and the x range makes room for it).
MARKER_KEYS = ("shapes", "annotations")


def sweep_marker(fig) -> dict:
    """What of ``charts.sweep_figure``'s chart depends on the current block size (plain data):
    ``{"shapes": [...], "annotations": [...], "xrange": [lo, hi]}`` -- the slider's labelled line
    and the x axis's range.

    The chart is its curves and their axes (which depend on the metadata cost c, not on the block
    size) plus these layout parts (which depend on the block size only); the site stores the curves
    once per c and these once per block size, and the page puts them together
    (tests/core/test_site.py checks the result equals ``sweep_figure`` drawn directly).

    Raises:
        ValueError: the chart marks no block size (no shape).
    """
    layout = _plain(fig)["layout"]
    if not layout.get("shapes"):
        raise ValueError("the sweep chart marks no current block size (it has no shape)")
    return {**{k: layout.get(k, []) for k in MARKER_KEYS}, "xrange": layout["xaxis"]["range"]}


def with_marker(fig: dict, marker: dict) -> dict:
    """A plain sweep chart (one metadata cost's curves) with ``marker``'s block size put in, as the
    page's script does (``drawSweep`` in site_static/site.js)."""
    layout = {**fig["layout"], **{k: marker[k] for k in MARKER_KEYS}}
    layout["xaxis"] = {**layout["xaxis"], "range": marker["xrange"]}
    return {**fig, "layout": layout}


def build_data(sc: Scenario, *, progress=None) -> dict:
    """Everything the explainer part of the site shows, as plain JSON data (before pooling).

    Args:
        sc: the scenario (its block size is where the slider starts; every block size of the sweep
            that fits the pool is precomputed, plus ``sc.block_size`` itself).
        progress: optional callable(str) told what is being built, once before the block-size
            sweep of each variant and once before each block size's run, e.g. ``"block size 16
            (5 of 9)"`` (``python -m allocator export-site`` shows it on a terminal).

    Returns:
        ``{"meta", "fig", "cards", "details", "sweep", "lesson"}``: ``fig``, ``cards``, ``details`` and
        ``sweep`` keyed by variant ("main"; "prefix" = the lesson's shared system prompt, only with
        the lesson) and block size; the sweep's curves per metadata cost, its current-size marker
        per block size; ``lesson`` None unless :func:`lesson_applies`.

    Raises:
        FieldError: bad scenario settings (``Scenario.checked``).
    """
    sc = sc.checked()
    sizes = sorted({b for b in SWEEP_BLOCK_SIZES if b <= sc.slots} | {sc.block_size})
    costs = sorted(set(METADATA_COSTS) | {float(sc.metadata_cost)})
    with_lesson = lesson_applies(sc)
    variants = {"main": {"label": f"shared system prompt: {sc.shared_prefix:,} tokens" if sc.shared_prefix
                         else "no shared system prompt", "shared_prefix": sc.shared_prefix}}
    if with_lesson:
        variants["prefix"] = {"label": f"shared system prompt: {LESSON_PREFIX} tokens",
                              "shared_prefix": LESSON_PREFIX}
    data = {"fig": {}, "cards": {}, "details": {}, "sweep": {}}
    reveals = {}
    done, total = 0, len(variants) * len(sizes)
    for vkey, v in variants.items():
        which = "" if vkey == "main" else f", {v['label']}"
        vsc = dataclasses.replace(sc, shared_prefix=v["shared_prefix"])
        workload = build_workload(vsc)
        if vkey == "main":
            main_workload = workload
        if progress:
            progress(f"block-size sweep at {len(costs)} metadata costs{which}")
        rows_by_cost = scenario_sweeps(vsc, costs, workload)
        for name in data:
            data[name][vkey] = {}
        for bs in sizes:
            done += 1
            if progress:
                progress(f"block size {bs}{which} ({done} of {total})")
            results = run_scenario(dataclasses.replace(vsc, block_size=bs), workload)
            fig = explainer_figure(results).freeze()
            d = fig.to_dict()
            p = for_projector(fig).to_dict()
            frames = encode_frames(d["frames"])
            present = encode_frames(p["frames"])
            if present["texts"] != frames["texts"] or present["maps"] != frames["maps"]:
                raise ValueError("the projector figure's frames differ from the figure's beyond their layout")
            lines = explainer_lines_figure(results).freeze()
            ld = lines.to_dict()
            data["fig"][vkey][_key(bs)] = {"data": d["data"], "layout": d["layout"], "frames": frames,
                                          "present": {"data": p["data"], "layout": p["layout"],
                                                      "template": present["template"]},
                                          "lines": {"data": ld["data"], "layout": ld["layout"],
                                                    "present_layout": for_projector(lines).to_dict()["layout"]}}
            data["cards"][vkey][_key(bs)] = headline(results)
            reserve = results["reserve_max"].summary
            rname = reservation_name(results)
            data["details"][vkey][_key(bs)] = split_rows([details_rows(results, c) for c in costs])
            data["sweep"][vkey].setdefault("text_html", {})[_key(bs)] = [
                markdown_html(sweep_summary(rows_by_cost[c], bs, c, reserve)) for c in costs]
            data["sweep"][vkey].setdefault("marker", {})[_key(bs)] = sweep_marker(
                sweep_figure(rows_by_cost[costs[0]], bs, costs[0], reserve, rname))
            if bs == sc.block_size:
                data["sweep"][vkey]["curves"] = sweep_figures_json(rows_by_cost, costs, bs, reserve, rname)
            if with_lesson:
                rows = rows_by_cost[costs[0]]
                for i, step in enumerate(STEPS):
                    reveals.setdefault(i, {}).setdefault(vkey, {})[_key(bs)] = markdown_html(
                        reveal(step["reveal"], results, slots=vsc.slots, max_new=vsc.max_new, sweep_rows=rows))
    lesson = None
    if with_lesson:
        lesson = {"steps": [{"title": s["title"], "text_html": markdown_html(s["text"]),
                             "question": s["question"], "choices": list(s["choices"]),
                             "hides": sorted(s["hides"]), "view": _step_view(s["settings"], sizes, variants),
                             "reveal_html": reveals[i]} for i, s in enumerate(STEPS)],
                  "challenges": [{"q_html": markdown_html(q), "a_html": markdown_html(a)} for q, a in CHALLENGES]}
    meta = {"title": "Reserve for the worst case, or page?",
            "summary": scenario_summary(sc, main_workload),
            "block_sizes": sizes, "block_size": sc.block_size, "costs": costs,
            "cost_index": costs.index(float(sc.metadata_cost)), "slots": sc.slots, "max_new": sc.max_new,
            "variants": [{"key": k, "label": v["label"]} for k, v in variants.items()],
            "generated": _dt.date.today().isoformat()}
    return {"meta": meta, **data, "lesson": lesson}


def attribution_html(sc: Scenario) -> str:
    """Where the site's figures and data come from (escaped HTML), as on the About page and in the
    README's Data section: the paper, the trace replayed (if any) with its licence, the app."""
    from allocator.workloads.mooncake import MOONCAKE_ATTRIBUTION
    from allocator.workloads.reader import file_label
    from allocator.workloads.trace import AZURE_ATTRIBUTION
    e = html.escape
    items = [f"<li>{e(APP_CREDIT)} Every figure here was computed by the lab's simulator "
             f"(<code>python -m allocator</code>) when this site was exported; the browser only draws it.</li>",
             f"<li>Figures and terms follow {e(PAPER)}.</li>"]
    if sc.workload == "classroom-40":
        items.append("<li>Workload: classroom-40, forty synthetic chat requests drawn from a fixed seed "
                     "(no external data).</li>")
    elif sc.workload == "azure-conv":
        items.append(f"<li>Data: rows of the Azure LLM inference trace 2023, conversation service. {e(AZURE_ATTRIBUTION)}"
                     "</li>")
    elif sc.kind == "mooncake":
        items.append(f"<li>Data: the Mooncake conversation trace. {e(MOONCAKE_ATTRIBUTION)}</li>")
    else:
        items.append(f"<li>Data: the trace file {e(sc.trace_name or file_label(sc.workload))}, supplied by whoever "
                     "exported this site.</li>")
    items.append("<li>The lesson's reference figures (5, 9 and 17 tokens; blocks of 4, 8 and 16; the 7B "
                 "model's 512 KiB per token) come from the explainer texts the lesson was designed around and "
                 "are kept in the lab's repository as its reference figures R1-R9; every sentence here is the lab's own.</li>")
    items.append("<li>plotly.js (MIT licence) draws the charts; it is shipped in this folder.</li>")
    return "<ul>" + "".join(items) + "</ul>"


_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


def fill_template(template: str, values: dict[str, str]) -> str:
    """``template`` with every ``{{NAME}}`` replaced by ``values[NAME]``, in one pass: a value is
    never scanned again, so a file named ``{{SCRIPTS}}.csv`` in the title stays text (filled one
    placeholder after another, it received the site's script tags). Unknown placeholders stay.

    Raises:
        Nothing; the values must already be escaped for where they go (``html.escape``)."""
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _js_data(name: str, tree) -> str:
    packed, pool = pool_refs(tree)
    body = json.dumps({"pool": pool, "root": packed}, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"window.{name} = {body};\n"


def build_site(sc: Scenario, *, progress=None, data: dict | None = None) -> dict[str, bytes]:
    """The whole static site for scenario ``sc``: {relative path: file content}.

    ``data``: :func:`build_data`'s result for ``sc`` when the caller already has it (built if None).

    Returns:
        ``index.html``, ``plotly.min.js``, ``site.js``, ``site.css``, ``data/site-data.js`` and
        ``data/lessons-data.js``; about 7 MB for the default scenario (plotly.js is 4.8 MB of it).

    Raises:
        FieldError: bad scenario settings, naming the field.
        ValueError: an animation the compact encoding cannot represent (nothing is returned).
    """
    from plotly.offline import get_plotlyjs

    data = build_data(sc, progress=progress) if data is None else dict(data, meta=dict(data["meta"]))
    if progress:
        progress("the arithmetic pages and the Block tables walk-through")
    data["meta"]["attribution_html"] = attribution_html(sc.checked())
    title = data["meta"]["title"]
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    page = fill_template(page, {"TITLE": html.escape(title), "SUMMARY": html.escape(data["meta"]["summary"]),
                                "SCRIPTS": "\n".join(f'<script src="{s}"></script>' for s in SCRIPTS)})
    return {
        "index.html": page.encode("utf-8"),
        "plotly.min.js": get_plotlyjs().encode("utf-8"),
        "site.js": (STATIC / "site.js").read_bytes(),
        "site.css": (STATIC / "site.css").read_bytes(),
        "data/site-data.js": _js_data("KV_SITE", data).encode("utf-8"),
        "data/lessons-data.js": _js_data("KV_LESSONS", lessons_data()).encode("utf-8"),
    }


#: The timestamp of every zip entry (the same zip for the same site: a cache or a diff sees no change).
ZIP_DATE = (2024, 1, 1, 0, 0, 0)


def site_zip(files: dict[str, bytes], folder: str = "kv-paging-lesson") -> bytes:
    """The site as one zip file (its files under ``folder/``), for the explainer's Export menu.

    Every entry carries Unix permissions a static host can serve: files 0644 and folders 0755, as
    the CLI's folder is written. ``ZipFile.writestr`` of a bare name stores 0600, and unzipped on a
    department's ``public_html`` a web server running as another user then answers 404 for every
    file (issue 40)."""
    import io
    import zipfile
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        folders = {folder} | {f"{folder}/{'/'.join(name.split('/')[:i])}" for name in files
                              for i in range(1, name.count("/") + 1)}
        for path in sorted(folders):
            entry = zipfile.ZipInfo(path + "/", date_time=ZIP_DATE)
            entry.external_attr = (0o40755 << 16) | 0x10        # a folder: drwxr-xr-x (and MS-DOS's flag)
            zf.writestr(entry, b"")
        for name, content in sorted(files.items()):
            entry = zipfile.ZipInfo(f"{folder}/{name}", date_time=ZIP_DATE)
            entry.external_attr = 0o100644 << 16                 # a regular file: -rw-r--r--
            entry.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(entry, content, compresslevel=6)
    return buf.getvalue()


def site_bytes(files: dict[str, bytes]) -> int:
    """Total size of a site's files (bytes)."""
    return int(np.sum([len(b) for b in files.values()]))
