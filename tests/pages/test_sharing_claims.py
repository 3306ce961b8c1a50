"""Issue 38: every number on screen for Figure 15 (the Throughput page's sharing section, the CLI's
text) comes from the :class:`allocator.studies.sharing.Figure15` shown beside it or from the paper's
stated ShareGPT ranges; the table says the same as the sentences."""
from __future__ import annotations

import pytest

from allocator.studies.sharing import PAPER_FIG15, PARALLEL_TOLERANCE_POINTS, WIDTHS, figure15
from allocator.viz.claims.sharing import sharing_rows, sharing_texts
from tests.pages.test_claims import _forms, _numbers


@pytest.fixture(scope="module")
def fig():
    return figure15(scale=1.6558, seeds=(0, 1), requests=6, beam_seeds=(0, 1), beam_requests=4)


def _allowed(f) -> set[str]:
    values = [f.rate, f.requests, len(f.seeds), f.beam_requests, len(f.beam_seeds), f.default_replacement, *f.beam,
              *WIDTHS, *f.lengths_only.values(),
              *(f.lengths_only[w] - p for w, p in zip((2, 6), (PAPER_FIG15["sharegpt"]["parallel"]))),
              PARALLEL_TOLERANCE_POINTS, 1, 16, 13, 40,                 # blocks of 16; OPT-13B; A100-40GB
              *PAPER_FIG15["sharegpt"]["parallel"], *PAPER_FIG15["sharegpt"]["beam"]]
    for d in [f.parallel, *f.beam.values()]:
        for sp in d.values():
            values += [sp["mean"], sp["std"], sp["min"], sp["max"]]
    for r in f.targets():
        values += [r["error_points"], *(r.get("span") or ()), *(r.get("implied_replacement") or ())]
    allowed = set()
    for v in values:
        allowed |= _forms(v) | ({f"{v:g}"} if isinstance(v, (int, float)) else set())
    return allowed | {"6.3", "15"}                 # the paper's section and figure


def test_every_number_of_the_figure15_texts_and_table_comes_from_the_study(fig):
    allowed = _allowed(fig)
    t = sharing_texts(fig)
    texts = [t["setup"], t["fig15"], t["beam_model"], *t["why"].values()]
    for row in sharing_rows(fig):
        texts += [str(v) for v in row.values()]
    for text in texts:
        for n in _numbers(text):
            assert n in allowed, (n, text)


def test_the_sentences_and_the_table_say_the_same(fig):
    t = sharing_texts(fig)
    rows = {r["measure"]: r for r in sharing_rows(fig)}
    for w in WIDTHS:
        par = f"{100 * fig.parallel[w]['mean']:.1f}"
        beam = f"{100 * fig.beam[fig.default_replacement][w]['mean']:.1f}"
        assert par in t["fig15"] and rows[f"parallel sampling, width {w}"]["this model"].startswith(par + " %")
        alone = f"{100 * fig.lengths_only[w]:.1f}"
        assert alone in t["fig15"] and rows[f"parallel sampling, width {w}, lengths alone (no engine)"][
            "this model"] == alone + " %"
        assert beam in t["fig15"] and rows[f"beam search, width {w}"]["this model"].startswith(beam + " %")
    targets = {(r["mode"], r["width"]): r for r in fig.targets()}
    for mode, w in (("parallel", 2), ("parallel", 6), ("beam", 2), ("beam", 6)):
        err = targets[(mode, w)]["error_points"]
        assert f"{err:+.1f}" in t["fig15"]
    assert "fixed before" in t["fig15"] and "not a value fitted" in t["beam_model"]
    # the paper's beam values are placed by the sweep's neighbours, or said to lie outside it
    for w, paper in ((WIDTHS[0], PAPER_FIG15["sharegpt"]["beam"][0]), (WIDTHS[-1], PAPER_FIG15["sharegpt"]["beam"][1])):
        pair = fig.implied_replacement(w, paper)
        if pair is None:
            assert f"outside it at width {w}" in t["beam_model"]
        else:
            assert f"between replacement {pair[0]:g} and {pair[1]:g} at width {w}" in t["beam_model"]
            lo, hi = sorted((fig.beam[pair[0]][w]["mean"], fig.beam[pair[1]][w]["mean"]))
            assert lo <= paper <= hi


def test_the_beam_rows_say_placed_not_matched_and_only_parallel_rows_are_judged(fig):
    """A beam row's check only places the paper's value inside the range the model's parameter spans,
    so its verdict names that (with the span and the default's error) and is never a bare yes; parallel
    sampling's rows are a real within-tolerance check whose yes / no follows the error."""
    rows = {r["measure"]: r for r in sharing_rows(fig)}
    for t in fig.targets():
        verdict = rows[f"{'parallel sampling' if t['mode'] == 'parallel' else 'beam search'}, width {t['width']}"][
            "verdict"]
        assert verdict == t["verdict"]
        if t["mode"] == "beam":
            assert t["ok"] is None and not verdict.startswith("yes")
            lo, hi = t["span"]
            assert f"not matched: the paper's " in verdict and f"model's range {100 * lo:.1f}–{100 * hi:.1f} %" in verdict
            word = "placed" if t["placed"] else "not placed"
            assert verdict.startswith(word + ", not matched")
            if t["paper"] is not None:
                assert t["placed"] == (lo <= t["paper"] <= hi)
                assert f"the default is {t['error_points']:+.1f} points off" in verdict
        else:
            assert t["placed"] is None
            if t["paper"] is not None:
                assert t["ok"] == (abs(t["error_points"]) <= PARALLEL_TOLERANCE_POINTS)
            assert verdict.startswith("yes (within" if t["ok"] else "no (within")


def test_beam_verdict_outside_the_range_says_so():
    from allocator.studies.sharing import beam_verdict

    assert beam_verdict(0.663, (0.443, 0.663), (0.211, 0.781), 7.3) == (
        "placed, not matched: the paper's value lies inside the model's range 21.1–78.1 %; the default is "
        "+7.3 points off")
    assert beam_verdict(0.9, (0.443, 0.9), (0.211, 0.781), -12.0).startswith(
        "not placed, not matched: the paper's value lies outside the model's range 21.1–78.1 %")
    assert beam_verdict(None, (0.443, 0.663), (0.7, 0.8), None).startswith(
        "not placed, not matched: the paper's range 44.3–66.3 % lies outside")


def test_the_beam_sweep_chart_is_categorical_with_no_lines_between_the_swept_values(fig):
    """The swept replacement values (0, 0.01, 0.05, 0.2 ...) are evenly spaced, so the axis is a category
    axis that says it is not to scale, and the points are markers, never a line whose slope would read
    as a rate of change."""
    from allocator.viz.sharing import beam_sweep_figure

    chart = beam_sweep_figure(fig)
    assert chart.layout.xaxis.type == "category" and "not to scale" in chart.layout.xaxis.title.text
    series = [t for t in chart.data if t.name and t.name.endswith("(this model)")]
    assert [t.name for t in series] == [f"width {w} (this model)" for w in WIDTHS]
    for t, w in zip(series, WIDTHS):
        assert t.mode == "markers"
        assert list(t.x) == [f"{r:g}" for r in fig.beam]
        assert list(t.y) == pytest.approx([100 * fig.beam[r][w]["mean"] for r in fig.beam])
