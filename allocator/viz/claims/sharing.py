"""Sentences of the paper's Figure 15 on ShareGPT (:mod:`allocator.studies.sharing`): every number from
the :class:`allocator.studies.sharing.Figure15` shown beside them or from the paper's stated ranges
(Kwon et al., SOSP 2023, section 6.3 and Figure 15; sections 4.4 for the mechanism)."""
from __future__ import annotations


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def sharing_texts(f) -> dict:
    """The Figure 15 sentences (markdown; numbers as the charts beside them show them).

    Returns:
        {"setup": how the runs were made, "fig15": ours beside the paper with the errors,
        "beam_model": which beams survive and where the paper falls in the model's range,
        "why": why ours and the paper's differ, one sentence per mode}.
    """
    from allocator.studies.sharing import PAPER_FIG15, WHY, WIDTHS

    rows = {(r["mode"], r["width"]): r for r in f.targets()}
    lo, hi = PAPER_FIG15["sharegpt"]["parallel"]
    blo, bhi = PAPER_FIG15["sharegpt"]["beam"]
    w0, w1 = WIDTHS[0], WIDTHS[-1]
    par = " / ".join(f"{100 * f.parallel[w]['mean']:.1f}" for w in WIDTHS)
    beam = " / ".join(f"{100 * f.beam[f.default_replacement][w]['mean']:.1f}" for w in WIDTHS)
    widths = ", ".join(str(w) for w in WIDTHS)
    lengths = " / ".join(f"{100 * f.lengths_only[w]:.1f}" for w in WIDTHS)
    setup = (f"**How it was run.** OPT-13B on one A100-40GB as in the replication above (Table 1's pool, blocks of 16), "
             f"ShareGPT requests with lengths drawn at random from all the pairs, arriving at {f.rate:.2f} requests/s "
             f"divided by the width (the same output sequences per second at every width): {f.requests} requests per "
             f"run over {len(f.seeds)} seeds for parallel sampling, {f.beam_requests} over {len(f.beam_seeds)} for "
             "beam search (its runs cost more). The saving is "
             "1 − physical blocks ÷ logical blocks at each engine step, averaged over the run's seconds: logical "
             "blocks are what every sequence would hold on its own, physical blocks the distinct blocks in use.")
    fig15 = (f"**Figure 15 (ShareGPT).** Parallel sampling saves {par} % of the blocks with {widths} samples per "
             f"request; **the paper:** {_pct(lo)} to {_pct(hi)} over the same widths (it prints the range only, so "
             f"width {w0} is set against its low end and {w1} against its high end: errors "
             f"{rows[('parallel', w0)]['error_points']:+.1f} and {rows[('parallel', w1)]['error_points']:+.1f} points). "
             f"The lengths alone, every request running by itself with no engine, give {lengths} %. "
             f"Beam search at the model's default replacement {f.default_replacement:g} saves {beam} % with beam "
             f"widths {widths}; **the paper:** {_pct(blo)} to {_pct(bhi)} (errors "
             f"{rows[('beam', w0)]['error_points']:+.1f} and {rows[('beam', w1)]['error_points']:+.1f} points at the "
             "default, which was fixed before this comparison).")
    spans = {w: f.beam_span(w) for w in (w0, w1)}
    implied = {w: rows[("beam", w)]["implied_replacement"] for w in (w0, w1)}

    def where(w, paper):
        pair = implied[w]
        if pair is None:
            return f"outside it at width {w} ({_pct(paper)})"
        return f"between replacement {pair[0]:g} and {pair[1]:g} at width {w} ({_pct(paper)})"

    beam_model = (f"**Which beams survive is a model here**, since no language model runs: at every step each beam "
                  f"falls out of the best beams with a fixed probability and a continuation of a surviving beam, "
                  f"chosen at random, takes its place (a fork, and a free of the fallen beam's blocks). At probability 0 "
                  f"beams never meet again and share only the prompt, as parallel samples do; the more often beams are "
                  f"replaced, the more history they share. Over the swept probabilities "
                  f"{', '.join(f'{r:g}' for r in f.beam)} the saving spans {_pct(spans[w0][0])}–{_pct(spans[w0][1])} "
                  f"at width {w0} and {_pct(spans[w1][0])}–{_pct(spans[w1][1])} at width {w1}. The paper's values fall "
                  f"{where(w0, blo)} and {where(w1, bhi)}: that is what this model can say about real beam search, "
                  "not a value fitted to land on the paper.")
    why = {mode: WHY[mode] for mode in ("parallel", "beam")}
    return {"setup": setup, "fig15": fig15, "beam_model": beam_model, "why": why}


def sharing_rows(f) -> list[dict]:
    """Figure 15's targets as display rows: mode and width, the paper's value (or range), this model's
    (mean ± sd over the seeds), the error in points, and the verdict: parallel sampling's within-tolerance
    check, or for beam search whether the paper's value is placed inside the model's range (never a match);
    then parallel sampling from the lengths alone, beside the paper as a check."""
    from allocator.studies.sharing import PAPER_FIG15

    rows = []
    for r in f.targets():
        lo, hi = r["paper_range"]
        paper = _pct(r["paper"]) if r["paper"] is not None else f"{100 * lo:.1f}–{100 * hi:.1f} % (range)"
        rows.append({"measure": f"{'parallel sampling' if r['mode'] == 'parallel' else 'beam search'}, width {r['width']}",
                     "the paper": paper, "this model": f"{_pct(r['ours'])} ± {100 * r['std']:.1f}",
                     "error": "—" if r["error_points"] is None else f"{r['error_points']:+.1f} points",
                     "verdict": r["verdict"]})
    lo, hi = PAPER_FIG15["sharegpt"]["parallel"]
    for w in f.lengths_only:
        paper = lo if w == min(f.lengths_only) else hi if w == max(f.lengths_only) else None
        rows.append({"measure": f"parallel sampling, width {w}, lengths alone (no engine)",
                     "the paper": _pct(paper) if paper is not None else f"{100 * lo:.1f}–{100 * hi:.1f} % (range)",
                     "this model": _pct(f.lengths_only[w]),
                     "error": "—" if paper is None else f"{100 * (f.lengths_only[w] - paper):+.1f} points",
                     "verdict": "— (a check, not a target)"})
    return rows


__all__ = ["sharing_rows", "sharing_texts"]
