"""Issue 38: every number on screen for Figure 14 (the Throughput page's latency-with-several-sequences
section, the CLI's text) comes from the :class:`allocator.studies.sampling_latency.Figure14` shown
beside it or from the paper's statement; the table says the same as the sentences."""
from __future__ import annotations

import pytest

from allocator.studies.paper import LATENCY_FACTOR
from allocator.studies.sampling_latency import GRID_STEP, MODES, ORCA_SYSTEMS, PAPER_FIG14, figure14
from allocator.viz.claims.sampling_latency import fig14_rows, fig14_texts
from tests.pages.test_claims import _forms, _numbers


@pytest.fixture(scope="module")
def fig():
    return figure14(scale=1.6558, budget=0.0941, seeds=(0, 1), requests=60, widths=(1, 6))


def _allowed(f) -> set[str]:
    values = [f.requests, len(f.seeds), GRID_STEP, LATENCY_FACTOR, f.budget_s_per_token, *f.widths,
              *PAPER_FIG14["oracle_improvement"].values(), 6,          # the paper's "beam search of width 6"
              13, 40]                                                  # OPT-13B; A100-40GB
    for by_w in f.advantage.values():
        for d in by_w.values():
            for sp in d.values():
                values += [sp["mean"], sp["std"], sp["min"], sp["max"]]
    allowed = set()
    for v in values:
        allowed |= _forms(v) | {f"{v:g}"}
    return allowed | {"6.3", "14", "12", "1"}          # the paper's section and figures; Table 1


def test_every_number_of_the_figure14_texts_and_table_comes_from_the_study(fig):
    allowed = _allowed(fig)
    t = fig14_texts(fig)
    texts = [t["setup"], t["fig14"], t["paper"], t["why"]]
    for row in fig14_rows(fig):
        texts += [str(k) for k in row] + [str(v) for v in row.values()]
    for text in texts:
        for n in _numbers(text):
            assert n in allowed, (n, text)


def test_the_sentences_and_the_table_say_the_same(fig):
    t = fig14_texts(fig)
    rows = {r["measure"]: r for r in fig14_rows(fig)}
    assert "ShareGPT, not the paper's Alpaca" in t["setup"]
    for mode in MODES:
        for w in fig.widths:
            name = "basic sampling, 1 sequence" if w == 1 else (
                f"{'parallel sampling' if mode == 'parallel' else 'beam search'}, width {w}")
            for o in ORCA_SYSTEMS:
                sp = fig.advantage[mode].get(w, {}).get(o)
                cell = rows[name][f"vLLM ÷ Orca ({'Max' if o == 'max' else 'Pow2' if o == 'pow2' else 'Oracle'})"]
                if sp is None:
                    assert cell == "not stated"
                    continue
                shown = f"{sp['mean']:.2f}× ± {sp['std']:.2f} ({sp['min']:.2f}–{sp['max']:.2f})"
                assert cell == shown
                if o == "oracle":
                    assert shown in t["fig14"]
        grows = fig.grows(mode)
        word = "it grows with every width" if grows else "it does not grow at every width"
        if grows is not None:
            assert word in t["fig14"]
        for x in fig.falls(mode) or []:                  # every step that does not rise is named, with its means
            assert (f"from {x['from']} to {x['to']} it goes from {x['from_mean']:.2f}× to {x['to_mean']:.2f}×"
                    in t["fig14"])
    assert rows["basic sampling, 1 sequence"]["the paper, vLLM ÷ Orca (Oracle)"] == "1.3× (Alpaca)"
    assert "1.3×" in t["paper"] and "2.3×" in t["paper"] and "Alpaca" in t["paper"]
    assert "ShareGPT" in t["why"] and "beam model" in t["why"]


def test_the_charts_have_labelled_axes_hover_and_a_legend(fig):
    from allocator.viz.sampling_latency import fig14_advantage_figure, fig14_latency_figure

    adv = fig14_advantage_figure(fig)
    assert "sequences per request" in adv.layout.xaxis.title.text and "(×)" in adv.layout.yaxis.title.text
    named = [tr for tr in adv.data if tr.name]
    assert any("the paper" in tr.name for tr in named) and all(tr.hovertemplate for tr in named)
    line = next(tr for tr in adv.data if tr.name and tr.name.startswith("Beam search: vLLM / Orca (Oracle)"))
    stated = [w for w in fig.widths if "oracle" in fig.advantage["beam"][w]]      # an unstated width is not drawn
    assert stated and list(line.x) == stated
    assert list(line.y) == pytest.approx([fig.advantage["beam"][w]["oracle"]["mean"] for w in stated])
    cur = fig14_latency_figure(fig)
    panels = 2 * len(fig.widths)                       # one per mode and width; the bottom row names the x axis
    assert "s/token" in cur.layout.yaxis.title.text
    assert all("requests/s" in getattr(cur.layout, f"xaxis{i}").title.text
               for i in range(panels - len(fig.widths) + 1, panels + 1))
    assert {tr.name for tr in cur.data if tr.showlegend is not False} >= {"vLLM", "Orca (Oracle)", "Orca (Pow2)",
                                                                         "Orca (Max)"}
