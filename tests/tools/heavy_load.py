"""Heavy work at once, then one light change (issue 19): ``python -m tests.tools.heavy_load``.

Starts the app (as ``tests/tools/load.py`` does), opens ``--heavy`` sessions (default 6) at once on the
heaviest in-range action of one page, then, ``--light-after`` seconds later, a seventh student's
light change: the default lesson on the explainer, block size 16 -> 24. Prints the light student's
times, how many heavy sessions finished within the time limit and what they were shown ("Queued",
progress), and the server's peak memory. Bounded by ``--time-limit``; the server is always stopped.

``--page explainer`` (default): each heavy student opens a different heaviest-in-range explainer
link (200 Azure trace requests behind a 4,096-token shared prompt, 2**20 slots in blocks of 1,
200 steps per second; each at its own row offset, so nothing is shared).

``--page throughput``: each heavy student opens the Throughput page and asks for the largest sweep
its widgets allow (5,000 requests per run, 16 rates, :data:`RATES`): the same sweep for all six
(the issue's case: a class told to try the largest sweep), or with ``--distinct`` six different
rate lists (nothing to share: six sweeps take turns in the queue). A teacher's session opens the
page first (the default sweep is then ready, as when the teacher projects it). An eighth student
on the Throughput page moves the latency budget (5 -> 10, no new sweep) as a second light change.

``--no-queue`` runs the same with the heavy-work queue opened wide (``KVLAB_HEAVY_SLOTS=64``), i.e.
the server as it was before ``pages/_ui/heavy.py``. Exit status 0 when every light change drew its
chart within ``--target`` seconds (default 5) and peak memory stayed under ``--memory-mib`` (2048).
As in ``tests/tools/load.py``, the students arrive once the server has settled (``--no-settle``: while
``app.py``'s start-up warm-ups still hold the heavy-work queue).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from urllib.parse import urlencode

from tests.tools import load

HEAVY = {"workload": "azure-conv", "count_azure-conv": "200", "slots_azure-conv": str(1 << 20),
         "max_new_azure-conv": "32768", "block_size": "1", "shared_prefix": "4096",
         "steps_per_second_azure-conv": "200"}
#: The largest in-range Throughput sweep: the widget's most requests per run and the most rates
#: ``allocator.studies.rate_sweep.parse_rates`` accepts (16), spread over the page's default GPU's range.
REQUESTS = 5000
RATES = (0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 10, 12, 14, 16)
#: The Throughput page's widget and chart keys (stable; never display text).
TP_REQUESTS, TP_RATES, TP_FACTOR, TP_CHART = "tp_requests", "tp_rates", "tp_factor", "tp_latency"


def rerun(query: str, widgets=None, page: str = "") -> bytes:
    """A BackMsg rerun for the page at URL path ``page`` ("" the explainer) with ``query``."""
    BackMsg, _, _ = load._proto()
    msg = BackMsg()
    msg.ParseFromString(load.rerun_msg(widgets))
    msg.rerun_script.query_string = query
    msg.rerun_script.page_name = page
    return msg.SerializeToString()


async def read_page(ws, t0: float, deadline: float, chart_key: str) -> dict:
    """Read one script run: {"chart_s", "ids" (widget key -> id), "queued", "progress" (texts),
    "errors", "finished"}; stops at ``script_finished`` or ``deadline``."""
    _, ForwardMsg, _ = load._proto()
    out = {"chart_s": None, "ids": {}, "queued": False, "progress": [], "errors": [], "finished": False}
    while time.monotonic() < deadline:
        try:
            data = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            break
        msg = ForwardMsg()
        msg.ParseFromString(data)
        kind = msg.WhichOneof("type")
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            etype = el.WhichOneof("type")
            inner = getattr(el, etype)
            eid = getattr(inner, "id", "")
            for key in (TP_REQUESTS, TP_RATES, TP_FACTOR):
                if eid and load.keyed(eid, key):
                    out["ids"][key] = eid
            if etype == "alert" and el.alert.body.startswith("Queued"):
                out["queued"] = True
            elif etype == "alert" and el.alert.format == 1:
                out["errors"].append(f"error box: {el.alert.body[:200]}")
            elif etype == "exception":
                out["errors"].append(f"exception: {el.exception.type}: {el.exception.message[:200]}")
            elif etype == "progress" and el.progress.text.startswith("Simulating"):   # a run's real progress
                out["progress"].append(el.progress.text)
            elif etype == "plotly_chart" and out["chart_s"] is None and load.keyed(el.plotly_chart.id, chart_key):
                out["chart_s"] = time.monotonic() - t0
        elif kind == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            out["finished"] = True
            break
    return out


def _connect(base: str):
    from websockets.asyncio.client import connect
    return connect(base.replace("http://", "ws://") + "/_stcore/stream", subprotocols=["streamlit"],
                   max_size=None, open_timeout=60, ping_interval=None, compression=None)


def _widget(wid: str, **value):
    _, _, WidgetState = load._proto()
    w = WidgetState(id=wid)
    for field, v in value.items():
        if isinstance(v, (list, tuple)):
            getattr(w, field).data.extend(v)
        else:
            setattr(w, field, v)
    return w


async def throughput_student(i: int, base: str, deadline: float, rates: str | None, factor: float | None) -> dict:
    """One student on the Throughput page: open it, then either ask for the sweep of ``rates`` at
    :data:`REQUESTS` requests (a heavy student) or move the latency budget to ``factor`` (a light
    one). ``change_s``: seconds from the change to the latency chart."""
    out = {"id": i, "load_s": None, "change_s": None, "queued": False, "progress": [], "errors": []}
    try:
        async with _connect(base) as ws:
            t0 = time.monotonic()
            await ws.send(rerun("", page="throughput"))
            first = await read_page(ws, t0, deadline, TP_CHART)
            out["load_s"], out["errors"] = first["chart_s"], first["errors"]
            if set(first["ids"]) != {TP_REQUESTS, TP_RATES, TP_FACTOR}:
                out["errors"].append(f"widgets found: {sorted(first['ids'])}")
                return out
            widgets = ([_widget(first["ids"][TP_REQUESTS], int_value=REQUESTS),
                        _widget(first["ids"][TP_RATES], string_value=rates)] if rates is not None
                       else [_widget(first["ids"][TP_FACTOR], double_array_value=[float(factor)])])
            t1 = time.monotonic()
            await ws.send(rerun("", widgets, page="throughput"))
            second = await read_page(ws, t1, deadline, TP_CHART)
            out.update(change_s=second["chart_s"], queued=second["queued"], progress=second["progress"])
            out["errors"] += second["errors"]
    except Exception as exc:                          # noqa: BLE001 - reported, never hangs
        out["errors"].append(f"{type(exc).__name__}: {exc}")
    return out


async def explainer_heavy(i: int, base: str, deadline: float) -> dict:
    """One student on a heavy explainer link: time to the maps, and whether the queue message came."""
    out = {"id": i, "load_s": None, "change_s": None, "queued": False, "progress": [], "errors": []}
    query = urlencode({**HEAVY, "offset_azure-conv": str(1000 * i)})
    try:
        async with _connect(base) as ws:
            t0 = time.monotonic()
            await ws.send(rerun(query))
            run = await read_page(ws, t0, deadline, load.MAPS_KEY)
            out.update(change_s=run["chart_s"], queued=run["queued"], errors=run["errors"])
    except Exception as exc:                          # noqa: BLE001 - reported, never hangs
        out["errors"].append(f"{type(exc).__name__}: {exc}")
    return out


def rates_for(i: int, distinct: bool) -> str:
    """Student ``i``'s rate list: :data:`RATES`, or (``distinct``) each rate times (1 + i/100)."""
    scale = 1 + i / 100 if distinct else 1
    return ", ".join(f"{r * scale:g}" for r in RATES)


async def main_async(args) -> int:
    port = load.free_port()
    base = f"http://127.0.0.1:{port}"
    os.makedirs(os.path.join(load.ROOT, "test-artifacts"), exist_ok=True)
    if args.no_queue:
        os.environ["KVLAB_HEAVY_SLOTS"] = "64"
    proc = load.start_server(port, os.path.join(load.ROOT, "test-artifacts", "heavy-load-server.log"))
    os.environ.pop("KVLAB_HEAVY_SLOTS", None)
    stop, mem, tp_light = asyncio.Event(), {}, None
    loadavg = os.getloadavg()
    try:
        await asyncio.to_thread(load.wait_healthy, proc, base, 60.0)
        sampler = asyncio.create_task(load.sample_memory(proc.pid, stop, mem))
        if args.settle:     # app.py's start-up warm-ups hold the heavy-work queue for a while: let them finish
            waited = await load.settle(proc.pid, 300.0)
            print(f"server settled {waited:.0f} s after it answered (start-up warm-ups done)")
            loadavg = os.getloadavg()
        if args.page == "throughput":                  # the teacher opens the page (default sweep ready)
            teacher = await throughput_student(-1, base, time.monotonic() + 300, None, 5)
            print(f"teacher: Throughput page in {load.fmt(teacher['load_s'])} s, errors {teacher['errors'] or 'none'}")
        t0 = time.monotonic()
        deadline = t0 + args.time_limit
        heavy = asyncio.gather(*[
            throughput_student(i, base, deadline, rates_for(i, args.distinct), None) if args.page == "throughput"
            else explainer_heavy(i, base, deadline) for i in range(args.heavy)])
        await asyncio.sleep(args.light_after)
        lights = [load.protocol_session(-1, base, deadline, 0.0, 0.0, "24")]
        if args.page == "throughput":
            lights.append(throughput_student(-2, base, deadline, None, 10))
        light, *rest = await asyncio.gather(*lights)
        tp_light = rest[0] if rest else None
        light_done = time.monotonic() - t0
        heavy_rows = await heavy
        stop.set()
        await sampler
    finally:
        stop.set()
        load.stop_server(proc)
    drawn = [r["change_s"] for r in heavy_rows if r["change_s"] is not None]
    peak = mem.get("peak_rss", 0) / 2**20
    mode = "queue off (KVLAB_HEAVY_SLOTS=64)" if args.no_queue else f"queue on ({os.cpu_count()} cores)"
    what = (f"{args.heavy} students ask for the {REQUESTS:,}-request, {len(RATES)}-rate sweep "
            f"({'six different rate lists' if args.distinct else 'the same settings'})" if args.page == "throughput"
            else f"{args.heavy} heavy explainer links")
    print(f"{mode}: {what} at once, light students {args.light_after:g} s later; "
          f"load average at start {loadavg[0]:.1f}, {loadavg[1]:.1f}, {loadavg[2]:.1f}")
    print(f"  light student (explainer, block size 16 -> 24): load {load.fmt(light['load_s'])} s, change "
          f"{load.fmt(light['change_s'])} s (done {light_done:.1f} s after the heavy start), errors {light['errors'] or 'none'}")
    if tp_light is not None:
        print(f"  light student (Throughput, latency budget 5 -> 10): load {load.fmt(tp_light['load_s'])} s, change "
              f"{load.fmt(tp_light['change_s'])} s, errors {tp_light['errors'] or 'none'}")
    shared = sum(any("another student" in p for p in r["progress"]) for r in heavy_rows)
    print(f"  heavy: {len(drawn)} of {args.heavy} got their chart within {args.time_limit:g} s "
          f"({', '.join(f'{d:.0f}' for d in sorted(drawn)) or '-'} s); {sum(r['queued'] for r in heavy_rows)} saw "
          f"'Queued'; {sum(bool(r['progress']) for r in heavy_rows)} saw progress ({shared} of them another "
          f"student's run); errors {[e for r in heavy_rows for e in r['errors']] or 'none'}")
    print(f"  server peak RSS {peak:,.0f} MiB, server CPU {mem.get('cpu_s', 0):.1f} s; load average at end "
          + ", ".join(f"{x:.1f}" for x in os.getloadavg()))
    ok = all(not r["errors"] and r["change_s"] is not None and r["change_s"] <= args.target
             for r in [light] + ([tp_light] if tp_light else [])) and peak <= args.memory_mib
    print(f"target: light change <= {args.target:g} s and peak <= {args.memory_mib:,} MiB: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--page", choices=("explainer", "throughput"), default="explainer",
                   help="whose heaviest in-range action the heavy students take (default explainer)")
    p.add_argument("--heavy", type=int, default=6)
    p.add_argument("--distinct", action="store_true", help="throughput: a different rate list per student")
    p.add_argument("--light-after", type=float, default=5.0)
    p.add_argument("--time-limit", type=float, default=150.0)
    p.add_argument("--target", type=float, default=5.0)
    p.add_argument("--memory-mib", type=int, default=2048)
    p.add_argument("--no-queue", action="store_true")
    p.add_argument("--no-settle", dest="settle", action="store_false",
                   help="start as soon as the server answers, while its start-up warm-ups still hold the queue")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
