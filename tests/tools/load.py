"""Classroom load test: one local server, N students at once (``make load``; ``--sessions N``).

Starts the app the way ``make run`` does (``python app.py``, loopback only, a free port), opens N
concurrent sessions that each load the explainer, move the block size one notch (16 -> 24, the
slider's ArrowRight) and play the animation, then prints a table: sessions, errors, p50/p95 time
to a rendered chart (seconds), server peak memory (RSS of the server's process tree) and server
CPU time. Always stops the server; a total time limit (``--time-limit``, default 240 s) bounds
everything.

Why most sessions are protocol clients, not browsers
----------------------------------------------------
A real Chromium tab spends 1-3 CPU-seconds parsing Streamlit's JavaScript and drawing a 2,048-cell
animated heatmap. On the lab's 2-core machine ten concurrent tabs took about 60 s each (measured
while writing this script): the browsers starved the server and each other, and the figure said
nothing about the server, whose load is what a classroom shares — in class every student's
browser runs on the student's own machine. So each of the N sessions is a lightweight client of
Streamlit's own wire protocol (the ``/_stcore/stream`` WebSocket with the BackMsg/ForwardMsg
protobufs the browser uses): it sends exactly the messages a browser sends (open the page, set the
block-size widget; with each rerun, the hashes of the large messages it holds, so the server sends
a reference instead of an unchanged element, as it does for a browser) and receives everything the
server sends (the ~1.9 MB animated figure included). Its "time to a rendered chart" is the time
until the chart's full figure has arrived; that is the server's share. Pressing Play costs the
server nothing (the frames play inside Plotly in the browser), so protocol sessions only hold their
connection for a moment where a student presses it.

Alongside them, ``--browsers K`` (default 1) real headless Chromium contexts do the full visible
flow — load, ArrowRight on the block-size slider, ▶ Play until the step label moves — under the
same load, to show that rendering still works; their times include drawing on this machine's
shared CPU and are reported on their own row. Chromium's threads are held at niceness
``--browser-nice`` (default 10; Chromium sets its own threads' priorities, so they are set again
four times a second) so that its drawing, which in class happens on the students' laptops, yields
the CPU to the server here; ``--browser-nice 0`` leaves Chromium's own priorities. ``--browsers 0`` skips them.

The class arrives after the server has settled: ``app.py`` computes the Throughput page's default
sweep and the Prefix cache page's windows in the background after it starts, so the sessions wait
until the server is idle (``--no-settle``: they arrive while those warm-ups still run).

Elements are found by their keys (the block-size slider ``block_size``, the maps chart ``maps``),
never by display text. The server's own time per script run (from the start of the page script to
its end, logged by ``app.py`` when ``KVLAB_RENDER_LOG`` is set) is reported beside the clients'
times: the gap between them is queueing for the CPU and sending the figure. So is where the CPU
went while the sessions ran (the server's process tree, the protocol clients, Chromium), the bytes
sent per load and per change, and the machine's load average before and after: the lab's machine
is shared, and a figure is only read beside them.

Server memory is sampled every 0.2 s from /proc (psutil when installed). Exit status 0 when every
session finished without an error and the p95 time to a chart met ``--target-p95``; 1 otherwise;
2 for a set-up failure (server would not start).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import sys
import time

from tests.tools.load_browser import keep_chromium_niced, launch_browser, run_browsers
from tests.tools.load_server import (BLOCK_KEY, MAPS_KEY, ROOT, _cpu_split, free_port, keyed, read_render_log,  # noqa: F401
                               sample_memory, settle, start_server, stop_server, wait_healthy)


# ------------------------------------------------------------------------- protocol sessions

def _proto():
    """Streamlit's protobuf classes (imported lazily: importing streamlit takes a moment)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    return BackMsg, ForwardMsg, WidgetState


def rerun_msg(widget_states: list | None = None, cached_hashes=()) -> bytes:
    """A serialized BackMsg ``rerun_script`` for the default page, with ``widget_states`` and, as a
    browser does, the hashes of the large messages it holds already (``cached_hashes``: the server
    then sends a short reference instead of a message the client has, e.g. an unchanged figure)."""
    BackMsg, _, _ = _proto()
    msg = BackMsg()
    cs = msg.rerun_script
    cs.query_string = ""
    cs.page_script_hash = ""
    cs.context_info.timezone = "UTC"
    cs.context_info.locale = "en-GB"
    for w in widget_states or []:
        cs.widget_states.widgets.append(w)
    cs.cached_message_hashes.extend(sorted(cached_hashes))
    return msg.SerializeToString()


class RunRecord:
    """What one script run sent back: the maps chart's arrival time (s after the request) and a
    hash of its figure, errors, the block-size slider's widget id and the bytes received."""

    def __init__(self):
        self.bytes = 0
        self.chart_s: float | None = None
        self.chart_hash: int | None = None
        self.errors: list[str] = []
        self.slider_id: str | None = None
        self.finished = False


async def read_run(ws, t0: float, deadline: float, cache: dict | None = None) -> RunRecord:
    """Read ForwardMsgs until ``script_finished`` (not an early finish for a rerun) or ``deadline``.
    ``cache`` (hash -> message) is the client's message cache, as a browser keeps one: messages the
    server marks cacheable are added to it, and a reference (``ref_hash``) is read from it.

    Raises:
        asyncio.TimeoutError: the run did not finish before ``deadline`` (monotonic seconds).
    """
    _, ForwardMsg, _ = _proto()
    rec = RunRecord()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise asyncio.TimeoutError
        data = await asyncio.wait_for(ws.recv(), left)
        rec.bytes += len(data)
        msg = ForwardMsg()
        msg.ParseFromString(data)
        kind = msg.WhichOneof("type")
        if cache is not None and kind == "ref_hash":
            if msg.ref_hash not in cache:
                rec.errors.append("the server referred to a message this client does not hold")
                continue
            msg = cache[msg.ref_hash]
            kind = msg.WhichOneof("type")
        elif cache is not None and msg.metadata.cacheable:
            cache[msg.hash] = msg
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            etype = el.WhichOneof("type")
            if etype == "plotly_chart" and rec.chart_s is None and keyed(el.plotly_chart.id, MAPS_KEY):
                rec.chart_s = time.monotonic() - t0          # the animated memory maps
                rec.chart_hash = hash(el.plotly_chart.spec)
            elif etype == "exception":
                rec.errors.append(f"exception: {el.exception.type}: {el.exception.message[:200]}")
            elif etype == "alert" and el.alert.format == 1:  # Alert.Format.ERROR
                rec.errors.append(f"error box: {el.alert.body[:200]}")
            elif etype == "slider" and keyed(el.slider.id, BLOCK_KEY):
                rec.slider_id = el.slider.id
        elif kind == "page_not_found":
            rec.errors.append("page not found")
        elif kind == "script_finished":
            if msg.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN:
                continue
            if msg.script_finished == ForwardMsg.FINISHED_WITH_COMPILE_ERROR:
                rec.errors.append("script compile error")
            rec.finished = True
            return rec


async def protocol_session(i: int, base: str, deadline: float, hold_s: float, stagger_s: float,
                           block_to: str) -> dict:
    """One student over Streamlit's WebSocket protocol: load, set the block size, 'play' (hold).

    Returns:
        {"kind": "protocol", "id", "load_s", "change_s", "errors": [...], "ok": bool}; times are
        seconds from sending the request to receiving the animated figure; None if never received.
    """
    from websockets.asyncio.client import connect
    _, _, WidgetState = _proto()
    out = {"kind": "protocol", "id": i, "load_s": None, "change_s": None, "errors": [], "ok": False,
           "load_bytes": None, "change_bytes": None}
    cache: dict = {}
    await asyncio.sleep(stagger_s)
    url = base.replace("http://", "ws://") + "/_stcore/stream"
    try:
        t0 = time.monotonic()
        async with connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60,
                           ping_interval=None, close_timeout=5, compression=None) as ws:
            await ws.send(rerun_msg())
            first = await read_run(ws, t0, deadline, cache)
            out["load_s"], out["errors"], out["load_bytes"] = first.chart_s, list(first.errors), first.bytes
            if first.chart_s is None:
                out["errors"].append("no animated chart on first load")
            if first.slider_id is None:
                out["errors"].append("block-size slider not found")
                return out
            w = WidgetState(id=first.slider_id)
            w.string_array_value.data.append(block_to)
            t1 = time.monotonic()
            await ws.send(rerun_msg([w], cache))
            second = await read_run(ws, t1, deadline, cache)
            out["change_s"], out["change_bytes"] = second.chart_s, second.bytes
            out["errors"] += second.errors
            if second.chart_s is None:
                out["errors"].append("no animated chart after the block-size change")
            if second.chart_s is not None and second.chart_hash == first.chart_hash:
                out["errors"].append(f"the memory maps did not change after block size -> {block_to}")
            # Play: frames animate inside the browser; the session just stays open meanwhile.
            await asyncio.sleep(min(hold_s, max(0.0, deadline - time.monotonic())))
    except asyncio.TimeoutError:
        out["errors"].append("timed out (total time limit)")
    except Exception as exc:  # connection refused/closed: count it, never hang
        out["errors"].append(f"{type(exc).__name__}: {exc}")
    out["ok"] = not out["errors"]
    return out


# ------------------------------------------------------------------------------------ report

def pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1, nearest-rank) of ``values``; None when empty."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    rank = max(1, min(len(vals), math.ceil(q * len(vals))))        # nearest rank: ceil(q n)
    return vals[rank - 1]


def summarize(rows: list[dict], key: str) -> tuple[float | None, float | None]:
    """(p50, p95) in seconds of ``key`` over ``rows`` (sessions without a value are left out)."""
    vals = [r[key] for r in rows if r.get(key) is not None]
    return pct(vals, 0.5), pct(vals, 0.95)


def fmt(x: float | None) -> str:
    """Seconds with two decimals, or an em dash for None."""
    return "—" if x is None else f"{x:.2f}"


def report(proto: list[dict], browsers: list[dict], mem: dict, wall: float, args,
           server_runs: list[float] = ()) -> tuple[str, dict]:
    """The result table (text) and the same figures as a dict; ``server_runs`` are the seconds of
    every script run the server logged while the sessions ran (``read_render_log``)."""
    lines = []
    header = (f"{'sessions':<26}{'n':>4}{'errors':>8}{'load p50':>10}{'load p95':>10}"
              f"{'change p50':>12}{'change p95':>12}{'play p50':>10}")
    lines.append(header)
    lines.append("-" * len(header))
    data = {}
    for name, rows in (("protocol (server share)", proto), (f"browser (Chromium nice {args.browser_nice})", browsers)):
        if not rows:
            continue
        lp50, lp95 = summarize(rows, "load_s")
        cp50, cp95 = summarize(rows, "change_s")
        pp50, _ = summarize(rows, "play_s")
        errs = sum(1 for r in rows if r["errors"])
        lines.append(f"{name:<26}{len(rows):>4}{errs:>8}{fmt(lp50):>10}{fmt(lp95):>10}{fmt(cp50):>12}"
                     f"{fmt(cp95):>12}{fmt(pp50):>10}")
        data[name.split()[0]] = {"sessions": len(rows), "errors": errs, "load_p50_s": lp50, "load_p95_s": lp95,
                                 "change_p50_s": cp50, "change_p95_s": cp95, "play_p50_s": pp50}
    all_chart = [r[k] for r in proto + browsers for k in ("load_s", "change_s") if r.get(k) is not None]
    p50, p95 = pct(all_chart, 0.5), pct(all_chart, 0.95)
    total_err = sum(1 for r in proto + browsers if r["errors"])
    lines.append("")
    lines.append(f"sessions {len(proto) + len(browsers)} ({len(proto)} protocol + {len(browsers)} browser) · "
                 f"errors {total_err} · time to a rendered chart p50 {fmt(p50)} s, p95 {fmt(p95)} s · "
                 f"server peak RSS {mem.get('peak_rss', 0) / 2**20:,.0f} MiB · server CPU {mem.get('cpu_s', 0):.1f} s · "
                 f"wall {wall:.1f} s")
    data.update({"sessions": len(proto) + len(browsers), "errors": total_err, "chart_p50_s": p50,
                 "chart_p95_s": p95, "server_peak_rss_mib": round(mem.get("peak_rss", 0) / 2**20, 1),
                 "server_cpu_s": round(mem.get("cpu_s", 0), 1), "wall_s": round(wall, 1),
                 "cpus": os.cpu_count(), "target_p95_s": args.target_p95,
                 "settings": {"stagger_s": args.stagger, "block_to": args.block_to, "warm": args.warm,
                              "settle": args.settle, "browser_nice": args.browser_nice,
                              "server_args": args.server_arg}})
    split = mem.get("cpu_split", {})
    lb, cb = (pct([r[k] for r in proto if r.get(k)], 0.5) for k in ("load_bytes", "change_bytes"))
    lines.append(f"where the CPU went while the sessions ran: server {split.get('server', 0):.1f} s, protocol clients "
                 f"{split.get('protocol_clients', 0):.1f} s, Chromium {split.get('browsers', 0):.1f} s (this machine: "
                 f"{os.cpu_count()} cores, load average {args.loadavg[0]:.1f} before, {os.getloadavg()[0]:.1f} after) · "
                 f"sent per protocol session (median): load {0 if lb is None else lb / 2**20:.2f} MiB, "
                 f"change {0 if cb is None else cb / 2**20:.2f} MiB")
    data.update({"cpu_s": split, "loadavg_before": args.loadavg[0], "loadavg_after": os.getloadavg()[0],
                 "load_bytes_p50": lb, "change_bytes_p50": cb})
    sp50, sp95 = pct(list(server_runs), 0.5), pct(list(server_runs), 0.95)
    lines.append(f"server-side script runs {len(server_runs)} · run time p50 {fmt(sp50)} s, p95 {fmt(sp95)} s, "
                 f"max {fmt(max(server_runs) if server_runs else None)} s (page script start to end, "
                 "beside the clients' time to a chart above)")
    data.update({"server_runs": len(server_runs), "server_run_p50_s": sp50, "server_run_p95_s": sp95})
    for r in proto + browsers:
        for e in r["errors"][:3]:
            lines.append(f"  {r['kind']} #{r['id']}: {e}")
    return "\n".join(lines), data


async def main_async(args) -> int:
    """Start the server, run the sessions, stop the server, print the table; the exit status."""
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    os.makedirs(os.path.join(ROOT, "test-artifacts"), exist_ok=True)
    log_path = os.path.join(ROOT, "test-artifacts", "load-server.log")
    t_start = time.monotonic()
    deadline = t_start + args.time_limit
    render_log = os.path.join(ROOT, "test-artifacts", f"load-render-{port}.tsv")
    with contextlib.suppress(OSError):
        os.remove(render_log)
    proc = start_server(port, log_path, args.server_arg, render_log)
    stop = asyncio.Event()
    mem: dict = {}
    try:
        try:
            await asyncio.to_thread(wait_healthy, proc, base, min(60.0, args.time_limit / 2))
        except RuntimeError as exc:
            print(f"error: {exc} (log: {log_path})", file=sys.stderr)
            return 2
        sampler = asyncio.create_task(sample_memory(proc.pid, stop, mem))
        if args.settle:     # the server was started before the class arrived: its warm-ups are done
            waited = await settle(proc.pid, min(180.0, args.time_limit))
            print(f"server settled {waited:.0f} s after it answered (start-up warm-ups done); "
                  f"load average {os.getloadavg()[0]:.1f}")
            args.loadavg = os.getloadavg()
            deadline = time.monotonic() + args.time_limit
        if args.warm:   # the teacher opened the page first: the default scenario is cached
            warm = await protocol_session(-1, base, deadline, 0.0, 0.0, args.block_to)
            print(f"warm-up session: load {fmt(warm['load_s'])} s, change {fmt(warm['change_s'])} s")
        pw, browser = await launch_browser(args.browsers)
        niced = (asyncio.create_task(keep_chromium_niced(args.browser_nice, stop))
                 if browser is not None and args.browser_nice > 0 else None)
        n_proto = max(0, args.sessions - args.browsers)
        t0, t0_epoch = time.monotonic(), time.time()
        cpu0 = _cpu_split(proc.pid)
        proto_task = asyncio.gather(*[protocol_session(i, base, deadline, args.hold,
                                                       args.stagger * i / max(1, n_proto), args.block_to)
                                      for i in range(n_proto)])
        browser_task = run_browsers(browser, args.browsers, base, deadline, args.stagger)
        try:
            proto, browsers = await asyncio.wait_for(
                asyncio.gather(proto_task, browser_task), max(1.0, deadline - time.monotonic() + 15))
            mem["cpu_split"] = {k: round(max(0.0, v - cpu0[k]), 1) for k, v in _cpu_split(proc.pid).items()}
        except asyncio.TimeoutError:
            print("error: sessions did not finish within the time limit", file=sys.stderr)
            return 1
        finally:
            if browser is not None:
                await browser.close()
                await pw.stop()
        wall = time.monotonic() - t0
        stop.set()
        await sampler
        if niced is not None:
            await niced
    finally:
        stop.set()
        stop_server(proc)
    text, data = report(list(proto), list(browsers), mem, wall, args, read_render_log(render_log, t0_epoch))
    print(text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"summary": data, "sessions": list(proto) + list(browsers)}, fh, indent=2)
    ok = data["errors"] == 0 and data["chart_p95_s"] is not None and data["chart_p95_s"] <= args.target_p95
    print(f"target: {args.sessions} sessions, no error, p95 <= {args.target_p95:g} s: {'met' if ok else 'NOT met'}")
    note = machine_note(data["loadavg_before"], os.cpu_count() or 1)
    if note:
        print(note)
    return 0 if ok else 1


def machine_note(loadavg_before: float, cpus: int) -> str:
    """The machine the target is stated for, when the run did not have it; '' when it did.

    The p95 <= 5 s target is stated for a server with the machine to itself: on the lab's 2-core
    machine it measured 3.7 s at load average 0.7 and 5.5 s at load average 6.3 (both 2026-12-03,
    README "make load"). A run that starts with the load average above half the cores shares the
    CPU with other work, and its time is read beside that load, not against the target alone.

    Args:
        loadavg_before: the 1-minute load average when the sessions started.
        cpus: the machine's logical CPU count.
    """
    if loadavg_before <= cpus / 2:
        return ""
    return (f"note: the machine was busy (load average {loadavg_before:.1f} on {cpus} cores); the target is "
            f"stated for a server with the machine to itself, so read this time beside that load")


def main(argv: list[str] | None = None) -> int:
    """Parse options, run the load test, print the table; returns the exit status (0 ok, 1 failed, 2 set-up)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sessions", type=int, default=40, help="concurrent sessions in all (default 40)")
    p.add_argument("--browsers", type=int, default=1,
                   help="how many of them are real Chromium contexts (default 1; 0 = protocol only)")
    p.add_argument("--time-limit", type=float, default=240.0, help="total seconds before giving up (default 240)")
    p.add_argument("--stagger", type=float, default=0.0,
                   help="spread the session starts over this many seconds (default 0: all at once)")
    p.add_argument("--hold", type=float, default=2.0, help="seconds each session stays open to 'play' (default 2)")
    p.add_argument("--block-to", default="24", help="block size each session switches to (default 24)")
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="start the sessions as soon as the server answers, while its start-up warm-ups still "
                        "run (default: wait until the server is idle, as when it was started before class)")
    p.add_argument("--browser-nice", type=int, default=10,
                   help="hold Chromium's threads at this niceness (default 10), so the browsers' drawing on this "
                        "machine yields the CPU to the server, as students' own laptops would; 0 = Chromium's own")
    p.add_argument("--warm", action="store_true", help="open one session first (the teacher's), so the "
                   "default scenario is already cached")
    p.add_argument("--target-p95", type=float, default=5.0, help="p95 time to a chart to meet (s, default 5)")
    p.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    p.add_argument("--json", metavar="FILE", help="also write the per-session results as JSON")
    p.add_argument("--server-arg", action="append", default=[], metavar="OPT",
                   help="extra `streamlit run` option for the server, repeatable "
                        "(e.g. --server-arg=--runner.postScriptGC=false)")
    args = p.parse_args(argv)
    args.loadavg = os.getloadavg()
    if args.sessions < 1 or args.browsers < 0 or args.browsers > args.sessions:
        p.error("need --sessions >= 1 and 0 <= --browsers <= --sessions")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
