"""A Plotly figure whose plain-dict form is computed once, and the size of a figure's JSON.

Streamlit converts a figure to a dict on every script run; for the explainer's animated figure
(:mod:`allocator.viz.explainer_chart`) that conversion dominated each rerun, so finished figures
are frozen. Used by the explainer chart, the pages' caches (which freeze the sweep chart too) and
the benchmarks.
"""
from __future__ import annotations

import hashlib
import json

import plotly.graph_objects as go
import plotly.io as pio

__all__ = ["FrozenFigure", "figure_json_bytes"]


class FrozenFigure(go.Figure):
    """A finished figure whose plain-dict form is computed once.

    ``st.plotly_chart`` calls ``to_dict()`` on every script run, which deep-copies and re-encodes
    every frame (about 50 ms for the explainer's 120 frames): with forty students on one server
    that dominated each rerun. ``freeze()`` stores the JSON-ready dict; later ``to_dict()`` calls
    return it. Call ``freeze()`` only when the figure is complete: changes made after it are not
    seen by ``to_dict()``.
    """

    _raw_frames = None

    @classmethod
    def with_plain_frames(cls, figure: dict, frames: list[dict]) -> "FrozenFigure":
        """A figure from ``figure`` (a plotly figure dict, validated) whose animation ``frames`` are
        plain dicts kept as they are: plotly.py validates them only if ``.frames`` is read (tests, the
        CLI's frame count), not on every build (the explainer's 92 frames were half its build time)."""
        fig = cls(figure)
        fig._raw_frames = frames
        return fig

    @property
    def frames(self):
        """The animation frames as plotly objects (plain-dict frames are validated on first read)."""
        if self._raw_frames is not None:
            raw, self._raw_frames = self._raw_frames, None
            go.Figure.frames.fset(self, raw)
        return go.Figure.frames.fget(self)

    @frames.setter
    def frames(self, value):
        self._raw_frames = None
        go.Figure.frames.fset(self, value)

    def _plain(self) -> dict:
        out = super().to_dict()
        if self._raw_frames is not None:
            out["frames"] = self._raw_frames
        return out

    def freeze(self) -> "FrozenFigure":
        """Compute and keep the plain-dict form (plain JSON types only); returns self.

        The kept layout's ``datarevision`` is a digest of the rest of the figure. Streamlit's chart
        hands Plotly the figure twice when it first shows it (once as sent, once more after applying
        its theme); without a ``datarevision`` Plotly treats every array of the second copy as new
        data and computes and draws the whole figure again. With one, Plotly compares the revisions,
        finds them equal and redraws nothing; a figure that differs in any byte has another digest,
        so it is drawn as before."""
        plain = self._plain()
        plain.setdefault("layout", {}).pop("datarevision", None)
        text = pio.to_json(plain, validate=False)
        plain = json.loads(text)
        plain["layout"]["datarevision"] = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
        self._frozen = plain
        return self

    def to_dict(self) -> dict:
        """The frozen dict when ``freeze()`` was called, else plotly's usual conversion."""
        frozen = getattr(self, "_frozen", None)
        return frozen if frozen is not None else self._plain()


def figure_json_bytes(fig: go.Figure) -> int:
    """Size of the figure's JSON as Streamlit would send it (bytes)."""
    return len(fig.to_json())
