"""serve's Supervisor with stand-in children (no model): ordering, exit codes, kills."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from llm_byoc.api import serve
from llm_byoc.config import ServerConfig

pytestmark = pytest.mark.slow

# A child that records SIGTERM in a file, then exits 0 after ``delay`` seconds.
CHILD = """
import signal, sys, time
log, delay = sys.argv[1], float(sys.argv[2])
def stop(*_):
    open(log, "a").write(sys.argv[3] + "\\n")
    time.sleep(delay)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
open(log + ".ready." + sys.argv[3], "w").close()
while True:
    time.sleep(0.05)
"""
STUBBORN = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "open(sys.argv[1] + '.ready.gunicorn', 'w').close(); time.sleep(60)")


@pytest.fixture
def children(monkeypatch, tmp_path):
    log = tmp_path / "order.log"
    commands = {
        "engine": [sys.executable, "-c", CHILD, str(log), "0", "engine"],
        "gunicorn": [sys.executable, "-c", CHILD, str(log), "0.3", "gunicorn"],
    }
    monkeypatch.setattr(serve, "engine_command", lambda: commands["engine"])
    monkeypatch.setattr(serve, "gunicorn_command", lambda config: commands["gunicorn"])
    return commands, log


def run_in_thread(supervisor: serve.Supervisor, log: Path | None = None,
                  ready: tuple[str, ...] = ()) -> tuple[threading.Thread, list]:
    """Run the supervisor; wait until the children named in ``ready`` have installed their handlers."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(supervisor.run()))
    thread.start()
    deadline = time.monotonic() + 10
    while len(supervisor.children) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    paths = [Path(f"{log}.ready.{name}") for name in ready]
    deadline = time.monotonic() + 30  # a loaded machine may take a while to start Python
    while not all(path.exists() for path in paths) and time.monotonic() < deadline:
        time.sleep(0.02)  # the children have installed their handlers
    return thread, result


def test_stop_request_stops_gunicorn_then_the_engine_and_returns_0(children):
    _, log = children
    supervisor = serve.Supervisor(ServerConfig(graceful_timeout_s=5))
    thread, result = run_in_thread(supervisor, log, ready=("engine", "gunicorn"))
    supervisor.request_stop(signal.SIGTERM)
    thread.join(30)
    assert result == [0]
    assert log.read_text().split() == ["gunicorn", "engine"]
    assert supervisor.children == {}


def test_a_child_that_dies_stops_the_other_and_returns_1(children):
    commands, log = children
    commands["engine"] = [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"]
    supervisor = serve.Supervisor(ServerConfig(graceful_timeout_s=5))
    thread, result = run_in_thread(supervisor, log, ready=("gunicorn",))
    thread.join(30)
    assert result == [1]
    assert supervisor.exit_codes["engine"] == 3
    assert log.read_text().split() == ["gunicorn"]  # gunicorn was asked to stop


def test_a_child_that_ignores_sigterm_is_killed_and_the_exit_is_not_clean(children):
    commands, log = children
    commands["gunicorn"] = [sys.executable, "-c", STUBBORN, str(log)]
    supervisor = serve.Supervisor(ServerConfig(graceful_timeout_s=0))  # grace: 0 + 10 s
    thread, result = run_in_thread(supervisor, log, ready=("engine", "gunicorn"))
    started = time.monotonic()
    supervisor.request_stop(signal.SIGTERM)
    thread.join(40)
    assert result == [1]
    assert 9 < time.monotonic() - started < 30
    assert supervisor.exit_codes["gunicorn"] == -signal.SIGKILL


def test_serve_script_is_executable_and_answers_help():
    out = subprocess.run([sys.executable, str(serve_script()), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "serve" in out.stdout


def serve_script():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "container" / "serve"
    assert path.stat().st_mode & 0o111, "container/serve must be executable"
    return path
