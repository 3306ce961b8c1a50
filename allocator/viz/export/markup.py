"""The small markdown of the app's sentences as escaped HTML, for the static site's pages.

Both the explainer part of the site (:mod:`allocator.viz.export.site`) and its other pages
(:mod:`allocator.viz.export.site_lessons`) write their texts through :func:`markdown_html`, so no
text reaches the site as markup unless it was escaped here first.
"""
from __future__ import annotations

import html
import re

_BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", re.S)
_CODE = re.compile(r"`([^`]+)`")


def markdown_html(text: str) -> str:
    """The small markdown the app's sentences use (``**bold**``, ``*italic*``, ```code```, blank
    lines between paragraphs, ``- `` list items) as HTML, **escaped first**: any ``<``, ``&`` or
    quote in ``text`` (a file name, a trace's field) comes out as text, never as markup.

    Returns:
        An HTML fragment of ``<p>`` and ``<ul>`` blocks.
    """
    out = []
    for para in str(text).split("\n\n"):
        lines = [line for line in para.split("\n")]
        esc = [_inline(html.escape(line, quote=True)) for line in lines]
        if all(line.startswith("- ") for line in lines if line.strip()) and any(line.strip() for line in lines):
            out.append("<ul>" + "".join(f"<li>{e[2:]}</li>" for e in esc if e.strip()) + "</ul>")
        elif para.strip():
            out.append("<p>" + "<br>".join(esc) + "</p>")
    return "".join(out)


def _inline(s: str) -> str:
    s = _CODE.sub(r"<code>\1</code>", s)
    s = _BOLD.sub(r"<strong>\1</strong>", s)
    return _ITALIC.sub(r"<em>\1</em>", s)
