"""Which of our files one streamed TGI request runs, per process: measured, not read.

    python benchmarks/request_files.py --model DIR [--code CODE_DIR] [--json OUT]

Starts the real ``serve`` (``python -m llm_byoc.cli serve``) with a
``sitecustomize`` that puts a profile hook (``sys.setprofile`` and
``threading.setprofile``) in every Python process of the tree: the gunicorn
master and its HTTP workers (re-armed after each fork), the engine process and
its model worker (spawned, so they load the hook themselves). The hook counts
the function calls made in files under the package. After one warm-up request,
the counts are reset, one streamed TGI request runs, and each process writes
the files it ran code from during that window. An idle window of the same
length is measured the same way, so what runs anyway (health refreshes,
background threads) can be told apart from what the request runs.

``--code`` points at another checkout's ``code/`` folder (the package found
there is the one measured), so a commit can be compared with this one.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = r'''
import os, sys, threading, json, time
_root = os.environ["REQUEST_FILES_ROOT"]
_phase = os.environ["REQUEST_FILES_PHASE"]
_seen = {}

def _profile(frame, event, arg):
    if event == "call":
        name = frame.f_code.co_filename
        if name.startswith(_root):
            _seen[name] = _seen.get(name, 0) + 1

def _poll():
    last = ""
    while True:
        time.sleep(0.05)
        try:
            with open(_phase) as f:
                now = f.read().strip()
        except OSError:
            continue
        if now == last:
            continue
        last = now
        if now.startswith("reset"):
            _seen.clear()
        elif now.startswith("dump"):
            out = os.path.join(os.path.dirname(_phase), f"{now}-{os.getpid()}.json")
            with open(out, "w") as f:
                json.dump({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv,
                           "files": dict(_seen)}, f)

def _arm():
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    threading.Thread(target=_poll, name="request-files", daemon=True).start()

_arm()
os.register_at_fork(after_in_child=_arm)
'''

PROMPT = "Write one sentence about the sea."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(port: int, server: subprocess.Popen, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"serve exited with {server.returncode} before it was ready")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/ping")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("serve did not become ready")


def _stream_one(port: int, max_new_tokens: int) -> int:
    """One streamed TGI request, read to its end; returns the bytes read."""
    body = json.dumps({"inputs": PROMPT, "parameters": {"max_new_tokens": max_new_tokens}, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", "/invocations", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    if response.status != 200:
        raise SystemExit(f"/invocations answered {response.status}: {data[:200]!r}")
    return len(data)


def _window(phase: Path, label: str, action) -> list[dict]:
    phase.write_text(f"reset-{label}")
    time.sleep(0.4)
    action()
    time.sleep(0.4)
    phase.write_text(f"dump-{label}")
    time.sleep(0.6)
    return [json.loads(p.read_text()) for p in sorted(phase.parent.glob(f"dump-{label}-*.json"))]


def _by_process(records: list[dict], root: str) -> dict[str, list[str]]:
    roles: dict[str, set[str]] = {}
    gunicorn_pids = {r["pid"] for r in records if "gunicorn" in " ".join(r["argv"])}
    engine_pids = {r["pid"] for r in records if "engine" in " ".join(r["argv"])}
    for record in records:
        files = {os.path.relpath(f, root) for f in record["files"]}
        if not files:
            continue
        argv = " ".join(record["argv"])
        if record["pid"] in gunicorn_pids:
            role = "http worker" if record["ppid"] in gunicorn_pids else "gunicorn master"
        elif record["ppid"] in engine_pids:  # spawned children inherit their parent's sys.argv
            role = "model worker"
        elif "engine" in argv:
            role = "engine"
        else:
            role = "serve" if "serve" in argv else argv[:60]
        roles.setdefault(role, set()).update(files)
    return {role: sorted(files) for role, files in sorted(roles.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="the model folder serve loads")
    parser.add_argument("--code", default=str(Path(__file__).resolve().parents[1] / "code"),
                        help="the code/ folder whose llm_byoc package is measured")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)

    code = Path(args.code).resolve()
    root = str(code / "llm_byoc")
    work = Path(tempfile.mkdtemp(prefix="request-files-"))
    (work / "hook").mkdir()
    (work / "hook" / "sitecustomize.py").write_text(HOOK)
    phase = work / "phase"
    phase.write_text("start")
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=f"{work / 'hook'}{os.pathsep}{code}", REQUEST_FILES_ROOT=root,
               REQUEST_FILES_PHASE=str(phase), LLM_BYOC_MODEL=args.model, SAGEMAKER_BIND_TO_PORT=str(port),
               SAGEMAKER_MODEL_SERVER_WORKERS="1")
    server = subprocess.Popen([sys.executable, "-m", "llm_byoc.cli", "serve"], env=env, cwd=work,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0)
    try:
        _wait_ready(port, server)
        _stream_one(port, args.max_new_tokens)  # warm-up: first-request work is not counted
        request = _by_process(_window(phase, "request", lambda: _stream_one(port, args.max_new_tokens)), root)
        idle = _by_process(_window(phase, "idle", lambda: time.sleep(1.0)), root)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)

    request_only = {role: [f for f in files if f not in set(idle.get(role, []))] for role, files in request.items()}
    commit = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {
        "commit": commit, "machine": platform.processor() or platform.machine(),
        "request": request, "idle": idle, "request_only": request_only,
        "counts": {"request_files_total": len({(r, f) for r, fs in request.items() for f in fs}),
                   "request_files_distinct": len({f for fs in request.values() for f in fs}),
                   "request_only_distinct": len({f for fs in request_only.values() for f in fs}),
                   "per_process": {r: len(fs) for r, fs in request.items()}},
    }
    print(json.dumps(result["counts"], indent=1))
    for role, files in request.items():
        print(f"\n{role} ({len(files)}):")
        for f in files:
            print(f"  {f}{'' if f in request_only[role] else '   (also idle)'}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
