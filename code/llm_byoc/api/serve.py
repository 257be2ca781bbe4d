"""The container's ``serve``: start the engine process and gunicorn, supervise both.

  serve                       (what ``docker run IMAGE serve`` runs)
    ├─ python -m llm_byoc.engine.server     the one copy of the model
    └─ gunicorn llm_byoc.api.wsgi           HTTP workers, thin front ends
       (ThreadPerConnectionWorker: a thread for each connection, 429 beyond the limit)

SIGTERM or SIGINT: gunicorn stops accepting and lets in-flight streams finish
within the graceful timeout, then the engine stops; exit 0. A child that dies
on its own takes the container down with a non-zero exit, so SageMaker
replaces it (as in sagemaker-inference-toolkit). In multi-model mode there is
no engine process: one gunicorn worker owns the model cache; with
LLM_BYOC_MULTI_MODEL_BACKEND=triton, ``tritonserver`` is a third child
(``python -m llm_byoc.multimodel.triton.server`` execs it), supervised like the engine:
if it dies, ``serve`` exits non-zero; on SIGTERM it stops after gunicorn.

Exit codes: 0 stopped by SIGTERM/SIGINT and every child stopped in time;
1 a child exited on its own (the model failed to load, the engine or its model
worker died, gunicorn could not start) or had to be killed at shutdown;
2 a bad setting (the message names the variable) or argument.

Started as root (the image's default), ``serve`` first becomes the unprivileged
``llmbyoc`` user when that user can read every file it must serve, and stays
root, saying why in one line, when it cannot (``process/privileges.py``); every
child then runs as the user ``serve`` became. The engine socket and its key
live in a fresh private directory (0700) unless ``LLM_BYOC_ENGINE_SOCKET``
names one, made after that decision, so they belong to that user. Children run
in their own process group (a terminal's Ctrl-C reaches only ``serve``, which
shuts down in order) and get SIGTERM if ``serve`` itself dies
(``process/supervisor.py``). As PID 1 in a container, ``serve`` also reaps
orphans the engine leaves behind.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from ..config import ENV_ENGINE_SOCKET, ENV_MODEL, ENV_SERVED_MODEL_NAME, ConfigError, EngineConfig, MultiModelConfig, ServerConfig, hub_token
from ..config_aliases import adopt_aliases
from ..errors import ModelLoadError
from ..engine import engine_socket
from ..logging_setup import configure_logging, scrub, secret_values
from ..models import fetch
from ..metrics import ENV_PROMETHEUS_MULTIPROC_DIR
from ..process import privileges
from ..process.supervisor import start_child, stop_child

log = logging.getLogger("llm_byoc.serve")

ENGINE_STOP_TIMEOUT_S = 20
MIN_WORKER_HEARTBEAT_S = 30  # gthread heartbeat; requests are bounded by timeout_s in the app
OVERFLOW_CONNECTIONS = 128  # accepted beyond LLM_BYOC_MAX_CONNECTIONS to be told 429 (or answered /ping)
WORKER_CLASS = "llm_byoc.api.http_worker.ThreadPerConnectionWorker"
EXIT_OK, EXIT_CHILD_FAILED, EXIT_BAD_CONFIG = 0, 1, 2


def gunicorn_command(config: ServerConfig) -> list[str]:
    workers = 1 if config.multi_model else config.workers
    return [
        sys.executable, "-m", "gunicorn",
        "--worker-class", WORKER_CLASS,
        "--workers", str(workers),
        "--threads", str(config.max_connections),  # one thread per admitted connection
        "--worker-connections", str(config.max_connections + OVERFLOW_CONNECTIONS),
        "--bind", f"{config.host}:{config.port}",
        "--timeout", str(max(config.timeout_s, MIN_WORKER_HEARTBEAT_S)),
        "--graceful-timeout", str(config.graceful_timeout_s),
        "--keep-alive", "5",
        "--log-level", config.log_level,
        "--error-logfile", "-",
        "--config", "python:llm_byoc.api.gunicorn_hooks",
        *_optional_flags(),
        "llm_byoc.api.wsgi:create_wsgi_app()",
    ]


def _optional_flags() -> list[str]:
    """Flags only some gunicorn versions know."""
    from gunicorn.config import KNOWN_SETTINGS

    names = {setting.name for setting in KNOWN_SETTINGS}
    # gunicorn >= 24 opens a control socket in $HOME by default; nothing here uses it.
    return ["--no-control-socket"] if "control_socket_disable" in names else []


def engine_command() -> list[str]:
    return [sys.executable, "-m", "llm_byoc.engine.server"]


def triton_command() -> list[str]:
    return [sys.executable, "-m", "llm_byoc.multimodel.triton.server"]


def served_paths(engine: EngineConfig, model_root: str | None) -> list[str]:
    """What the children must read: the models root (multi-model), else the model when it is a
    local path (a hub id is fetched into HOME) and its adapters folder."""
    if model_root is not None:
        return [model_root]
    return [path for path in (engine.model, engine.adapters_dir) if os.path.exists(path)]


def child_env(config: ServerConfig) -> dict[str, str]:
    """Both children find the engine socket where serve put it."""
    env = dict(os.environ)
    if config.engine_socket:
        env[ENV_ENGINE_SOCKET] = config.engine_socket
    return env


def engine_env(config: ServerConfig) -> dict[str, str]:
    """The engine's series travel to /metrics over its socket (vLLM's, EngineMetrics), never through
    the HTTP workers' metrics folder, where the workers would add them up a second time."""
    env = child_env(config)
    env.pop(ENV_PROMETHEUS_MULTIPROC_DIR, None)
    return env


def gunicorn_env(config: ServerConfig) -> dict[str, str]:
    """Several HTTP workers share their Prometheus metrics through a folder."""
    env = child_env(config)
    if config.workers > 1 and not config.multi_model and not env.get(ENV_PROMETHEUS_MULTIPROC_DIR):
        env[ENV_PROMETHEUS_MULTIPROC_DIR] = tempfile.mkdtemp(prefix="llm_byoc_metrics_")
    return env


class Supervisor:
    def __init__(self, config: ServerConfig):
        self._private_dir = None
        if not config.multi_model and not config.engine_socket:
            config = dataclasses.replace(config, engine_socket=engine_socket.make_private_socket_path())
            self._private_dir = os.path.dirname(config.engine_socket)
        self.config = config
        self.children: dict[int, tuple[str, subprocess.Popen]] = {}
        self.exit_codes: dict[str, int] = {}
        self.stop_signal: int | None = None

    def start(self) -> None:
        if not self.config.multi_model:
            self._add("engine", start_child("engine", engine_command(), engine_env(self.config)))
        elif MultiModelConfig.from_env().backend == "triton":
            self._add("tritonserver", start_child("tritonserver", triton_command()))
        self._add("gunicorn", start_child("gunicorn", gunicorn_command(self.config), gunicorn_env(self.config)))

    def _add(self, name: str, proc: subprocess.Popen) -> None:
        self.children[proc.pid] = (name, proc)

    def request_stop(self, signum: int, _frame=None) -> None:
        if self.stop_signal is None:
            log.info("received %s: shutting down", signal.Signals(signum).name)
        self.stop_signal = signum

    def reap(self) -> list[str]:
        """Collect every exited child (ours and orphans); return our children's names."""
        exited = []
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return exited
            if pid == 0:
                return exited
            if pid in self.children:
                name, proc = self.children.pop(pid)
                proc.returncode = os.waitstatus_to_exitcode(status)
                self.exit_codes[name] = proc.returncode
                exited.append(name)

    def run(self) -> int:
        try:
            return self._supervise()
        finally:
            if self._private_dir is not None:
                shutil.rmtree(self._private_dir, ignore_errors=True)

    def _supervise(self) -> int:
        self.start()
        while self.stop_signal is None:
            died = self.reap()
            if died:
                for name in died:
                    log.error("%s exited unexpectedly with code %s", name, self.exit_codes[name])
                self.stop_all()
                return EXIT_CHILD_FAILED
            time.sleep(0.2)
        clean = self.stop_all()
        return EXIT_OK if clean else EXIT_CHILD_FAILED

    def stop_all(self) -> bool:
        """gunicorn first (it drains in-flight streams), then the engine or tritonserver."""
        clean = True
        stops = (("gunicorn", self.config.graceful_timeout_s + 10), ("engine", ENGINE_STOP_TIMEOUT_S),
                 ("tritonserver", ENGINE_STOP_TIMEOUT_S))
        for name, grace in stops:
            clean &= self._stop(name, grace)
        return clean

    def _stop(self, name: str, grace_s: float) -> bool:
        proc = next((p for n, p in self.children.values() if n == name), None)
        if proc is None:
            return True
        if not stop_child(name, proc, grace_s, exited=lambda: self._gone(proc)):
            return False
        log.info("%s stopped (code %s)", name, self.exit_codes[name])
        return True

    def _gone(self, proc: subprocess.Popen) -> bool:
        self.reap()
        if proc.pid in self.children and proc.returncode is not None:
            # Popen reaped it itself (send_signal polls first), so waitpid(-1) never will
            name, _ = self.children.pop(proc.pid)
            self.exit_codes[name] = proc.returncode
        return proc.pid not in self.children


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="serve", description=__doc__.split("\n")[0])
    # SageMaker starts the container as `docker run IMAGE serve`; with `serve` as
    # the ENTRYPOINT that arrives here as an argument.
    parser.add_argument("command", nargs="?", choices=["serve"], help="optional, ignored")
    parser.parse_args(argv)  # exits 2 on a bad argument
    try:
        notes = adopt_aliases(os.environ)  # TGI's, LMI's and vLLM's names, under ours for every child
        config = ServerConfig.from_env()
        engine = EngineConfig.from_env()  # checked here too, so a bad setting is exit code 2 whichever child reads it
        model_root = MultiModelConfig.from_env().model_root if config.multi_model else None
    except ConfigError as exc:  # what it echoes of a setting is redacted already; scrubbed again, to be sure
        print(f"serve: {scrub(str(exc), secret_values(os.environ))}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    configure_logging(config.log_level)
    for note in notes:
        log.info("%s", note)
    privileges.give_up_root(served_paths(engine, model_root))  # before anything is made or started
    if not config.multi_model and fetch.needs_fetch(engine.model):
        try:
            os.environ[ENV_MODEL] = fetch.fetch_model(engine.model, engine.download_dir, engine.model_revision,
                                                      hub_token())
        except ModelLoadError as exc:  # the S3 or hub client's words: no credential of ours in them
            log.error("%s", scrub(exc.message, secret_values(os.environ)))
            return EXIT_CHILD_FAILED
        if not config.served_model_name:
            os.environ[ENV_SERVED_MODEL_NAME] = fetch.served_name_of(engine.model)
    supervisor = Supervisor(config)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
