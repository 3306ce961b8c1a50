"""``python -m allocator export-html``: the explainer's animation as one offline HTML file.

The file carries plotly.js and every frame, so it plays from a USB stick in any browser with no
server and no network. It takes the same scenario options as ``simulate`` (the parser is built
from ``simulate``'s own, so the two never drift apart) and runs the scenario the same way
(``allocator.engine.scenario.run_scenario``), so every file shows the numbers ``simulate`` prints;
``--gpu`` and ``--model`` are refused (the files count engine steps, not seconds).

Examples::

    python -m allocator export-html --workload classroom-40 --block-size 16 -o lesson.html
    python -m allocator export-html --workload azure-conv --sweep -o trace.html --handout handout.html
    python -m allocator export-html --workload classroom-40 --csv metrics.csv -o lesson.html --json

The figures are drawn by ``allocator.viz.explainer_chart`` and written by ``allocator.viz.export.html`` (neither
imports streamlit or ``pages``), the same functions the app uses.

Nothing is written until everything is known to be good: the settings, the trace and every output
path are checked first, then every file is drawn in memory, then all are written to temporary
names and renamed into place together (``allocator.cli.common.write_files``).
"""
from __future__ import annotations

import json

from allocator.cli import simulate as cli_simulate
from allocator.common.limits import LIMITS
from allocator.engine.scenario import build_workload, run_scenario, scenario_sweep
from allocator.common.validate import in_range
from allocator.cli.common import check_distinct, check_output, check_text, note, write_files


def register(sub) -> None:
    """Add the ``export-html`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser(
        "export-html", parents=[cli_simulate.scenario_parser()], conflict_handler="resolve",
        help="write the animated reserve-max vs paged figure as one offline HTML file",
        description="Simulate a scenario (same options as `simulate`) and write the explainer's animated "
                    "figure as a self-contained HTML file: plotly.js inline, no server or network needed.")
    p.add_argument("-o", "--out", required=True, metavar="FILE", help="HTML file to write")
    p.add_argument("--handout", metavar="FILE", help="also write a one-page printable handout (HTML)")
    p.add_argument("--csv", metavar="FILE", help="also write the per-step metrics of both allocators (CSV)")
    p.add_argument("--title", default=None, help="heading of the HTML page")
    # inherited from simulate, with the meaning they have here
    p.add_argument("--sweep", action="store_true", help="also include the block-size sweep chart")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    """Simulate, draw and write the file(s); returns the exit status.

    Raises:
        FieldError: bad scenario settings (e.g. block size 0, a block larger than the pool), a bad
            trace, ``--gpu`` or ``--model`` (the files count engine steps, not seconds), or an
            output path that cannot be written (``out``, ``handout``, ``csv``: a directory, a
            missing or read-only folder, the trace itself, two outputs naming one file, a full
            disk), naming the field; ``python -m allocator`` turns it into one line on stderr
            and exit status 2. Nothing is written unless every file can be.
    """
    from allocator.viz.explainer_chart import explainer_figure
    from allocator.viz.sweep_chart import sweep_figure  # plotly: imported only when exporting
    from allocator.viz.export.html import animation_html, metrics_csv, metrics_frame
    from allocator.viz.export.handout import handout_html

    sc = cli_simulate.scenario_from_args(args).checked()
    cli_simulate.refuse_timing(args, "export-html")
    in_range("total_slots", sc.slots, LIMITS["drawn_slots"])     # every frame's map holds every slot
    if args.title is not None:
        check_text("title", args.title)
    outputs = {field: path for field, path in (("out", args.out), ("handout", args.handout), ("csv", args.csv))
               if path is not None}
    for field, path in outputs.items():
        check_output(field, path)
    check_distinct(outputs, reading=args.trace)
    workload = build_workload(sc)
    note(cli_simulate.unused_options(args, sweep_only_cost=False))
    results = run_scenario(sc, workload)
    fig = explainer_figure(results)
    extra = []
    if args.sweep:
        rows = scenario_sweep(sc, workload)
        extra.append(sweep_figure(rows, sc.block_size, sc.metadata_cost, results["reserve_max"].summary))
    files = [("out", args.out, animation_html(sc, workload, results, fig, title=args.title, extra_figures=extra))]
    written = {"html": {"path": args.out, "bytes": len(files[0][2].encode("utf-8")), "frames": len(fig.frames)}}
    if args.handout is not None:
        files.append(("handout", args.handout, handout_html(sc, results, workload)))
        written["handout"] = {"path": args.handout, "bytes": len(files[-1][2].encode("utf-8"))}
    if args.csv is not None:
        files.append(("csv", args.csv, metrics_csv(results, sc, workload)))
        written["csv"] = {"path": args.csv, "bytes": len(files[-1][2].encode("utf-8")),
                          "rows": len(metrics_frame(results))}
    write_files(files)
    if args.json:
        print(json.dumps({"scenario": sc.as_dict(), "written": written}, indent=2))
    else:
        for kind, info in written.items():
            extra_info = f", {info['frames']} frames" if "frames" in info else ""
            print(f"wrote {info['path']} ({kind}, {info['bytes']:,} bytes{extra_info})")
    return 0
