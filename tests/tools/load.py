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
block-size widget) and receives everything the server sends (the ~3 MB animated figure included).
Its "time to a rendered chart" is the time until the chart's full figure has arrived; that is the
server's share. Pressing Play costs the server nothing (the frames play inside Plotly in the
browser), so protocol sessions only hold their connection for a moment where a student presses it.

Alongside them, ``--browsers K`` (default 1) real headless Chromium contexts do the full visible
flow — load, ArrowRight on the block-size slider, ▶ Play until the step label moves — under the
same load, to show that rendering still works; their times include drawing on this machine's
shared CPU and are reported on their own row. ``--browsers 0`` skips them (and Chromium).

Elements are found by their keys (the block-size slider ``block_size``, the maps chart ``maps``),
never by display text. The server's own time per script run (from the start of the page script to
its end, logged by ``app.py`` when ``KVLAB_RENDER_LOG`` is set) is reported beside the clients'
times: the gap between them is queueing for the CPU and sending the figure.

Server memory is sampled every 0.2 s from /proc (psutil when installed). Exit status 0 when every
session finished without an error and the p95 time to a chart met ``--target-p95``; 1 otherwise;
2 for a set-up failure (server would not start).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(ROOT, "app.py")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
#: Stable keys (the ``key=`` the explainer gives its widgets and charts), never display text: a label's
#: wording may change, a key is part of the page's contract (shared links carry the widget keys).
BLOCK_KEY, MAPS_KEY = "block_size", "maps"


def keyed(element_id: str, key: str) -> bool:
    """Whether a protocol element id belongs to the element with user key ``key`` (Streamlit writes
    ids as ``$$ID-<hash>-<key>``)."""
    return element_id.endswith("-" + key)


# ------------------------------------------------------------------------------ server & memory

def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_path: str, extra: list[str] = (), render_log: str | None = None) -> subprocess.Popen:
    """Start ``python app.py`` on 127.0.0.1:``port`` in its own process group (output to ``log_path``);
    ``extra`` are more ``streamlit run`` options (e.g. ``--runner.postScriptGC=false``); with
    ``render_log`` the app appends one line per script run to it (``app.py``: epoch, page, seconds)."""
    log = open(log_path, "w", encoding="utf-8")
    env = dict(os.environ, **({"KVLAB_RENDER_LOG": render_log} if render_log else {}))
    return subprocess.Popen(
        [sys.executable, APP, "--server.headless", "true", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none", *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)


def read_render_log(path: str, since: float) -> list[float]:
    """Seconds of every script run the server logged after ``since`` (epoch seconds)."""
    try:
        with open(path, encoding="utf-8") as fh:
            rows = [line.rstrip("\n").split("\t") for line in fh]
    except OSError:
        return []
    return [float(r[2]) for r in rows if len(r) == 3 and float(r[0]) >= since]


def wait_healthy(proc: subprocess.Popen, base: str, timeout_s: float) -> None:
    """Poll ``/_stcore/health`` until it answers.

    Raises:
        RuntimeError: the server exited, or did not answer within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"server did not answer /_stcore/health within {timeout_s:.0f} s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL after 10 s (it was started in its own session)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


def _tree_pids(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(c) for c in fh.read().split())
        except OSError:
            pass
    return pids


def tree_usage(pid: int) -> tuple[int, float]:
    """(RSS in bytes, CPU seconds user+system) of ``pid`` and its descendants; (0, 0.0) if gone."""
    try:
        import psutil  # optional
        try:
            root = psutil.Process(pid)
            procs = [root] + root.children(recursive=True)
            rss = cpu = 0
            for p in procs:
                try:
                    rss += p.memory_info().rss
                    t = p.cpu_times()
                    cpu += t.user + t.system
                except psutil.Error:
                    pass
            return rss, cpu
        except psutil.Error:
            return 0, 0.0
    except ImportError:
        pass
    rss, cpu = 0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    for p in _tree_pids(pid):
        try:
            with open(f"/proc/{p}/statm") as fh:
                rss += int(fh.read().split()[1]) * page
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
    return rss, cpu


async def sample_memory(pid: int, stop: asyncio.Event, out: dict) -> None:
    """Record the peak RSS (bytes) of the server tree every 0.2 s until ``stop`` is set."""
    while not stop.is_set():
        rss, cpu = tree_usage(pid)
        out["peak_rss"] = max(out.get("peak_rss", 0), rss)
        out["cpu_s"] = cpu
        try:
            await asyncio.wait_for(stop.wait(), 0.2)
        except asyncio.TimeoutError:
            pass


# ------------------------------------------------------------------------- protocol sessions

def _proto():
    """Streamlit's protobuf classes (imported lazily: importing streamlit takes a moment)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    return BackMsg, ForwardMsg, WidgetState


def rerun_msg(widget_states: list | None = None) -> bytes:
    """A serialized BackMsg ``rerun_script`` for the default page, with ``widget_states``."""
    BackMsg, _, _ = _proto()
    msg = BackMsg()
    cs = msg.rerun_script
    cs.query_string = ""
    cs.page_script_hash = ""
    cs.context_info.timezone = "UTC"
    cs.context_info.locale = "en-GB"
    for w in widget_states or []:
        cs.widget_states.widgets.append(w)
    return msg.SerializeToString()


class RunRecord:
    """What one script run sent back: the maps chart's arrival time (s after the request) and a
    hash of its figure, errors, and the block-size slider's widget id."""

    def __init__(self):
        self.chart_s: float | None = None
        self.chart_hash: int | None = None
        self.errors: list[str] = []
        self.slider_id: str | None = None
        self.finished = False


async def read_run(ws, t0: float, deadline: float) -> RunRecord:
    """Read ForwardMsgs until ``script_finished`` (not an early finish for a rerun) or ``deadline``.

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
        msg = ForwardMsg()
        msg.ParseFromString(data)
        kind = msg.WhichOneof("type")
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
    out = {"kind": "protocol", "id": i, "load_s": None, "change_s": None, "errors": [], "ok": False}
    await asyncio.sleep(stagger_s)
    url = base.replace("http://", "ws://") + "/_stcore/stream"
    try:
        t0 = time.monotonic()
        async with connect(url, subprotocols=["streamlit"], max_size=None, open_timeout=60,
                           ping_interval=None, close_timeout=5, compression=None) as ws:
            await ws.send(rerun_msg())
            first = await read_run(ws, t0, deadline)
            out["load_s"], out["errors"] = first.chart_s, list(first.errors)
            if first.chart_s is None:
                out["errors"].append("no animated chart on first load")
            if first.slider_id is None:
                out["errors"].append("block-size slider not found")
                return out
            w = WidgetState(id=first.slider_id)
            w.string_array_value.data.append(block_to)
            t1 = time.monotonic()
            await ws.send(rerun_msg([w]))
            second = await read_run(ws, t1, deadline)
            out["change_s"] = second.chart_s
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


# ---------------------------------------------------------------------------- browser sessions

async def browser_session(browser, i: int, base: str, deadline: float, stagger_s: float) -> dict:
    """One real Chromium context: load, ArrowRight on the block-size slider, ▶ Play.

    Returns:
        {"kind": "browser", "id", "load_s", "change_s", "play_s", "errors", "ok"}: seconds to the
        drawn chart (``.js-plotly-plot .main-svg``), to the headline metrics changing after
        ArrowRight, and from pressing Play to the step label leaving "engine step 0".
    """
    out = {"kind": "browser", "id": i, "load_s": None, "change_s": None, "play_s": None, "errors": [],
           "ok": False}
    await asyncio.sleep(stagger_s)
    ctx = await browser.new_context(viewport={"width": 1280, "height": 900})

    def left_ms() -> float:
        return max(1000.0, (deadline - time.monotonic()) * 1000)

    try:
        pg = await ctx.new_page()
        t0 = time.monotonic()
        await pg.goto(base + "/", timeout=left_ms(), wait_until="domcontentloaded")
        chart = pg.locator('[data-testid="stPlotlyChart"] .js-plotly-plot').filter(
            has=pg.locator(".updatemenu-button")).first
        await chart.locator(".main-svg").first.wait_for(timeout=left_ms())
        out["load_s"] = time.monotonic() - t0
        values = pg.locator('[data-testid="stMetricValue"]')
        await values.nth(1).wait_for(timeout=left_ms())
        before = "|".join(await values.all_inner_texts())
        thumb = pg.locator(f".st-key-{BLOCK_KEY}").get_by_role("slider")
        await thumb.focus(timeout=left_ms())
        t1 = time.monotonic()
        await pg.keyboard.press("ArrowRight")
        await pg.wait_for_function(
            """(old) => { const v = [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                 .map(m => m.innerText).join('|');
                 return v.length > 0 && v !== old; }""", arg=before, timeout=left_ms(), polling=250)
        await chart.locator(".main-svg").first.wait_for(timeout=left_ms())
        out["change_s"] = time.monotonic() - t1
        label = chart.locator("text.slider-label").first
        t2 = time.monotonic()
        await chart.locator(".updatemenu-button").first.click(timeout=left_ms())
        await pg.wait_for_function(
            """() => { const p = [...document.querySelectorAll('.js-plotly-plot')]
                 .find(e => e.querySelector('.updatemenu-button'));
                 const t = p && p.querySelector('text.slider-label');
                 return t && t.textContent.trim() !== 'engine step 0'; }""", timeout=left_ms(), polling=250)
        out["play_s"] = time.monotonic() - t2
        await label.text_content()
        errs = await pg.locator('[data-testid="stException"], [data-testid="stAlertContentError"]').all_inner_texts()
        out["errors"] += [f"error box: {e[:200]}" for e in errs]
    except Exception as exc:
        out["errors"].append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    finally:
        try:
            await ctx.close()
        except Exception:
            pass
    out["ok"] = not out["errors"]
    return out


async def launch_browser(k: int):
    """(playwright, browser) with Chromium started, or (None, None) when ``k`` is 0 or Chromium is
    missing. Started before the clock runs, so Chromium's own start-up is not counted as load."""
    if k <= 0:
        return None, None
    if not os.path.exists(CHROMIUM):
        print(f"note: {CHROMIUM} missing, browser sessions skipped (apt-get install chromium as root)")
        return None, None
    from playwright.async_api import async_playwright
    pw = await async_playwright().start()
    try:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
    except Exception:
        await pw.stop()
        raise
    return pw, b


async def run_browsers(browser, k: int, base: str, deadline: float, stagger: float) -> list[dict]:
    """``k`` Chromium contexts of ``browser``, concurrently; [] when there is no browser."""
    if browser is None:
        return []
    return list(await asyncio.gather(*[browser_session(browser, i, base, deadline, stagger * i / max(1, k))
                                       for i in range(k)]))


# ------------------------------------------------------------------------------------ report

def pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1, nearest-rank) of ``values``; None when empty."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    rank = max(1, min(len(vals), int(-(-q * len(vals) // 1))))
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
    for name, rows in (("protocol (server share)", proto), ("browser (Chromium, full)", browsers)):
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
                              "server_args": args.server_arg}})
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
        if args.warm:   # the teacher opened the page first: the default scenario is cached
            warm = await protocol_session(-1, base, deadline, 0.0, 0.0, args.block_to)
            print(f"warm-up session: load {fmt(warm['load_s'])} s, change {fmt(warm['change_s'])} s")
        pw, browser = await launch_browser(args.browsers)
        n_proto = max(0, args.sessions - args.browsers)
        t0, t0_epoch = time.monotonic(), time.time()
        proto_task = asyncio.gather(*[protocol_session(i, base, deadline, args.hold,
                                                       args.stagger * i / max(1, n_proto), args.block_to)
                                      for i in range(n_proto)])
        browser_task = run_browsers(browser, args.browsers, base, deadline, args.stagger)
        try:
            proto, browsers = await asyncio.wait_for(
                asyncio.gather(proto_task, browser_task), max(1.0, deadline - time.monotonic() + 15))
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
    return 0 if ok else 1


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
    p.add_argument("--warm", action="store_true", help="open one session first (the teacher's), so the "
                   "default scenario is already cached")
    p.add_argument("--target-p95", type=float, default=5.0, help="p95 time to a chart to meet (s, default 5)")
    p.add_argument("--port", type=int, default=0, help="server port (default: a free one)")
    p.add_argument("--json", metavar="FILE", help="also write the per-session results as JSON")
    p.add_argument("--server-arg", action="append", default=[], metavar="OPT",
                   help="extra `streamlit run` option for the server, repeatable "
                        "(e.g. --server-arg=--runner.postScriptGC=false)")
    args = p.parse_args(argv)
    if args.sessions < 1 or args.browsers < 0 or args.browsers > args.sessions:
        p.error("need --sessions >= 1 and 0 <= --browsers <= --sessions")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
