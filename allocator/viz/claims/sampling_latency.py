"""Sentences of the paper's Figure 14 on ShareGPT (:mod:`allocator.studies.sampling_latency`): every
number from the :class:`allocator.studies.sampling_latency.Figure14` shown beside them or from the
paper's statement (Kwon et al., SOSP 2023, section 6.3 and Figure 14)."""
from __future__ import annotations


def _x(v: float) -> str:
    return f"{v:.2f}×"


def _adv(sp: dict) -> str:
    """A spread of ratios as the table and the sentences print it: mean ± sd (min–max)."""
    return f"{_x(sp['mean'])} ± {sp['std']:.2f} ({sp['min']:.2f}–{sp['max']:.2f})"


def fig14_texts(f) -> dict:
    """The Figure 14 sentences (markdown; numbers as the charts and the table beside them show them).

    Returns:
        {"setup": how the runs were made (ShareGPT, not the paper's Alpaca), "fig14": vLLM's advantage
        over Orca (Oracle) by mode and width and whether it grows, "paper": the paper's statement
        beside ours, "why": why they differ}.
    """
    from allocator.studies.sampling_latency import GRID_STEP, MODES, PAPER_FIG14, WHY
    from allocator.studies.sharing import MODE_LABELS
    from allocator.studies.paper import LATENCY_FACTOR

    widths = ", ".join(str(w) for w in f.widths)
    setup = (f"**How it was run — on ShareGPT, not the paper's Alpaca** (this lab ships ShareGPT's lengths only). "
             f"OPT-13B on one A100-40GB with Table 1's pool, as above; every request asks for {widths} sequences "
             "(1 is basic sampling). vLLM shares blocks by refcount (the prompt's blocks, and the beams' common "
             "history under the beam model at its default); each Orca baseline gives every sequence its own "
             "reservation of prompt + estimate in the artifact's buddy allocator, nothing shared, and prices "
             "its prompt once, as vLLM does; neither runs under the paper server's per-step caps that Figure 12's "
             f"vLLM has, so basic sampling's ratio here is not Figure 12's. Each run is {f.requests} ShareGPT requests (fewer can arrive as one "
             "burst that fits the pool whole, and then latency never passes the budget); the request rate climbs "
             f"in steps of {GRID_STEP:g}× until the normalised latency passes the budget of Figure 12 "
             f"({LATENCY_FACTOR:g} × a one-sequence request served alone, {f.budget_s_per_token:.4f} s/token), "
             f"and the sustained rate is read where it does, over {len(f.seeds)} arrival seeds.")
    parts = []
    for mode in MODES:
        d = f.advantage[mode]
        said = "; ".join(f"{w}: {_adv(d[w]['oracle'])}" for w in f.widths if "oracle" in d.get(w, {}))
        grows, falls = f.grows(mode), f.falls(mode)
        if grows is None:
            verdict = "some width's ratio could not be stated"
        elif grows:
            verdict = "it grows with every width"
        else:
            first, last = d[f.widths[0]]["oracle"]["mean"], d[f.widths[-1]]["oracle"]["mean"]
            verdict = (f"it does not grow at every width: from {f.widths[0]} to {f.widths[-1]} sequences it goes "
                       f"from {_x(first)} to {_x(last)}, but " + "; ".join(
                           f"from {x['from']} to {x['to']} it goes from {_x(x['from_mean'])} to {_x(x['to_mean'])}"
                           + (", a drop smaller than the seeds' standard deviation" if x["within_sd"] else "")
                           for x in falls))
        parts.append(f"{MODE_LABELS[mode]}, sequences per request {said} — {verdict}.")
    over = f.beam_over_parallel()
    beam_more = ("Beam search's advantage is above parallel sampling's at every width above 1." if over and all(over)
                 else "Beam search's advantage is not above parallel sampling's at every width above 1."
                 if over is not None else "")
    fig14 = ("**Figure 14 (ShareGPT): vLLM's sustained rate ÷ Orca (Oracle)'s**, mean ± sd (min–max) over the "
             "seeds. " + " ".join(parts) + " " + beam_more)
    if f.unstated:
        fig14 += " Not stated (a seed's curve never crossed the budget): " + ", ".join(
            f"{MODE_LABELS[m].lower()} width {w} against {o}" for m, w, o in f.unstated) + "."
    imp = PAPER_FIG14["oracle_improvement"]
    paper = (f"**The paper ({PAPER_FIG14['dataset']}):** the more sequences a request asks for, the more vLLM gains "
             "over every Orca baseline, and beam search, which shares more, gains more; over Orca (Oracle) the gain "
             f"rises from {imp['basic sampling']:g}× in basic sampling to {imp['beam search, width 6']:g}× in beam "
             "search of width 6.")
    return {"setup": setup, "fig14": fig14, "paper": paper, "why": WHY}


def fig14_rows(f) -> list[dict]:
    """Figure 14's advantages as display rows: mode and width, vLLM's sustained rate ÷ each Orca
    baseline's (mean ± sd (min–max) over the seeds, or "not stated"), and the paper's value where it
    states one (Orca (Oracle): basic sampling and beam search of width 6, on Alpaca)."""
    from allocator.studies.paper import PAPER_LABELS
    from allocator.studies.sampling_latency import MODES, ORCA_SYSTEMS, PAPER_FIG14

    imp = PAPER_FIG14["oracle_improvement"]
    rows = []
    for mode in MODES:
        for w in f.widths:
            if w == 1 and mode != MODES[0]:
                continue                                  # basic sampling: one row, the same runs for both
            name = "basic sampling, 1 sequence" if w == 1 else f"{'parallel sampling' if mode == 'parallel' else 'beam search'}, width {w}"
            paper = (imp["basic sampling"] if w == 1 else imp["beam search, width 6"] if (mode, w) == ("beam", 6)
                     else None)
            row = {"measure": name,
                   "the paper, vLLM ÷ Orca (Oracle)": "—" if paper is None else f"{paper:g}× ({PAPER_FIG14['dataset']})"}
            for o in ORCA_SYSTEMS:
                sp = f.advantage[mode].get(w, {}).get(o)
                row[f"vLLM ÷ {PAPER_LABELS[o]}"] = "not stated" if sp is None else _adv(sp)
            rows.append(row)
    return rows


__all__ = ["fig14_rows", "fig14_texts"]
