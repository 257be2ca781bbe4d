"""Find and run ``tritonserver`` in explicit model-control mode over our repository.

Where the binary comes from, first found:
  1. ``LLM_BYOC_TRITON_SERVER`` (a path), or ``tritonserver`` on PATH: NVIDIA's
     build (``/opt/tritonserver/bin/tritonserver`` in their images, backends
     in ``../backends``: onnxruntime, pytorch, python, ...);
  2. the build inside the ``nvidia-pytriton`` wheel: a CPU-capable server with
     the Python backend only. Its Python stub is shipped per Python version and
     must sit in the backends folder, so the backends are copied once next to
     our repository with this interpreter's stub (as pytriton itself does).

The server listens on 127.0.0.1 only (nothing outside the container talks to
Triton); its stub processes run this interpreter (PATH and LD_LIBRARY_PATH
name its prefix; the stub ignores PYTHONPATH, so each generated model.py
names the folder of the ``llm_byoc`` that wrote it).

``python -m llm_byoc.multimodel.triton.server`` prepares the folders and execs the
server: that is the child ``serve`` supervises. ``TritonServer`` runs the same
command as a child of this process (tests, the benchmark).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass
from pathlib import Path

from ...config import TritonConfig
from ...process.supervisor import start_child, stop_child
from .grpc_api import TritonGrpc

log = logging.getLogger(__name__)


class TritonUnavailable(RuntimeError):
    """No runnable tritonserver here; the message says why."""


@dataclass(frozen=True)
class TritonInstall:
    binary: Path
    backends: Path
    lib_dirs: tuple[str, ...] = ()
    python_stub: Path | None = None  # pytriton: this interpreter's stub, to copy into the backends

    def backend_names(self) -> set[str]:
        return {p.name for p in self.backends.iterdir() if p.is_dir()} if self.backends.is_dir() else set()


def _pytriton_install() -> TritonInstall | None:
    spec = importlib.util.find_spec("pytriton")  # finds the package without importing it (it needs zmq)
    if spec is None or not spec.submodule_search_locations:
        return None
    dist = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / version / "triton_python_backend_stub"
    libs = dist.parent.parent / "nvidia_pytriton.libs"
    if not (dist / "bin" / "tritonserver").is_file():
        return None
    if not stub.is_file():
        raise TritonUnavailable(f"nvidia-pytriton has no Python backend stub for Python {version}")
    _require_libpython(version)
    return TritonInstall(dist / "bin" / "tritonserver", dist / "backends", (str(libs),), stub)


def _require_libpython(version: str) -> None:
    """The stub embeds libpython{version}.so.1.0; without it every load would wait out the stub timeout."""
    import ctypes.util

    name = f"libpython{version}.so.1.0"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if (Path(libdir) / name).is_file() or ctypes.util.find_library(f"python{version}"):
        return
    raise TritonUnavailable(
        f"the Python backend stub needs {name} (a Python built with --enable-shared, or Debian's "
        f"libpython{version} package); it is not in {libdir or 'LIBDIR'} nor known to the dynamic linker"
    )


def find_install(server: str = "") -> TritonInstall:
    """The tritonserver to run; TritonUnavailable with the reason if there is none."""
    binary = Path(server) if server else (Path(found) if (found := shutil.which("tritonserver")) else None)
    if binary is not None:
        if not binary.is_file():
            raise TritonUnavailable(f"{binary} is not a file")
        return TritonInstall(binary, binary.resolve().parent.parent / "backends")
    install = _pytriton_install()
    if install is None:
        raise TritonUnavailable(
            "no tritonserver: set LLM_BYOC_TRITON_SERVER, put tritonserver on PATH, "
            "or pip install --no-deps nvidia-pytriton"
        )
    return install


def backends_folder(install: TritonInstall, config: TritonConfig) -> Path:
    """The backends folder to pass to the server (pytriton's, copied once with our stub)."""
    if install.python_stub is None:
        return install.backends
    target = Path(f"{config.repository.rstrip('/')}.backends")
    stub = target / "python" / "triton_python_backend_stub"
    if not stub.is_file():
        tmp = Path(f"{target}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(install.backends, tmp, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(install.python_stub, tmp / "python" / "triton_python_backend_stub")
        try:
            tmp.rename(target)
        except OSError:  # another process prepared it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def server_command(config: TritonConfig, install: TritonInstall) -> list[str]:
    Path(config.repository).mkdir(parents=True, exist_ok=True)
    return [
        str(install.binary),
        f"--model-repository={config.repository}",
        "--model-control-mode=explicit",
        f"--backend-directory={backends_folder(install, config)}",
        "--http-address=127.0.0.1",
        f"--http-port={config.http_port}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={config.grpc_port}",
        "--allow-metrics=false",
        "--strict-readiness=false",  # ready = serving; a model that failed to load is our 500, not a dead server
        "--exit-timeout-secs=10",
        # A stub that does not start (or answer) in this long fails its load instead of hanging it.
        f"--backend-config=python,stub-timeout-seconds={config.load_timeout_s}",
        "--disable-auto-complete-config",  # our configs are complete: no extra stub per load
        "--log-verbose=0",
    ]


def server_env(install: TritonInstall, base: dict[str, str] | None = None) -> dict[str, str]:
    """The stubs embed this interpreter: its lib folder first, its bin folder first on PATH."""
    env = dict(os.environ if base is None else base)
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    paths = [p for p in (libdir, *install.lib_dirs, env.get("LD_LIBRARY_PATH", "")) if p]
    env["LD_LIBRARY_PATH"] = ":".join(paths)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


class TritonServer:
    """tritonserver as a child of this process, watched: ``on_exit`` fires once if it dies."""

    def __init__(self, config: TritonConfig, on_exit=None, log_file: Path | None = None):
        self.config = config
        self.install = find_install(config.server)
        self._on_exit = on_exit
        self._log_file = log_file
        self._proc: subprocess.Popen | None = None
        self._stopping = False

    def start(self, ready_timeout_s: float = 60.0) -> None:
        output = open(self._log_file, "ab") if self._log_file else subprocess.DEVNULL  # noqa: SIM115
        self._proc = start_child("tritonserver", server_command(self.config, self.install),
                                 server_env(self.install), output)
        threading.Thread(target=self._watch, name="tritonserver-watch", daemon=True).start()
        grpc = TritonGrpc(self.config)
        try:
            grpc.wait_ready(ready_timeout_s, lambda: self._proc.poll() is None)
        finally:
            grpc.close()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _watch(self) -> None:
        code = self._proc.wait()
        if not self._stopping:
            log.error("tritonserver exited (code %s)", code)
            if self._on_exit is not None:
                self._on_exit(code)

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout_s``; then whatever is left of its process group (stubs)."""
        if self._proc is None:
            return None
        self._stopping = True
        if self._proc.poll() is None:
            stop_child("tritonserver", self._proc, timeout_s)
        try:  # a stub Triton gave up on outlives it otherwise, adopted by init
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._proc.wait(5)
        return self._proc.returncode


def main() -> None:
    """``serve``'s child in triton mode: prepare the folders, then become tritonserver."""
    config = TritonConfig.from_env()
    install = find_install(config.server)
    argv = server_command(config, install)
    sys.stdout.flush()
    os.execve(argv[0], argv, server_env(install))


if __name__ == "__main__":
    main()
