"""``python -m allocator export-site DIR``: the lesson as a static folder for any static host.

The folder (``index.html``, plotly.js, the page's script and style, and data as ``<script>``
files) opens from ``file://`` -- a USB stick -- or from any static web host, with no server and no
network: the block-size slider, the animation, the cards, the sweep with its metadata-cost
slider, the guided lesson, presentation mode and the arithmetic pages all work offline. It takes
the same scenario options as ``simulate`` and runs each block size the same way
(``allocator.engine.scenario.run_scenario``, every setting honoured: placement, prefix caching,
policy, preemption, shared prefix); ``--block-size`` is where the slider starts. ``--gpu`` and
``--model`` are refused (the site counts engine steps, not seconds).

Examples::

    python -m allocator export-site site/
    python -m allocator export-site site/ --workload azure-conv --json
    python -m allocator export-site lesson.zip --zip

Nothing is written until the whole site is built in memory and the destination is known to be
good (a missing or empty folder, or one holding an earlier export); then every file is written
whole or none is (``allocator.cli.common.write_files``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from allocator.common.errors import FieldError
from allocator.common.limits import LIMITS
from allocator.common.validate import in_range, show
from allocator.cli import simulate as cli_simulate
from allocator.cli.common import add_pending, check_output, done_pending, note, write_files


def register(sub) -> None:
    """Add the ``export-site`` sub-command to ``sub`` (an argparse sub-parsers object)."""
    p = sub.add_parser(
        "export-site", parents=[cli_simulate.scenario_parser()], conflict_handler="resolve",
        help="write the lesson as a static site (index.html + data) for file:// or any static host",
        description="Precompute a scenario at every block size of the sweep and write a static folder: "
                    "index.html, plotly.js and data files, no server or network needed. The same scenario "
                    "options as `simulate`; --block-size is where the slider starts.")
    p.add_argument("out", metavar="DIR", help="folder to write (created; may hold an earlier export), or with "
                   "--zip the zip file to write")
    p.add_argument("--zip", action="store_true", help="write one zip file of the folder instead")
    p.add_argument("--sweep", action="store_true", help=argparse.SUPPRESS)   # the site always has the sweep
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def _check_folder(path: str) -> None:
    """Refuse a destination folder that exists and holds anything but an earlier export."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise FieldError("out", f" = {show(path, 120)} is a file, not a folder (use --zip to write one zip file)")
    if os.path.isdir(path):
        entries = set(os.listdir(path))
        # empty folders alone (what an export that failed before issue 42 left) do not block a retry
        leftovers = all(os.path.isdir(os.path.join(path, e)) and not os.listdir(os.path.join(path, e))
                        for e in entries)
        if entries and "index.html" not in entries and not leftovers:
            raise FieldError("out", f" = {show(path, 120)} is a folder that is not empty and holds no earlier "
                             "export (index.html); choose a new or empty folder")
        if not os.access(path, os.W_OK):
            raise FieldError("out", f" = {show(path, 120)} is not writable")
    else:
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FieldError("out", f" = {show(path, 120)}: its parent folder does not exist")
        if not os.access(parent, os.W_OK):
            raise FieldError("out", f" = {show(path, 120)}: its parent folder is not writable")


def _make_folders(out: str, subfolders: list[str]) -> list[str]:
    """Create ``out`` and its ``subfolders`` where missing; returns the folders this call created,
    parents first (what a failed export removes again)."""
    made = []
    for sub in [""] + sorted(set(f for f in subfolders if f)):
        parts = [p for p in sub.split("/") if p]
        for i in range(len(parts) + 1):
            folder = os.path.join(out, *parts[:i])
            if not os.path.isdir(folder):
                os.mkdir(folder)
                made.append(folder)
    return made


def progress_line(stream, quiet: bool):
    """What ``export-site`` shows while it builds (14 s for the default scenario on the lab's 2-core
    server, minutes for a pool of millions of slots): one line on
    ``stream`` (stderr), rewritten in place for each step ``build_site`` reports, e.g. ``building the
    site: block size 16 (5 of 9)... 12 s``. Nothing when ``quiet`` (``--json``) or when ``stream``
    is not a terminal (piped or redirected), so a pipe or a log gets only the result.

    Returns:
        ``(report, finish)``: ``report(text)`` for ``build_site(progress=...)`` (None when quiet) and
        ``finish()``, which blanks the line again (call it however the build ends).
    """
    isatty = getattr(stream, "isatty", None)
    if quiet or not (isatty and isatty()):
        return None, lambda: None
    start, width = time.monotonic(), [0]

    def report(text: str) -> None:
        line = f"building the site: {text}\u2026 {time.monotonic() - start:.0f} s"
        stream.write("\r" + line + " " * max(0, width[0] - len(line)))
        stream.flush()
        width[0] = len(line)

    def finish() -> None:
        if width[0]:
            stream.write("\r" + " " * width[0] + "\r")
            stream.flush()
            width[0] = 0
    return report, finish


def run(args) -> int:
    """Build the site and write it; returns the exit status.

    Raises:
        FieldError: bad scenario settings, a bad trace, ``--gpu`` or ``--model``, or a destination
            that cannot be written, naming the field; ``python -m allocator`` prints it as one line, exit status 2.
            Nothing is written unless every file can be.
    """
    from allocator.viz.export.site import build_site, site_bytes, site_zip

    sc = cli_simulate.scenario_from_args(args).checked()
    cli_simulate.refuse_timing(args, "export-site")
    # the site draws the pool slot by slot at every step, as export-html does: the same bound, up front
    in_range("total_slots", sc.slots, LIMITS["drawn_slots"])
    if args.zip:
        check_output("out", args.out)
    else:
        _check_folder(args.out)
    note(cli_simulate.unused_options(args, sweep_only_cost=False))
    report, finish = progress_line(sys.stderr, quiet=args.json)
    try:
        files = build_site(sc, progress=report)
    finally:
        finish()
    if args.zip:
        data = site_zip(files)
        tmp = args.out + ".part"
        add_pending(tmp)                      # removed even if the process must end at once
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
            os.replace(tmp, args.out)
        finally:                              # a failed or interrupted write leaves no partial file behind
            done_pending(tmp)
            if os.path.exists(tmp):
                os.remove(tmp)
        written = {"path": args.out, "bytes": len(data), "files": len(files), "site_bytes": site_bytes(files)}
    else:
        made = _make_folders(args.out, [os.path.dirname(name) for name in files])
        try:
            write_files([("out", os.path.join(args.out, name), content.decode("utf-8"))
                         for name, content in files.items()])
        except BaseException:                 # a failed or interrupted export leaves no folder that blocks a retry
            for folder in reversed(made):
                try:
                    os.rmdir(folder)          # only if empty: an earlier export's files stay
                except OSError:
                    pass
            raise
        written = {"path": args.out, "bytes": site_bytes(files), "files": sorted(files)}
    if args.json:
        print(json.dumps({"scenario": sc.as_dict(), "written": written}, indent=2))
    else:
        print(f"wrote {written['path']} ({written['bytes']:,} bytes"
              + (", zip" if args.zip else f", {len(files)} files; open {os.path.join(args.out, 'index.html')}") + ")")
    return 0
