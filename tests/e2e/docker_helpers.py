"""Shared by the Docker end-to-end tests: the docker CLI, building the image,
starting a container and waiting for its /ping, collecting its logs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import requests
from fixtures.ports import free_port

REPO = Path(__file__).resolve().parents[2]
IMAGE = os.environ.get("LLM_BYOC_TEST_IMAGE", "llm-byoc:e2e")
BUILD_TIMEOUT_S = 45 * 60
STARTUP_S = 300
REQUIRE_ENV = "LLM_BYOC_REQUIRE_DOCKER"


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)


def docker_reachable() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    try:
        result = docker("info", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`docker info` timed out"
    return None if result.returncode == 0 else f"no Docker engine reachable: {result.stderr.strip()[:300]}"


def build_image(tag: str = IMAGE, **build_args: str) -> str:
    """`docker build` the repository as ``tag`` (layers cached by the engine); the tag."""
    args = [arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")]
    result = subprocess.run(
        ["docker", "build", *args, "-t", tag, str(REPO)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return tag


def make_readable(folder: Path) -> Path:
    """Folders 0755, files 0644: readable by the container whatever pytest's umask."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def container_logs(name: str) -> str:
    result = docker("logs", name, check=False)
    return (result.stdout[-3000:] + "\n" + result.stderr[-3000:]).strip()


@contextmanager
def running_container(image: str, mount: tuple[Path, str], env: dict[str, str], prefix: str) -> Iterator[tuple[str, str]]:
    """`docker run -d IMAGE serve` with ``mount`` = (host folder, container path) read-only.

    Yields (container name, base URL) once /ping says 200; the container is
    removed afterwards and its logs printed (pytest shows them on failure).
    """
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "-p", "127.0.0.1::8080", *_run_args(env, [mount]), image, "serve")
    with _serving(name, lambda: docker("port", name, "8080").stdout.split()[0].rsplit(":", 1)[1]) as url:
        yield name, url


@contextmanager
def _serving(name: str, port: Callable[[], str | int]) -> Iterator[str]:
    """The started container ``name``'s URL once /ping says 200; then the container removed, its logs printed
    (pytest shows them on failure)."""
    try:
        url = f"http://127.0.0.1:{port()}"
        wait_for_ping(url, name)
        yield url
    finally:
        logs = container_logs(name)
        docker("rm", "-f", name, check=False)
        print(logs)


def wait_for_ping(url: str, name: str) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        assert state["Running"], f"the container exited: {docker('logs', name, check=False).stderr[-3000:]}"
        try:
            if requests.get(f"{url}/ping", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise AssertionError(f"/ping never said 200: {docker('logs', name, check=False).stderr[-3000:]}")


def stop_and_exit_code(name: str) -> tuple[int, str]:
    """`docker stop` (SIGTERM, then SIGKILL after 60 s); the exit code and the logs."""
    docker("stop", "-t", "60", name, timeout=90)
    state = json.loads(docker("inspect", name).stdout)[0]["State"]
    return state["ExitCode"], docker("logs", name, check=False).stderr[-3000:]


def _run_args(env: dict[str, str], mounts: list[tuple[Path, str]]) -> list[str]:
    volumes = [arg for host_dir, target in mounts for arg in ("-v", f"{host_dir}:{target}:ro")]
    return [*volumes, *(arg for key, value in env.items() for arg in ("-e", f"{key}={value}"))]


@contextmanager
def running_on_host_network(image: str, env: dict[str, str], mounts: list[tuple[Path, str]],
                            prefix: str) -> Iterator[tuple[str, str]]:
    """`docker run -d --network host IMAGE serve`: the container shares this machine's network, so a server
    a test starts on loopback (the stand-in hub, moto's S3) has the same 127.0.0.1 URL inside it. It serves
    on a free port (``SAGEMAKER_BIND_TO_PORT``, as SageMaker sets it). Yields (container name, base URL) once
    /ping says 200; the container is removed afterwards and its logs printed (pytest shows them on failure)."""
    name, port = f"{prefix}-{uuid.uuid4().hex[:8]}", free_port()
    docker("run", "-d", "--name", name, "--network", "host",
           *_run_args({"SAGEMAKER_BIND_TO_PORT": str(port), **env}, mounts), image, "serve")
    with _serving(name, lambda: port) as url:
        yield name, url


def run_to_exit(image: str, env: dict[str, str], mounts: list[tuple[Path, str]],
                timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker run --rm IMAGE serve` in the foreground, for a start that must fail: its exit code and log."""
    return docker("run", "--rm", *_run_args(env, mounts), image, "serve", timeout=timeout, check=False)
