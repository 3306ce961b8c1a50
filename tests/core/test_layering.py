"""Imports point one way: pages -> allocator, kernels; never back (DESIGN.md, Layout).

Read with ``ast``, not by importing, so a forbidden import is found wherever it sits: at the top,
inside a function, relative (``from ..x import y``), or spelled ``importlib.import_module("...")``.
Also pins the shape of ``pages/``: only the ``st.Page`` scripts app.py navigates to live directly
in it; their helpers live in ``pages/_ui/``.
"""
from __future__ import annotations

import ast
import os

import pytest

from tests.conftest import APP_PATH, ROOT

#: Top-level packages the core (allocator/, kernels/) must never import.
FORBIDDEN_IN_CORE = {"pages", "streamlit", "app"}
#: Modules that build figures or demo state for pages and must stay free of streamlit.
NO_STREAMLIT = ["allocator/viz", "pages/_ui/block_tables_demo.py", "pages/_ui/block_tables_figure.py"]


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


@pytest.mark.parametrize("folder", ["allocator", "kernels"])
def test_core_never_imports_pages_streamlit_or_app(folder):
    files = _py_files(folder)
    assert files, f"no .py files under {folder}/"
    bad = _violations(files, FORBIDDEN_IN_CORE)
    assert not bad, "the core must not import the UI layer (pages -> allocator, never back):\n" + "\n".join(bad)


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
