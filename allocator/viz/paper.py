"""Plotly figures of the paper replication (:mod:`allocator.studies.paper`), no streamlit import.

Every figure sets the paper's value beside this model's: the paper's bars are hatched and named
"the paper", this model's are solid. Colours keep their app-wide meanings (:mod:`allocator.viz.theme`):
a request colour for stored tokens, orange for memory allocated and holding nothing (the
reservation dotted, the rest solid), grey for free memory; black for the reservation baselines and
blue for paged in line and bar charts, as on the rest of the Throughput page.
"""
from __future__ import annotations

import plotly.graph_objects as go

from allocator.studies.paper import PAPER_FIGURES, PAPER_LABELS, SYSTEMS, paper_cost
from allocator.viz.claims.paper import fig12_note
from allocator.viz.theme import GREY_FREE, ORANGE_EMPTY, REQUEST_COLOURS
from allocator.viz.throughput import BUDGET_COLOUR, CHART_LAYOUT, STYLE, chart_title, log_axis

TOKEN_COLOUR = REQUEST_COLOURS[1]
#: Figure 2's four uses of memory: (key, legend name, colour, pattern).
SHARES = (("token_states", "token states (stored tokens)", TOKEN_COLOUR, ""),
          ("reservation", "reservation (room for tokens the request will still write)", ORANGE_EMPTY, "/"),
          ("internal", "internal fragmentation (reserved beyond the request's length)", ORANGE_EMPTY, ""),
          ("external", "external fragmentation and other (free)", GREY_FREE, ""))


def fig2_figure(rep) -> go.Figure:
    """Figure 2 in the artifact's categories (the paper's): each system's KV memory by use, the
    paper's bar beside ours. The paper labels every part of the three Orca bars and only the token
    states of vLLM's; the rest of the paper's vLLM bar is left as "not split here"."""
    paper = PAPER_FIGURES["fig2"]
    xs = [f"{PAPER_LABELS[s]}<br>{who}" for s in SYSTEMS for who in ("the paper", "this model")]
    fig = go.Figure()
    for key, name, colour, shape in SHARES:
        ys, texts = [], []
        for s in SYSTEMS:
            if key == "token_states":
                pv = paper["token_states"][s]
            else:
                pv = paper["splits"].get(s, {}).get(key)
            ours = rep.fig2[s]["artifact"][key]
            ys += [None if pv is None else 100 * pv, 100 * ours]
            texts += ["" if pv is None or pv < 0.05 else f"{100 * pv:.1f}", "" if ours < 0.05 else f"{100 * ours:.1f}"]
        fig.add_bar(x=xs, y=ys, name=name, text=texts, textposition="inside", insidetextanchor="middle",
                    marker=dict(color=colour, line=dict(color="#333333", width=1),
                                pattern=dict(shape=shape, fgcolor="#7A4F00", bgcolor=colour, size=10,
                                             solidity=0.15)),
                    textfont=dict(size=13, color="white" if key == "token_states" else "black"),
                    customdata=[name] * len(ys),
                    hovertemplate="%{x}<br>%{customdata}: %{y:.1f} % of KV memory<extra></extra>")
    rest = [None if s in paper["splits"] else 100 * (1 - paper["token_states"][s]) for s in SYSTEMS]
    fig.add_bar(x=[f"{PAPER_LABELS[s]}<br>the paper" for s in SYSTEMS], y=rest,
                name="the paper's other uses (not labelled in its figure)",
                marker=dict(color="white", line=dict(color="#888888", width=1), pattern=dict(shape="/", fgcolor="#BBBBBB")),
                hovertemplate="%{x}<br>the paper's other uses: %{y:.1f} % (not labelled)<extra></extra>")
    fig.update_layout(barmode="stack", height=560, bargap=0.25,
                      title=chart_title(f"Figure 2 — KV memory by use at {paper['rate']:g} requests/s (paper's scale), "
                                        "the artifact's categories"),
                      **{**CHART_LAYOUT, "margin": dict(l=60, r=20, t=40, b=40),
                         "legend": dict(orientation="h", yanchor="top", y=-0.16, x=0, traceorder="normal")})
    fig.update_yaxes(title_text="share of KV memory (%)", range=[0, 100], gridcolor="#eee")
    fig.update_xaxes(title_text=None, tickangle=0)
    return fig


def fig13_figure(rep) -> go.Figure:
    """Figure 13: mean batched requests per system, the paper's (hatched) beside ours (solid): the
    mean over the arrival seeds with an error bar of one standard deviation when the spread was
    computed (else the one seed's value); the hover gives the spread and the error."""
    paper = PAPER_FIGURES["fig13"]["batch"]
    cats = [PAPER_LABELS[s] for s in SYSTEMS]
    colours = [STYLE[s][0] for s in SYSTEMS]
    sp = rep.fig13_spread.get("burst")
    fig = go.Figure()
    fig.add_bar(x=cats, y=[paper[s] for s in SYSTEMS], name="the paper's Figure 13", showlegend=False,
                marker=dict(color="white", line=dict(color=colours, width=2),
                            pattern=dict(shape="/", fgcolor=colours, size=8, solidity=0.3)),
                text=[f"{paper[s]:.2f}" for s in SYSTEMS], textposition="outside", textfont=dict(size=13),
                constraintext="none", cliponaxis=False,
                hovertemplate="%{x}<br>the paper: %{y:.2f} requests batched on average<extra></extra>")
    ours = [rep.fig13_mean(s) for s in SYSTEMS]
    if sp:
        err = dict(type="data", array=[sp[s]["std"] for s in SYSTEMS], visible=True, color="#333333")
        spread_text = [f"mean of {len(sp[s]['values'])} seeds, sd {sp[s]['std']:.2f}, {sp[s]['min']:.1f}–{sp[s]['max']:.1f}"
                       for s in SYSTEMS]
    else:
        err, spread_text = None, ["one arrival seed"] * len(SYSTEMS)
    fig.add_bar(x=cats, y=ours, name="this model", marker=dict(color=colours), showlegend=False, error_y=err,
                text=[f"{v:.2f}" for v in ours],
                customdata=[[f"{100 * (v / paper[s] - 1):+.1f} %", t] for v, s, t in zip(ours, SYSTEMS, spread_text)],
                textposition="outside", textfont=dict(size=13), constraintext="none", cliponaxis=False,
                hovertemplate="%{x}<br>this model: %{y:.2f} requests batched on average (%{customdata[1]}; "
                              "%{customdata[0]} against the paper)<extra></extra>")
    fig.add_bar(x=[None], y=[None], name="the paper's Figure 13 (hatched outline)",
                marker=dict(color="white", line=dict(color=BUDGET_COLOUR, width=2),
                            pattern=dict(shape="/", fgcolor=BUDGET_COLOUR, size=8, solidity=0.3)),
                hovertemplate="the paper's value<extra></extra>")
    fig.add_bar(x=[None], y=[None], name="this model (solid; bar: ± 1 sd over the seeds)" if sp else "this model (solid)",
                marker=dict(color=BUDGET_COLOUR), hovertemplate="this model's value<extra></extra>")
    top = max(max(ours), max(paper.values()))
    fig.update_layout(barmode="group", height=470,
                      title=chart_title(f"Figure 13 — requests batched at {PAPER_FIGURES['fig13']['rate']:g} requests/s "
                                        "(paper's scale)"), **CHART_LAYOUT)
    fig.update_yaxes(title_text="mean batched requests (per step)", range=[0, top * 1.2], gridcolor="#eee")
    fig.update_xaxes(title_text="system")
    return fig


def fig12_figure(rep) -> go.Figure:
    """Figure 12: normalised latency against request rate (the paper's rate scale) for each system
    at the rates the artifact sweeps it, the latency budget, and each system's knee (sustained rate)."""
    fig = go.Figure()
    budget = rep.budget_s_per_token
    allx = [pt["paper_rate"] for s in SYSTEMS for pt in rep.fig12[s]]
    fig.add_trace(go.Scatter(x=[0, max(allx) * 1.05], y=[budget, budget], mode="lines", name="latency budget",
                             line=dict(color=BUDGET_COLOUR, dash="dashdot", width=1.5),
                             hovertemplate=f"budget: {budget:.4f} s/token<extra></extra>"))
    ys = [budget]
    for s in SYSTEMS:
        colour, dash, symbol = STYLE[s]
        pts = rep.fig12[s]
        y = [p["normalized_latency_s_per_token"] for p in pts]
        ys += [v for v in y if v]
        beyond = [bool(p.get("beyond_artifact")) for p in pts]
        sp = rep.fig12_spread.get(s)
        bars = {}
        if sp:                     # the range over the arrival seeds, around this seed's point
            ys += [v["max"] for v in sp] + [v["min"] for v in sp]
            bars = dict(error_y=dict(type="data", symmetric=False, array=[v["max"] - yv for v, yv in zip(sp, y)],
                                     arrayminus=[yv - v["min"] for v, yv in zip(sp, y)], color=colour, thickness=1.5,
                                     width=5))
        fig.add_trace(go.Scatter(
            x=[p["paper_rate"] for p in pts], y=y, mode="lines+markers", name=f"{PAPER_LABELS[s]} (this model)",
            **bars,
            line=dict(color=colour, dash=dash, width=2.5),
            marker=dict(symbol=[f"{symbol}-open" if b else symbol for b in beyond], size=9, color=colour,
                        line=dict(width=2, color=colour)),
            customdata=([[p["rate"], v["mean"], v["min"], v["max"], len(v["values"])] for p, v in zip(pts, sp)] if sp
                        else [[p["rate"]] for p in pts]),
            hovertemplate=f"<b>{PAPER_LABELS[s]}</b><br>%{{x:g}} requests/s on the paper's scale "
                          "(%{customdata[0]:.2f} here)<br>%{y:.4f} s/token (seed " + str(rep.seed) + ")"
                          + ("<br>over %{customdata[4]} seeds: mean %{customdata[1]:.4f}, "
                             "range %{customdata[2]:.4f}–%{customdata[3]:.4f}" if sp else "")
                          + "<extra></extra>"))
        sus = rep.sustained[s]
        if sus["rate"] is not None:
            above = sus["bound"] == "above"
            fig.add_trace(go.Scatter(
                x=[sus["rate"]], y=[budget], mode="markers", showlegend=False,
                marker=dict(symbol="arrow-right" if above else "x-thin-open", size=16, line=dict(width=3),
                            color=colour),
                hovertemplate=f"<b>{PAPER_LABELS[s]}</b> knee: "
                              + ("at least " if sus["bound"] == "above" else "")
                              + f"{sus['rate']:.2f} requests/s (paper's scale)<extra></extra>"))
    fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers",
                             name="knee (sustained rate): crosses the latency budget",
                             marker=dict(symbol="x-thin-open", size=14, line=dict(width=3), color=BUDGET_COLOUR),
                             hovertemplate="a knee<extra></extra>"))
    if rep.fig12_spread:
        n = len(next(iter(rep.fig12_spread.values()))[0]["values"])
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"bar: range over {n} arrival seeds "
                                 f"(line: seed {rep.seed})",
                                 marker=dict(symbol="line-ns-open", size=14, color=BUDGET_COLOUR, line=dict(width=2)),
                                 hovertemplate="the range over seeds<extra></extra>"))
    if any(p.get("beyond_artifact") for s in SYSTEMS for p in rep.fig12[s]):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name="open marker: a rate past the artifact's",
                                 marker=dict(symbol="circle-open", size=10, color=BUDGET_COLOUR, line=dict(width=2)),
                                 hovertemplate="beyond the artifact's rates<extra></extra>"))
    if any(rep.sustained[s]["bound"] == "above" for s in SYSTEMS):
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers",
                                 name="no knee inside the sweep: sustains at least its highest rate",
                                 marker=dict(symbol="arrow-right", size=14, color=BUDGET_COLOUR),
                                 hovertemplate="a lower bound<extra></extra>"))
    fig.add_annotation(text=fig12_note(rep), xref="paper", yref="paper", x=0, y=1.02, xanchor="left",
                       yanchor="bottom", showarrow=False, align="left", font=dict(size=13, color="#333333"))
    fig.update_xaxes(title_text="request rate (requests/s, the paper's scale)", gridcolor="#eee", rangemode="tozero")
    fig.update_yaxes(title_text=f"normalised latency (s/token, {paper_cost().short_name}, log scale)", gridcolor="#eee",
                     **log_axis(ys))
    fig.update_layout(height=560, title=chart_title("Figure 12 — latency as the load rises (OPT-13B, ShareGPT)"),
                      **{**CHART_LAYOUT, "margin": dict(l=60, r=20, t=100, b=60)})
    return fig


def fig19a_figure(abl) -> go.Figure:
    """Figure 19a: seconds to swap 256 tokens out and in against block size (with and without the
    per-transfer latency), and to recompute them (flat), on this model's roofline."""
    m = abl.micro
    x = m["block_sizes"]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=x, y=[1e3 * v for v in m["swap_out_in_s"]], mode="lines+markers",
                             name="swap out + in (this model)", line=dict(color=STYLE["paged"][0], width=2.5),
                             hovertemplate="block %{x}: swap %{y:.1f} ms<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=[1e3 * v for v in m["swap_no_latency_s"]], mode="lines+markers",
                             name="swap, without the per-transfer latency", line=dict(color=STYLE["paged"][0], dash="dot"),
                             hovertemplate="block %{x}: %{y:.1f} ms with no per-copy latency<extra></extra>"))
    fig.add_trace(go.Scatter(x=x, y=[1e3 * m["recompute_s"]] * len(x), mode="lines", name="recompute (this model)",
                             line=dict(color=BUDGET_COLOUR, width=2.5),
                             hovertemplate="recompute: %{y:.1f} ms at every block size<extra></extra>"))
    fig.update_xaxes(title_text="block size (tokens, log scale)", type="log", tickvals=x, ticktext=[str(b) for b in x])
    fig.update_yaxes(title_text=f"time for {m['tokens']} tokens (ms, {paper_cost().short_name})", rangemode="tozero", gridcolor="#eee")
    fig.update_layout(height=420, title=chart_title("Figure 19a — swap against recompute, per block size"), **CHART_LAYOUT)
    return fig


def fig18b_figure(abl) -> go.Figure:
    """Figures 18b and 19b: end-to-end normalised latency against block size with recompute and
    with swap, mean over the seeds with ± 1 sd bars; the paper's best range shaded."""
    from allocator.studies.ablations import PAPER_ABLATIONS

    lo, hi = PAPER_ABLATIONS["fig18b"]["best_block_sizes"]
    fig = go.Figure()
    fig.add_vrect(x0=lo, x1=hi, fillcolor="#DDDDDD", opacity=0.4, line_width=0,
                  annotation_text="the paper's best block sizes (ShareGPT)", annotation_position="top left")
    for mode, colour, dash in (("recompute", BUDGET_COLOUR, "solid"), ("swap", STYLE["paged"][0], "dash")):
        d = abl.e2e[mode]
        x = list(d)
        fig.add_trace(go.Scatter(x=x, y=[d[b]["mean"] for b in x], mode="lines+markers", name=f"{mode} (this model)",
                                 line=dict(color=colour, dash=dash, width=2.5),
                                 error_y=dict(type="data", array=[d[b]["std"] for b in x], visible=True),
                                 hovertemplate=f"block %{{x}}, {mode}: %{{y:.4f}} s/token (mean of {len(abl.seeds)} "
                                               "seeds)<extra></extra>"))
    x = list(abl.e2e["recompute"])
    ys = [v["mean"] for m in abl.e2e.values() for v in m.values()]
    fig.update_xaxes(title_text="block size (tokens, log scale)", type="log", tickvals=x, ticktext=[str(b) for b in x])
    fig.update_yaxes(title_text=f"normalised latency (s/token, {paper_cost().short_name}, log scale)", gridcolor="#eee",
                     **log_axis(ys))
    fig.update_layout(height=460, title=chart_title(f"Figures 18b and 19b — block size end to end, ShareGPT at "
                                                    f"{abl.rate:.2f} requests/s"), **CHART_LAYOUT)
    return fig


def targets_rows(rep) -> list[dict]:
    """The targets table as display rows: measure, the paper's value, this model's, the error and
    whether it is within the tolerance (named in the same cell)."""
    rows = []
    for r in rep.targets():
        paper, ours = r["paper"], r["ours"]
        if r["figure"] == "Figure 13" and isinstance(paper, float):
            paper, ours = f"{paper:.2f}", f"{ours:.2f}"
        elif isinstance(paper, float):
            paper, ours = f"{paper:.1f} %", f"{ours:.1f} %"
        ours = f"{ours}{r.get('spread', '')}"
        rows.append({"measure": f"{r['figure']}: {r['measure']}", "the paper": str(paper), "this model": str(ours),
                     "error": r["error"], "within tolerance": ("— " if r["ok"] is None else "yes " if r["ok"] else "no ") + f"({r['tolerance']})"})
    return rows


__all__ = ["fig2_figure", "fig13_figure", "fig12_figure", "fig18b_figure", "fig19a_figure", "targets_rows"]
