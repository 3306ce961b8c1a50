"""Issue 42: a command ended abruptly leaves nothing behind.

* SIGTERM while outputs are being written: exit status 143, one word on stderr, no ``.part`` file and
  no half-written output (before, SIGTERM killed the process with its ``.part`` files in place).
* A site export that fails leaves no folder that blocks the retry (before, the ``data/`` folder it
  had made stayed, and the retry was refused as "a folder that is not empty").

Each fault is triggered deterministically, at the moment a file is written (``_write_text``), never
by timing a signal against a running process.
"""
from __future__ import annotations

import errno
import os
import signal

import pytest

from allocator.__main__ import main
from allocator.cli import common

SMALL_SITE = {"index.html": b"<!doctype html><title>t</title>", "site.js": b"1;", "data/site-data.js": b"2;"}


@pytest.fixture
def small_site(monkeypatch):
    """export-site builds a tiny site: what is tested is how it is written, not how it is built."""
    import allocator.viz.export.site as site
    monkeypatch.setattr(site, "build_site", lambda sc, progress=None, data=None: dict(SMALL_SITE))


def _sigterm_on_write(monkeypatch, after: int = 1):
    """SIGTERM this process while the ``after``-th file is being written."""
    seen = []
    real = common._write_text

    def write(handle, text):
        seen.append(1)
        if len(seen) == after:
            os.kill(os.getpid(), signal.SIGTERM)   # handled in this (main) thread at once
        real(handle, text)
    monkeypatch.setattr(common, "_write_text", write)


def test_sigterm_while_writing_exports_leaves_no_part_file(tmp_path, monkeypatch, capsys):
    _sigterm_on_write(monkeypatch, after=2)
    before = signal.getsignal(signal.SIGTERM)
    rc = main(["export-html", "--out", str(tmp_path / "a.html"), "--csv", str(tmp_path / "a.csv")])
    assert rc == 143 and capsys.readouterr().err == "terminated\n"
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == before          # main put the previous handler back


def test_sigterm_while_writing_a_site_leaves_no_part_file_and_no_folder(tmp_path, monkeypatch, capsys, small_site):
    _sigterm_on_write(monkeypatch, after=2)
    out = tmp_path / "site"
    assert main(["export-site", str(out)]) == 143
    assert capsys.readouterr().err.endswith("terminated\n")
    assert os.listdir(tmp_path) == []


def test_a_failed_site_export_leaves_no_folder_and_the_retry_works(tmp_path, monkeypatch, capsys, small_site):
    def full(handle, text):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(common, "_write_text", full)
    out = tmp_path / "site"
    assert main(["export-site", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    monkeypatch.undo()
    import allocator.viz.export.site as site
    monkeypatch.setattr(site, "build_site", lambda sc, progress=None, data=None: dict(SMALL_SITE))
    assert main(["export-site", str(out), "--json"]) == 0
    assert sorted(os.listdir(out)) == ["data", "index.html", "site.js"]


def test_a_failed_site_export_keeps_an_earlier_export(tmp_path, monkeypatch, capsys, small_site):
    out = tmp_path / "site"
    assert main(["export-site", str(out), "--json"]) == 0

    def full(handle, text):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(common, "_write_text", full)
    assert main(["export-site", str(out)]) == 2
    assert sorted(os.listdir(out)) == ["data", "index.html", "site.js"]
    assert (out / "index.html").read_bytes() == SMALL_SITE["index.html"]


def test_empty_folders_left_by_an_older_failed_export_do_not_block(tmp_path, capsys, small_site):
    out = tmp_path / "site"
    (out / "data").mkdir(parents=True)
    assert main(["export-site", str(out), "--json"]) == 0


def test_a_memory_error_before_the_guard_trips_is_one_line_and_leaves_no_part_file(tmp_path, monkeypatch, capsys):
    """Issue 42: under a container's memory cap below a quarter of the machine, the system refuses
    memory (MemoryError) before the memory guard trips. Injected while the second output is written:
    one line saying what ran out and what to try, status 2, no traceback, no ``.part`` file."""
    seen = []
    real = common._write_text

    def write(handle, text):
        seen.append(1)
        if len(seen) == 2:
            raise MemoryError
        real(handle, text)
    monkeypatch.setattr(common, "_write_text", write)
    rc = main(["export-html", "--out", str(tmp_path / "a.html"), "--csv", str(tmp_path / "a.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and err == ("error: this run ran out of memory (the system refused more before the run finished); "
                               "try fewer requests (--count), a smaller pool (--slots) or a smaller generation cap "
                               "(--max-new-tokens)\n"), err
    assert os.listdir(tmp_path) == []


def test_a_library_the_system_cannot_map_mid_run_is_the_out_of_memory_line(tmp_path, monkeypatch, capsys):
    """The re-hunt of issue 42: under a tight address-space cap, pandas' compiled parts imported mid-run
    failed with ImportError 'failed to map segment from shared object' and a traceback with server paths.
    It is the out-of-memory line now; a module that is simply missing still raises."""
    import pytest

    def refuse(handle, text):
        raise ImportError("/x/pandas/_libs/join.so: failed to map segment from shared object")
    monkeypatch.setattr(common, "_write_text", refuse)
    rc = main(["export-html", "--out", str(tmp_path / "a.html")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: this run ran out of memory") and "/x/pandas" not in err, err
    assert os.listdir(tmp_path) == []

    def missing(handle, text):
        raise ImportError("No module named 'nothing_here'")
    monkeypatch.setattr(common, "_write_text", missing)
    with pytest.raises(ImportError):
        main(["export-html", "--out", str(tmp_path / "b.html")])
