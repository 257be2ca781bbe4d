"""llama.cpp's ``llama-server`` as a child process on a loopback port, with the same
face as ``serve_process.ServeProcess`` (url, wait_ready, memory, stop), so a benchmark
can put it beside our ``serve``. Built by ``container/build_llama_cpp.sh``."""

from __future__ import annotations

import http.client
import os
import subprocess
import time
from pathlib import Path

from llm_byoc.process.procfs import footprint

from .serve_process import free_port, stop_process

# Where container/build_llama_cpp.sh builds it and writes its GGUFs (LLAMA_CPP_ROOT, GGUF_DIR; .ci/run the same)
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-byoc"
DEFAULT_BINARY = Path(os.environ.get("LLAMA_CPP_ROOT") or CACHE / "llama.cpp") / "build/bin/llama-server"
DEFAULT_GGUF_DIR = Path(os.environ.get("GGUF_DIR") or CACHE / "gguf")
CTX_PER_SLOT = 256  # tokens each slot holds: a ~30-word prompt and 64 new tokens, with room


def llama_server_command(binary: Path, gguf: Path, port: int, slots: int, threads: int) -> list[str]:
    """Its defaults but for the slots, the threads and a context that gives each slot CTX_PER_SLOT
    (llama-server splits ``-c`` among its ``-np`` slots)."""
    if slots < 1 or threads < 1:
        raise ValueError("slots and threads must be >= 1")
    return [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port),
            "-np", str(slots), "-t", str(threads), "-c", str(slots * CTX_PER_SLOT), "--no-webui"]


def build_info(binary: Path) -> str:
    """``llama-server --version``: its version and compiler (it logs no CPU feature line by default;
    the build script compiles with GGML_NATIVE=ON, i.e. for this CPU's flags)."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    return " ".join((done.stdout + done.stderr).split())


class LlamaServer:
    def __init__(self, binary: Path, gguf: Path, slots: int, threads: int, log_path: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")
        command = llama_server_command(binary, gguf, self.port, slots, threads)
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout_s: float = 300.0) -> float:
        """Seconds until GET /health says 200 (503 while the model loads)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}; see {self.log_path}")
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2.0)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return time.monotonic() - started
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.2)
        raise RuntimeError(f"/health never said 200 within {timeout_s:.0f} s; see {self.log_path}")

    def memory(self) -> dict[str, int]:
        return {f"llama-server[{self.proc.pid}]": footprint(self.proc.pid).rss}

    def stop(self, timeout_s: float = 30.0) -> int:
        return stop_process(self.proc, timeout_s, self._log)
