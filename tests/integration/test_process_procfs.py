"""/proc readings: footprints, process trees, a running process told apart from a zombie."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from llm_byoc.process import procfs


def test_own_footprint_is_consistent():
    mine = procfs.footprint(os.getpid())
    assert 0 < mine.uss <= mine.pss <= mine.rss


def test_a_gone_process_has_no_footprint():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert procfs.footprint(proc.pid) == procfs.Footprint()


def test_tree_and_is_running_and_zombies():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = procfs.start_time(proc.pid)
        assert proc.pid in procfs.process_tree(os.getpid())
        assert procfs.is_running(proc.pid, started)
        assert not procfs.is_running(proc.pid, (started or 0) + 1)  # a reused pid is another process
        proc.kill()
        deadline = time.monotonic() + 5
        while procfs.is_running(proc.pid, started) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not procfs.is_running(proc.pid, started)  # a zombie (not yet waited for) is not running
    finally:
        proc.kill()
        proc.wait()
    assert procfs.start_time(proc.pid) is None


def test_rss_from_statm_agrees_with_smaps_rollup():
    import os

    from llm_byoc.process import procfs

    blob = bytearray(64 * 1024 * 1024)  # touched: resident
    for i in range(0, len(blob), 4096):
        blob[i] = 1
    fast, walked = procfs.rss(os.getpid()), procfs.footprint(os.getpid()).rss
    assert fast > 64 * 1024 * 1024 and abs(fast - walked) < 0.05 * walked
    assert procfs.rss(2**22 + 12345) == 0  # no such process
