"""The one way a page shows a message about bad input: as plain text, in the page's words.

Every page reports a refused value the same way: a core error (``allocator.common.validate.FieldError``,
or another ``ValueError`` such as ``allocator.workloads.trace.ShippedDataError``) is reworded with the label
of the control that holds its ``.field``, and the whole message goes through
:func:`allocator.common.validate.plain_markdown`, because it may quote what a user typed, a URL's value
or a file's name: nothing in it can become a link, emphasis, maths or HTML. Nothing here stops the
page; the caller decides whether the rest still renders (it does, on every page that can).
"""
from __future__ import annotations

import streamlit as st

from allocator.common.errors import FieldError
from allocator.common.validate import plain_markdown

#: The icon of each kind of message.
ICONS = {"error": ":material/error:", "warning": ":material/warning:"}


def in_page_words(exc: BaseException, labels: dict[str, str] | None = None,
                  advice: dict[str, str] | None = None, label: str | None = None) -> str:
    """A core error in a page's words, without a closing full stop.

    Args:
        exc: the error. A :class:`FieldError` is reworded (``FieldError.reworded``) with ``label``
            if given, else with ``labels[exc.field]``; any other error, or a field with no label
            here, is its own text (``str(exc)``).
        labels: core field name -> the caption of the control holding it (``"reserve"`` ->
            ``"Reserve maximum"``).
        advice: words of the core's advice -> the page's (``"raise reserve or"`` -> ``"raise the
            reserve maximum or"``), replaced in a reworded message.
        label: the subject for this one error (a table row: ``"Row 2: length"``).

    Returns:
        The sentence, e.g. ``"Reserve maximum = 0 must be at least 1"``.
    """
    if not isinstance(exc, FieldError):
        return str(exc)
    label = label or (labels or {}).get(exc.field)
    if not label:
        return str(exc)
    text = exc.reworded(label)
    for code_words, page_words in (advice or {}).items():
        text = text.replace(code_words, page_words)
    return text


def show_error(message: str | BaseException, where=None, *, before: str = "", after: str | None = None,
               labels: dict[str, str] | None = None, advice: dict[str, str] | None = None,
               label: str | None = None, kind: str = "error", icon: str | None = None) -> str:
    """Show one message about bad input in ``where`` (a container, a placeholder, ``st.sidebar``;
    the page itself when None), as plain text.

    Args:
        message: the text, or an error to word with :func:`in_page_words` (``labels``, ``advice``,
            ``label`` are passed on).
        before, after: words around it (``"These settings cannot run: "``); ``after`` is a full
            stop for an error and nothing for a text unless given.
        kind: ``"error"`` (red) or ``"warning"`` (yellow: a value was replaced, nothing refused).
        icon: a Material icon instead of the kind's own (:data:`ICONS`).

    Returns:
        The Markdown source shown (already escaped).
    """
    if isinstance(message, BaseException):
        text = in_page_words(message, labels, advice, label)
        after = "." if after is None else after
    else:
        text = message
    source = plain_markdown(f"{before}{text}{after or ''}")
    box = where if where is not None else st
    getattr(box, kind)(source, icon=icon or ICONS[kind])
    return source
