"""Imports point one way: pages -> allocator, kernels; never back (README, "Architecture").

Read with ``ast``, not by importing, so a forbidden import is found wherever it sits: at the top,
inside a function, relative (``from ..x import y``), or spelled ``importlib.import_module("...")``.
Pins:

* the core (``allocator/``, ``kernels/``) never imports the UI (``pages``, ``streamlit``, ``app``),
  and ``allocator/`` does not import ``kernels/`` (the kernels use the core, not the reverse);
* no page builds a figure: nothing under ``pages/`` nor ``app.py`` imports plotly; figures are built
  under ``allocator/viz/`` (or beside the kernels' results) and a page only hands them to
  ``st.plotly_chart``;
* no page draws its own error box: bad input is shown by ``pages._ui.errors.show_error``;
* the shape of ``pages/``: only the ``st.Page`` scripts app.py navigates to live directly in it;
  their helpers live in ``pages/_ui/``.
"""
from __future__ import annotations

import ast
import os

import pytest

from tests.conftest import APP_PATH, ROOT

#: Top-level packages the core (allocator/, kernels/) must never import.
FORBIDDEN_IN_CORE = {"pages", "streamlit", "app"}
#: What each core package must not import besides: the core does not depend on the kernels.
FORBIDDEN_BY_FOLDER = {"allocator": FORBIDDEN_IN_CORE | {"kernels"}, "kernels": FORBIDDEN_IN_CORE}
#: Modules that build figures or demo state for pages and must stay free of streamlit.
NO_STREAMLIT = ["allocator/viz"]
#: The figure library: only the core's figure builders import it, never a page.
FIGURE_LIBRARIES = {"plotly"}


def _py_files(rel: str) -> list[str]:
    """Repository-relative paths of every .py file under ``rel`` (a folder or one file), sorted."""
    path = os.path.join(ROOT, rel)
    if os.path.isfile(path):
        return [rel]
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames if f.endswith(".py")]
    return sorted(out)


def _package_of(rel_path: str) -> list[str]:
    """Package parts a file's relative imports start from: ``allocator/viz/x.py`` and
    ``allocator/viz/__init__.py`` -> ``["allocator", "viz"]``."""
    return rel_path[:-3].split(os.sep)[:-1]


def imported_modules(rel_path: str, root: str = ROOT) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` for every import in a file, wherever it is written.

    ``from a.b import c`` yields both ``a.b`` and ``a.b.c`` (c may be a module); relative imports
    are resolved against the file's package; ``importlib.import_module("x")`` and
    ``__import__("x")`` with a literal name count too.
    """
    with open(os.path.join(root, rel_path), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=rel_path)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(rel_path)
                base = package[:max(0, len(package) - (node.level - 1))]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module:
                found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}" if module else alias.name)
                      for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


def _violations(files: list[str], forbidden: set[str], root: str = ROOT) -> list[str]:
    """``"path:line imports module"`` for every import of a top-level package in ``forbidden``."""
    return [f"{f}:{line} imports {mod}" for f in files for line, mod in imported_modules(f, root)
            if mod.split(".")[0] in forbidden]


def test_the_checker_sees_every_spelling(tmp_path):
    """The AST walk catches top-level, in-function, relative, aliased and importlib imports, and
    does not mistake ``allocator.pages`` (a relative ``from .. import pages``) for the UI layer."""
    pkg = tmp_path / "allocator" / "viz"
    pkg.mkdir(parents=True)
    (pkg / "bad.py").write_text(
        "import streamlit as st\n"                                        # 1
        "def f():\n    from pages._ui import cache\n"                     # 3
        "def g():\n    import importlib\n    return importlib.import_module('app')\n"   # 6
        "from .. import pages\n"                                          # 7: allocator.pages
        "from ...pages import theme\n"                                    # 8: top-level pages
        "import allocator.viz.theme as t\n")                              # 9: fine
    rel = os.path.join("allocator", "viz", "bad.py")
    got = {mod for _, mod in imported_modules(rel, str(tmp_path))}
    assert {"streamlit", "pages._ui", "pages._ui.cache", "app", "allocator.pages", "pages.theme"} <= got
    flagged = {int(v.split(":")[1].split()[0]) for v in _violations([rel], FORBIDDEN_IN_CORE, str(tmp_path))}
    assert flagged == {1, 3, 6, 8}


@pytest.mark.parametrize("folder", sorted(FORBIDDEN_BY_FOLDER))
def test_core_never_imports_pages_streamlit_or_app(folder):
    """allocator/ and kernels/ never import the UI layer; allocator/ never imports kernels/."""
    files = _py_files(folder)
    assert files, f"no .py files under {folder}/"
    bad = _violations(files, FORBIDDEN_BY_FOLDER[folder])
    assert not bad, ("imports point one way (pages -> allocator, kernels; kernels -> allocator):\n"
                     + "\n".join(bad))


def _ui_files() -> list[str]:
    """Every .py file of the UI layer: app.py and everything under pages/."""
    return [os.path.relpath(APP_PATH, ROOT), *_py_files("pages")]


@pytest.mark.parametrize("rel", _ui_files())
def test_no_page_builds_a_figure(rel):
    """A page renders what the core returns: no module under pages/ (nor app.py) imports plotly
    (graph_objects, express, subplots' make_subplots or any other part); figures are built under
    allocator/viz/ and handed to ``st.plotly_chart`` as they are."""
    bad = _violations([rel], FIGURE_LIBRARIES)
    assert not bad, "build the figure under allocator/viz/ and pass it to the page:\n" + "\n".join(bad)


def test_the_figure_rule_sees_every_plotly_spelling(tmp_path):
    """``go.Figure``, ``px.`` and ``make_subplots`` all come in through an import of plotly."""
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "p.py").write_text(
        "import plotly.graph_objects as go\n"                           # 1
        "def f():\n    from plotly.subplots import make_subplots\n"     # 3
        "import plotly.express as px\n"                                 # 4
        "from allocator.viz.explainer_chart import explainer_figure\n")          # 5: fine
    rel = os.path.join("pages", "p.py")
    flagged = {int(v.split(":")[1].split()[0]) for v in _violations([rel], FIGURE_LIBRARIES, str(tmp_path))}
    assert flagged == {1, 3, 4}


@pytest.mark.parametrize("rel", NO_STREAMLIT)
def test_figure_and_demo_builders_do_not_import_streamlit(rel):
    files = _py_files(rel)
    assert files, rel
    bad = _violations(files, {"streamlit"})
    assert not bad, "\n".join(bad)


def _navigation_scripts() -> set[str]:
    """Script paths given to ``st.Page(...)`` in app.py (``pages/explainer.py``, ...)."""
    with open(APP_PATH, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename="app.py")
    scripts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name == "Page" and node.args and isinstance(node.args[0], ast.Constant):
                scripts.add(os.path.normpath(node.args[0].value))
    return scripts


def test_pages_folder_holds_only_the_navigation_scripts():
    """Every .py directly in pages/ (besides __init__.py) is an st.Page in app.py's navigation, and
    every st.Page script exists: library modules belong in pages/_ui/ or allocator/viz/."""
    scripts = _navigation_scripts()
    assert len(scripts) >= 6, scripts
    here = {os.path.join("pages", f) for f in os.listdir(os.path.join(ROOT, "pages"))
            if f.endswith(".py") and f != "__init__.py"}
    strays = sorted(here - scripts)
    assert not strays, f"not st.Page scripts of app.py (move them to pages/_ui/ or allocator/viz/): {strays}"
    missing = sorted(s for s in scripts if not os.path.isfile(os.path.join(ROOT, s)))
    assert not missing, f"app.py navigates to scripts that do not exist: {missing}"


def test_pages_ui_is_a_package_of_helpers_not_pages():
    """pages/_ui/ is importable (has __init__.py) and none of its modules is navigated to."""
    assert os.path.isfile(os.path.join(ROOT, "pages", "_ui", "__init__.py"))
    assert not {s for s in _navigation_scripts() if s.startswith(os.path.join("pages", "_ui"))}


#: The one error presenter: every message about bad input on a page goes through it.
ERROR_PRESENTER = os.path.join("pages", "_ui", "errors.py")
#: Red or yellow boxes that are not about a refused input, each with why (file -> (count, why)).
ALERTS_NOT_ABOUT_INPUT = {
    os.path.join("pages", "block_tables.py"): (1, "'Wrong share': the naive hash's result, part of the lesson"),
    os.path.join("pages", "explainer.py"): (1, "requests that can never fit: a result of the run"),
    os.path.join("pages", "_ui", "present.py"): (1, "advice about the share link's address"),
}


def _alert_calls(rel: str) -> list[int]:
    """Lines of every ``<anything>.error(...)`` / ``.warning(...)`` / ``.exception(...)`` call."""
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=rel)
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr in ("error", "warning", "exception")]


@pytest.mark.parametrize("rel", _ui_files())
def test_pages_show_bad_input_through_the_one_error_presenter(rel):
    """No page draws its own error box: a refused value is shown by ``pages._ui.errors.show_error``
    (plain text, in the page's words), so none can forget to escape what a user typed."""
    if rel == ERROR_PRESENTER:
        return
    lines = _alert_calls(rel)
    allowed, why = ALERTS_NOT_ABOUT_INPUT.get(rel, (0, ""))
    assert len(lines) <= allowed, (f"{rel} lines {lines}: show bad input with pages._ui.errors.show_error"
                                   + (f" (allowed here: {allowed}, {why})" if allowed else ""))


# --- the tree shows the design (issue 36): packages by layer, no cycles, no private names across modules --

#: allocator/'s packages in layer order: a package imports only from itself and from packages of a
#: lower rank (``allocator/__init__.py`` and README's architecture table state the same order).
LAYERS = {"common": 0, "workloads": 1, "memory": 1, "accounting": 1, "engine": 2, "cost": 3, "studies": 4,
          "viz": 5, "cli": 6}
#: The code this project writes (the test folder is checked for private names and cycles too).
OUR_CODE = ("allocator", "kernels", "pages", "app.py", "tests")


def _module_of(rel: str) -> str:
    """``allocator/engine/loop.py`` -> ``allocator.engine.loop``; a package's ``__init__`` -> the package."""
    mod = rel[:-3].replace(os.sep, ".")
    return mod[:-len(".__init__")] if mod.endswith(".__init__") else mod


def _our_modules() -> dict[str, str]:
    """{module name: repository-relative path} for every .py file of ours."""
    return {_module_of(f): f for rel in OUR_CODE for f in _py_files(rel)}


def import_graph(modules: dict[str, str], root: str = ROOT) -> dict[str, dict[str, int]]:
    """{module: {imported module of ours: first line}} counting every import a file writes: top level,
    inside a function, under ``if TYPE_CHECKING:``, relative, or by ``importlib``. ``from a import b``
    counts as importing ``a.b`` when that is a module of ours, else ``a``; importing ``a.b.c``
    does not count as importing the packages ``a`` and ``a.b`` (their ``__init__`` files hold
    docstrings only)."""
    graph: dict[str, dict[str, int]] = {}
    for mod, rel in modules.items():
        edges: dict[str, int] = {}
        for line, name in imported_modules(rel, root):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != mod:
                edges.setdefault(name, line)
        graph[mod] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every
    import cycle lies inside one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_the_cycle_finder_sees_in_function_and_type_checking_imports(tmp_path):
    """A cycle closed only by an in-function import, or only under TYPE_CHECKING, is still a cycle."""
    pkg = tmp_path / "allocator" / "engine"
    pkg.mkdir(parents=True)
    (tmp_path / "allocator" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from allocator.engine.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from allocator.engine import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import D\n")
    (pkg / "d.py").write_text("from allocator.engine.c import C\n")
    (pkg / "e.py").write_text("from allocator.engine.a import x\n")          # imports into a cycle: not in it
    modules = {_module_of(os.path.relpath(str(p), tmp_path)): os.path.relpath(str(p), tmp_path)
               for p in pkg.glob("*.py")}
    assert import_cycles(import_graph(modules, str(tmp_path))) == [
        ["allocator.engine.a", "allocator.engine.b"], ["allocator.engine.c", "allocator.engine.d"]]


def test_no_import_cycles():
    """Nothing of ours imports in a cycle, counting in-function and TYPE_CHECKING imports: a split
    whose halves import each other is one idea in two files, and the halves belong together."""
    cycles = import_cycles(import_graph(_our_modules()))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_allocator_packages_import_only_lower_layers():
    """Inside allocator/, a package imports only itself and the packages before it in LAYERS
    (common <- workloads, memory, accounting <- engine <- cost <- studies <- viz <- cli): the engine
    never draws, the memory never knows a workload, a study never reaches the CLI."""
    modules = {m: r for m, r in _our_modules().items() if m.startswith("allocator.")}
    top = {m.split(".")[1] for m in modules if m.count(".") >= 2}
    assert top == set(LAYERS), f"packages not in LAYERS (give each a rank): {sorted(top ^ set(LAYERS))}"
    bad = []
    for mod, edges in import_graph(modules).items():
        parts = mod.split(".")
        if len(parts) < 3:                            # allocator/__init__, __main__: the entry points
            continue
        for target, line in edges.items():
            tparts = target.split(".")
            if tparts[0] == "allocator" and len(tparts) >= 3 and LAYERS[tparts[1]] >= LAYERS[parts[1]] \
                    and tparts[1] != parts[1]:
                bad.append(f"{modules[mod]}:{line} ({parts[1]}) imports {target} ({tparts[1]})")
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_private_name_is_imported_across_modules():
    """``from x import _name`` reaches into another module's private state; a name two modules
    share is public and documented where it is defined. Tests may read what they test."""
    bad = []
    for rel in (f for code in OUR_CODE if code != "tests" for f in _py_files(code)):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                bad += [f"{rel}:{node.lineno} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, "\n".join(bad)


def _readme_packages() -> list[tuple[str, str]]:
    """(folder, purpose) of each row of README's architecture table, in order."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0].startswith("`") and cells[0].endswith("/`"):
            rows.append((cells[0].strip("`").rstrip("/"), cells[1]))
    return rows


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0].replace("``", "`") if (doc or "").strip() else ""


def test_readme_table_lists_every_package_with_its_purpose_in_layer_order():
    """README's architecture table is the tree: one row per package (a folder with ``__init__.py``)
    under allocator/, kernels/ and pages/, each row's purpose the first line of that package's
    docstring, and allocator/'s packages in layer order."""
    rows = _readme_packages()
    packages = sorted(os.path.dirname(f) for code in ("allocator", "kernels", "pages") for f in _py_files(code)
                      if os.path.basename(f) == "__init__.py" and os.path.dirname(f) != "allocator")
    assert sorted(folder for folder, _ in rows) == packages
    for folder, purpose in rows:
        with open(os.path.join(ROOT, folder, "__init__.py"), encoding="utf-8") as fh:
            doc = ast.get_docstring(ast.parse(fh.read()))
        assert purpose == _first_line(doc), folder
    ranks = [LAYERS[f.split("/")[1]] for f, _ in rows if f.startswith("allocator/")]
    assert ranks == sorted(ranks), "allocator/'s rows are not in layer order"


#: The explainer's maps and lines have their own projector form (allocator.viz.explainer_chart.for_projector).
DIRECT_CHART_CALLS = {os.path.join("pages", "explainer.py"): 2, os.path.join("pages", "_ui", "present.py"): 1}


@pytest.mark.parametrize("rel", _ui_files())
def test_every_chart_goes_through_the_presentation_helper(rel):
    """A page draws a chart with ``pages._ui.present.chart``, which enlarges its text while presenting
    (issue 40: presentation mode left axes and legends at about 10 px on Throughput and the real-engine
    page); only the helper itself and the explainer's own projector figures call st.plotly_chart."""
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=rel)
    calls = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "plotly_chart"]
    assert len(calls) == DIRECT_CHART_CALLS.get(rel, 0), f"{rel} lines {calls}: draw charts with present.chart"
