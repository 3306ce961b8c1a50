"""The load tests' server side (``tests/tools/load.py``, ``tests/tools/heavy_load.py``): start the app on a free
port and stop it, wait for it to answer and to settle, sample its process tree's memory and CPU,
and the page's stable keys the sessions look for."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(ROOT, "app.py")
#: Stable keys (the ``key=`` the explainer gives its widgets and charts), never display text: a label's
#: wording may change, a key is part of the page's contract (shared links carry the widget keys).
BLOCK_KEY, MAPS_KEY = "block_size", "maps"


def keyed(element_id: str, key: str) -> bool:
    """Whether a protocol element id belongs to the element with user key ``key`` (Streamlit writes
    ids as ``$$ID-<hash>-<key>``)."""
    return element_id.endswith("-" + key)



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



async def settle(pid: int, timeout_s: float, idle_cpu_s: float = 0.1) -> float:
    """Wait until the server's process tree used under ``idle_cpu_s`` CPU seconds in one second (its
    start-up warm-ups done: ``app.py`` builds the Throughput page's default sweep and the Prefix
    cache page's windows in the background), at most ``timeout_s``; the seconds waited."""
    t0 = time.monotonic()
    last = tree_usage(pid)[1]
    while time.monotonic() - t0 < timeout_s:
        await asyncio.sleep(1.0)
        now = tree_usage(pid)[1]
        if now - last < idle_cpu_s:
            break
        last = now
    return time.monotonic() - t0



def _cpu_split(server_pid: int) -> dict:
    """CPU seconds so far of the server's process tree, of this process (the protocol clients) and
    of this process's other descendants (Chromium and Playwright's driver)."""
    server = tree_usage(server_pid)[1]
    mine = sum(os.times()[:2])
    return {"server": server, "protocol_clients": mine, "browsers": max(0.0, tree_usage(os.getpid())[1] - server - mine)}


