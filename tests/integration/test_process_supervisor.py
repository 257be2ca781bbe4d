"""process/supervisor.py with stand-in children: own process group, SIGTERM then SIGKILL."""

from __future__ import annotations

import os
import signal
import sys
import time

from llm_byoc.process.supervisor import start_child, stop_child

# Says it is ready once its SIGTERM handler (or SIG_IGN) is in place, then waits.
CHILD = ("import signal, sys, time; signal.signal(signal.SIGTERM, {handler}); "
         "print('ready', flush=True); time.sleep(60)")


def started(tmp_path, handler: str):
    out = tmp_path / "out.log"
    with open(out, "wb") as output:
        proc = start_child("stand-in", [sys.executable, "-c", CHILD.format(handler=handler)], output=output)
    deadline = time.monotonic() + 30
    while b"ready" not in out.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc, out


def test_a_child_leads_its_own_process_group_and_writes_to_output(tmp_path):
    proc, out = started(tmp_path, "lambda *_: sys.exit(0)")
    try:
        assert os.getpgid(proc.pid) == proc.pid != os.getpgid(0)
        assert out.read_bytes() == b"ready\n"
    finally:
        proc.kill()
        proc.wait()


def test_a_child_that_stops_on_sigterm_stops_in_time(tmp_path):
    proc, _ = started(tmp_path, "lambda *_: sys.exit(0)")
    assert stop_child("stand-in", proc, grace_s=10) is True
    assert proc.returncode == 0


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path, caplog):
    proc, _ = started(tmp_path, "signal.SIG_IGN")
    began = time.monotonic()
    assert stop_child("stand-in", proc, grace_s=0.5) is False
    assert 0.5 <= time.monotonic() - began < 10
    assert proc.returncode == -signal.SIGKILL
    assert "stand-in did not stop within 0 s; killing it" in caplog.text
