"""Heavy work at once, then one light change (issue 19): ``python -m tests.tools.heavy_load``.

Starts the app (as ``tests/tools/load.py`` does), opens ``--heavy`` sessions (default 6) at once, each on a
different heaviest-in-range explainer link (200 Azure trace requests behind a 4,096-token shared
prompt, 2**20 slots in blocks of 1, 200 steps per second; each at its own row offset, so nothing
is shared), then, ``--light-after`` seconds later, a seventh student who opens the default lesson
and moves the block size (16 -> 24): the light change. Prints the light student's times, how many
heavy sessions drew their maps within the time limit and how many saw the "Queued" message, and
the server's peak memory. Bounded by ``--time-limit`` (default 150 s); the server is always stopped.

``--no-queue`` runs the same with the heavy-work queue opened wide (``KVLAB_HEAVY_SLOTS=64``), i.e. the
server as it was before ``pages/_ui/heavy.py``. Exit status 0 when the light change drew its maps
within ``--target`` seconds (default 5) and peak memory stayed under ``--memory-mib`` (default 2048).
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


def rerun(query: str, widgets=None) -> bytes:
    BackMsg, _, _ = load._proto()
    msg = BackMsg()
    msg.ParseFromString(load.rerun_msg(widgets))
    msg.rerun_script.query_string = query
    return msg.SerializeToString()


async def heavy_session(i: int, base: str, deadline: float) -> dict:
    """One student on a heavy link: time to the maps, and whether the queue message came."""
    from websockets.asyncio.client import connect
    _, ForwardMsg, _ = load._proto()
    out = {"id": i, "maps_s": None, "queued": False, "error": None}
    query = urlencode({**HEAVY, "offset_azure-conv": str(1000 * i)})
    try:
        t0 = time.monotonic()
        async with connect(base.replace("http://", "ws://") + "/_stcore/stream", subprotocols=["streamlit"],
                           max_size=None, open_timeout=60, ping_interval=None, compression=None) as ws:
            await ws.send(rerun(query))
            while time.monotonic() < deadline:
                data = await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic()))
                msg = ForwardMsg()
                msg.ParseFromString(data)
                if msg.WhichOneof("type") == "delta" and msg.delta.WhichOneof("type") == "new_element":
                    el = msg.delta.new_element
                    kind = el.WhichOneof("type")
                    if kind == "alert" and el.alert.body.startswith("Queued"):
                        out["queued"] = True
                    elif kind == "plotly_chart" and load.keyed(el.plotly_chart.id, load.MAPS_KEY):
                        out["maps_s"] = time.monotonic() - t0
                        return out
                elif msg.WhichOneof("type") == "script_finished":
                    return out
    except asyncio.TimeoutError:
        pass
    except Exception as exc:                          # noqa: BLE001 - reported, never hangs
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


async def main_async(args) -> int:
    port = load.free_port()
    base = f"http://127.0.0.1:{port}"
    os.makedirs(os.path.join(load.ROOT, "test-artifacts"), exist_ok=True)
    if args.no_queue:
        os.environ["KVLAB_HEAVY_SLOTS"] = "64"
    proc = load.start_server(port, os.path.join(load.ROOT, "test-artifacts", "heavy-load-server.log"))
    os.environ.pop("KVLAB_HEAVY_SLOTS", None)
    stop, mem = asyncio.Event(), {}
    try:
        await asyncio.to_thread(load.wait_healthy, proc, base, 60.0)
        sampler = asyncio.create_task(load.sample_memory(proc.pid, stop, mem))
        t0 = time.monotonic()
        deadline = t0 + args.time_limit
        heavy = asyncio.gather(*[heavy_session(i, base, deadline) for i in range(args.heavy)])
        await asyncio.sleep(args.light_after)
        light = await load.protocol_session(-1, base, deadline, 0.0, 0.0, "24")
        light_done = time.monotonic() - t0
        heavy_rows = await heavy
        stop.set()
        await sampler
    finally:
        stop.set()
        load.stop_server(proc)
    drawn = [r["maps_s"] for r in heavy_rows if r["maps_s"] is not None]
    peak = mem.get("peak_rss", 0) / 2**20
    mode = "queue off (KVLAB_HEAVY_SLOTS=64)" if args.no_queue else f"queue on ({os.cpu_count()} cores)"
    print(f"{mode}: {args.heavy} heavy links at once, a light student {args.light_after:g} s later")
    print(f"  light student: load {load.fmt(light['load_s'])} s, block-size change {load.fmt(light['change_s'])} s "
          f"(done {light_done:.1f} s after the heavy links), errors {light['errors'] or 'none'}")
    print(f"  heavy links: {len(drawn)} of {args.heavy} drew their maps within {args.time_limit:g} s "
          f"({', '.join(f'{d:.0f}' for d in sorted(drawn)) or '-'} s); {sum(r['queued'] for r in heavy_rows)} "
          f"saw 'Queued'; errors {[r['error'] for r in heavy_rows if r['error']] or 'none'}")
    print(f"  server peak RSS {peak:,.0f} MiB, server CPU {mem.get('cpu_s', 0):.1f} s")
    ok = (not light["errors"] and light["change_s"] is not None and light["change_s"] <= args.target
          and peak <= args.memory_mib)
    print(f"target: light change <= {args.target:g} s and peak <= {args.memory_mib:,} MiB: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heavy", type=int, default=6)
    p.add_argument("--light-after", type=float, default=5.0)
    p.add_argument("--time-limit", type=float, default=150.0)
    p.add_argument("--target", type=float, default=5.0)
    p.add_argument("--memory-mib", type=int, default=2048)
    p.add_argument("--no-queue", action="store_true")
    return asyncio.run(main_async(p.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
