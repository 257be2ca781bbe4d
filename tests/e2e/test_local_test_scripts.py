"""Every script in local_test/ run once, as a person runs them, against the image CI builds.

In the order of the README and of the issue that found them broken (#31): build_and_run.sh
(its `docker build` is the session image's, from the layer cache), predict.sh and stream.sh
in every style, `docker stop`, then the multi-model demo (build_model_repository.sh,
serve_mme.sh, mme_invoke.sh) under the same container name, the agent demo, serve_local.sh,
and check_gpu_image.sh on the CPU. Short prompts and few tokens (MAX_TOKENS); one container
name and one free port of their own, so nothing clashes with the other e2e tests.

The README's two commands run in an environment made from the README's steps alone, not CI's
(#47: CI's environment has the offline model packages, a newcomer's has not): build_and_run.sh
with a PATH whose python3 has nothing but the standard library (Docker and curl are all its step
asks for), agent_demo.sh with a fresh virtual environment holding only `pip install -e '.[agent]'`
and no demo repository yet. The other scripts run with CI's own Python first on PATH.

Skipped, with the reason, when no Docker engine answers — unless
LLM_BYOC_REQUIRE_DOCKER=1 (set by .ci/run), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from docker_helpers import REPO, docker
from fixtures import machine
from fixtures.ports import free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]

LOCAL_TEST = REPO / "local_test"
SCRIPT_TIMEOUT_S = 600
STARTUP_S = 300
VENV_INSTALL_TIMEOUT_S = 1200
# Whatever points a script's python3 at CI's environment rather than the one a step made.
PYTHON_ENV_VARS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")


def ci_bin_dirs() -> set[Path]:
    """The folders of this test run's Python (CI's environment, with every model package), and the checkout's .venv."""
    return {Path(sys.executable).parent, Path(sys.prefix) / "bin", REPO / ".venv" / "bin"}


def path_without_ci_python(path: str) -> str:
    ci = {d.resolve() for d in ci_bin_dirs()}
    return os.pathsep.join(d for d in path.split(os.pathsep) if d and Path(d).resolve() not in ci)


def env_with_python(env: dict, bin_dir: Path) -> dict:
    """``env`` with ``bin_dir`` first on PATH, CI's Python off it and no variable that leads back to it."""
    clean = {k: v for k, v in env.items() if k not in PYTHON_ENV_VARS}
    return {**clean, "PATH": f"{bin_dir}{os.pathsep}{path_without_ci_python(env['PATH'])}"}


@pytest.fixture(scope="session")
def docker_only_bin(tmp_path_factory) -> Path:
    """The bin folder of a virtual environment with nothing in it: a python3 that cannot import llm_byoc."""
    venv = tmp_path_factory.mktemp("docker-only") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    assert subprocess.run([venv / "bin" / "python3", "-c", "import llm_byoc"], capture_output=True).returncode != 0
    return venv / "bin"


@pytest.fixture(scope="session")
def readme_venv_bin(tmp_path_factory) -> Path:
    """A fresh virtual environment (not --system-site-packages) made as the README says before
    agent_demo.sh: `pip install -e '.[agent]'` from the repository root, nothing else. Its bin folder.

    About a minute, two on a busy machine, with pip's cache cold or warm: most of it is unpacking and
    byte-compiling torch (2.13.0, whichever build pip's own configuration finds, as for a newcomer) and
    the rest. The editable install writes only git-ignored files into the checkout (the egg-info, the
    compiled kernel, rebuilt from the same source)."""
    venv = tmp_path_factory.mktemp("readme-steps") / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = env_with_python(dict(os.environ), venv / "bin")
    result = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", ".[agent]"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=VENV_INSTALL_TIMEOUT_S)
    assert result.returncode == 0, f"pip install -e '.[agent]' failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    print(f"[local_test] the README's venv (pip install -e '.[agent]'): {time.monotonic() - started:.1f} s")
    return venv / "bin"


@pytest.fixture(scope="module")
def scripts_env(image, tmp_path_factory):
    """The environment every script runs with (CI's Python first on PATH); the container and the image tag are
    removed afterwards."""
    work = tmp_path_factory.mktemp("local-test")
    name = f"llm-byoc-e2e-scripts-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "IMAGE": f"{image}-local-test",  # build_and_run.sh tags what it builds: not the session's tag
        "NAME": name,
        "PORT": str(port),
        "URL": f"http://localhost:{port}",
        "MODEL_DIR": str(work / "SmolLM2-135M-Instruct"),
        "MME_DIR": str(work / "mme"),
        "MAX_TOKENS": "8",
        "RESULTS_DIR": str(work / "gpu_check"),
        "W1_REQUESTS": "4",
        "W1_CONCURRENCY": "2",
        "W1_TOKENS": "8",
        "C64_CONCURRENCY": "4",
        "C64_REQUESTS": "4",
    }
    yield env
    for container in (name, f"{name}-other", f"{name}-agent"):
        docker("rm", "-f", container, check=False)
    docker("rmi", env["IMAGE"], check=False)


def run(env: dict, script: str, *args: str, expect: int = 0, timeout: float = SCRIPT_TIMEOUT_S,
        extra_env: dict | None = None) -> subprocess.CompletedProcess:
    """``bash local_test/SCRIPT ARGS``; asserts its exit status and prints how long it took."""
    started = time.monotonic()
    result = subprocess.run(["bash", str(LOCAL_TEST / script), *args], env={**env, **(extra_env or {})},
                            capture_output=True, text=True, timeout=timeout, cwd=REPO)
    print(f"[local_test] {script} {' '.join(args)}: exit {result.returncode} in {time.monotonic() - started:.1f} s")
    output = f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == expect, f"{script} exited {result.returncode}, not {expect}\n{output}"
    return result


class BackgroundServer:
    """A foreground server script (serve_mme.sh, serve_local.sh) run in the background."""

    def __init__(self, env: dict, log: Path, script: str, *args: str):
        self.env, self.log, self.script = env, log, script
        self.started = time.monotonic()
        with log.open("w") as out:
            self.process = subprocess.Popen(["bash", str(LOCAL_TEST / script), *args], env=env, cwd=REPO,
                                            stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"{self.script} exited {self.process.returncode}:\n{self.tail()}"
            try:
                if requests.get(f"{self.env['URL']}/ping", timeout=2).status_code == 200:
                    print(f"[local_test] {self.script}: /ping 200 after {time.monotonic() - self.started:.1f} s")
                    return
            except requests.RequestException:
                pass
            time.sleep(1)
        raise AssertionError(f"{self.script}: /ping never said 200\n{self.tail()}")

    def stop(self) -> int:
        """`docker stop -t 60 NAME`, as the README says; the script's exit status."""
        docker("stop", "-t", "60", self.env["NAME"], timeout=90, check=False)
        return self.process.wait(timeout=90)

    def tail(self) -> str:
        return self.log.read_text()[-3000:]


def container_gone(name: str, within_s: float = 30) -> bool:
    """True once no container has that name (a --rm container goes a moment after it stops)."""
    deadline = time.monotonic() + within_s
    while docker("inspect", name, check=False).returncode == 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def assert_text_stream(result: subprocess.CompletedProcess) -> None:
    assert result.stdout.strip(), result.stderr
    assert "data:" not in result.stdout, result.stdout  # the text, not the events
    assert "tokens: TTFT" in result.stderr and "tokens/s" in result.stderr, result.stderr


def test_build_and_run_serves_and_streams_text(scripts_env, docker_only_bin):
    # The README's first step asks for Docker and curl only: no Python with llm_byoc on this machine.
    result = run(env_with_python(scripts_env, docker_only_bin), "build_and_run.sh")
    assert f"converting SmolLM2-135M-Instruct into {Path(scripts_env['MODEL_DIR']).resolve()} (inside" in result.stdout
    assert "== /ping is 200" in result.stdout
    assert '"object":"chat.completion"' in result.stdout
    streamed = result.stdout.split("(TGI, streamed", 1)[1]
    assert "data:" not in streamed and "tokens: TTFT" in result.stderr
    model = Path(scripts_env["MODEL_DIR"])
    assert all(p.stat().st_mode & stat.S_IROTH for p in model.iterdir()), "prepare_model.sh left unreadable files"


def test_predict_and_stream_in_every_style(scripts_env, tmp_path):
    for style in ("tgi", "chat", "completion"):
        assert run(scripts_env, "predict.sh", "Hi", style).stdout.strip().startswith(("[", "{"))
        assert_text_stream(run(scripts_env, "stream.sh", "Hi", style))
    raw = run(scripts_env, "stream.sh", "--raw", "Hi", "chat").stdout
    assert raw.startswith("data: {") and raw.rstrip().endswith("data: [DONE]")
    # A machine whose Python cannot import llm_byoc: the text is printed inside the server's container.
    no_python = tmp_path / "bin"
    no_python.mkdir()
    (no_python / "python3").write_text("#!/bin/sh\nexit 1\n")
    (no_python / "python3").chmod(0o755)
    fallback = run(scripts_env, "stream.sh", "Hi", "tgi",
                   extra_env={"PATH": f"{no_python}:{scripts_env['PATH']}"})
    assert_text_stream(fallback)


def test_what_is_in_the_way_is_said_plainly(scripts_env, tmp_path):
    name, port = scripts_env["NAME"], scripts_env["PORT"]
    clash = run(scripts_env, "serve_local.sh", scripts_env["MODEL_DIR"], expect=1, timeout=60)
    assert f"a container named {name} is already running" in clash.stderr
    (tmp_path / "mme" / "smollm2-135m-instruct").mkdir(parents=True)
    demo_env = {"MME_DIR": str(tmp_path / "mme")}
    demo = run(scripts_env, "agent_demo.sh", expect=1, timeout=60, extra_env=demo_env)
    assert f"a container named {name} is already running" in demo.stderr
    assert docker("inspect", "-f", "{{.State.Running}}", name).stdout.strip() == "true"  # left alone
    # Its server dies at start (a bad setting): said at once with the server's last lines, not after 300 s.
    started = time.monotonic()
    free = str(free_port())
    dead = run(scripts_env, "agent_demo.sh", expect=1, timeout=60, extra_env={
        **demo_env, "NAME": f"{name}-other", "PORT": free, "URL": f"http://localhost:{free}", "MEMORY_BUDGET": "lots"})
    assert "the server exited before" in dead.stderr and "LLM_BYOC_MEMORY_BUDGET='lots'" in dead.stderr
    assert time.monotonic() - started < 30
    other = run(scripts_env, "serve_mme.sh", str(REPO), expect=1, timeout=60, extra_env={"NAME": f"{name}-other"})
    assert f"port {port} is already in use by the container {name}" in other.stderr
    unbuilt = run(scripts_env, "agent_demo.sh", expect=1, timeout=60, extra_env={
        **demo_env, "NAME": f"{name}-other", "IMAGE": "llm-byoc:not-built"})  # agent_demo.sh before build_and_run.sh
    assert "no image llm-byoc:not-built here: build it first" in unbuilt.stderr
    closed = free_port()
    nobody = run(scripts_env, "predict.sh", "Hi", expect=1, timeout=60,
                 extra_env={"PORT": str(closed), "URL": f"http://localhost:{closed}"})
    assert "nothing answers on" in nobody.stderr


def test_docker_stop_exits_0_and_leaves_the_stopped_container(scripts_env):
    name = scripts_env["NAME"]
    docker("stop", "-t", "60", name, timeout=90)
    state = docker("inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name).stdout.split()
    assert state == ["exited", "0"]


def test_the_multi_model_demo_after_docker_stop(scripts_env, tmp_path):
    docker("stop", "-t", "60", scripts_env["NAME"], timeout=90, check=False)  # stopped already, unless run alone
    mme = Path(scripts_env["MME_DIR"])
    run(scripts_env, "build_model_repository.sh")
    files = [p for p in mme.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & stat.S_IROTH for p in files), "build_model_repository.sh: unreadable files"
    # The same name as build_and_run.sh's stopped container: serve_mme.sh removes it.
    server = BackgroundServer(scripts_env, tmp_path / "serve_mme.log", "serve_mme.sh")
    try:
        server.wait_ready()
        assert "removing the stopped container" in server.tail()
        first = run(scripts_env, "mme_invoke.sh")
        assert '"predictions"' in first.stdout and '"embeddings"' in first.stdout
        assert "generated_text" in first.stdout
        run(scripts_env, "mme_invoke.sh")  # again against the same server: 409s for what is loaded
    finally:
        status = server.stop()
    assert status == 0, server.tail()


def test_the_agent_demo(scripts_env, readme_venv_bin, tmp_path):
    # As the README has it: after build_and_run.sh (the image; its container may still run) and
    # pip install -e '.[agent]', on a machine with no demo repository yet and none of the offline model packages.
    port = str(free_port())
    env = env_with_python({**scripts_env, "NAME": f"{scripts_env['NAME']}-agent", "PORT": port,
                           "URL": f"http://localhost:{port}", "MME_DIR": str(tmp_path / "mme")}, readme_venv_bin)
    result = run(env, "agent_demo.sh", "How many tokens does a KV cache block hold?")
    assert f"building {Path(env['MME_DIR']).resolve()} inside" in result.stdout, "not built inside the image"
    assert "== RAG" in result.stdout and "== CAG" in result.stdout
    assert "Sources:" in result.stdout
    assert container_gone(env["NAME"]), "the demo left its server behind"


def test_serve_local_serves_in_the_foreground(scripts_env, tmp_path):
    server = BackgroundServer(scripts_env, tmp_path / "serve_local.log", "serve_local.sh")
    try:
        server.wait_ready()
        assert '"generated_text"' in run(scripts_env, "predict.sh", "Hi", "tgi").stdout
    finally:
        status = server.stop()
    assert status == 0, server.tail()


def test_wait_for_ping_reports_a_server_that_died_at_once(scripts_env):
    name = f"{scripts_env['NAME']}-other"
    docker("run", "-d", "--name", name, "--entrypoint", "sh", scripts_env["IMAGE"], "-c", "echo cannot serve; exit 3")
    started = time.monotonic()
    script = f'source "{LOCAL_TEST}/common.sh"; wait_for_ping 300 {name}'
    result = subprocess.run(["bash", "-c", script], env=scripts_env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and time.monotonic() - started < 30
    assert "the server exited" in result.stderr and "cannot serve" in result.stderr


def test_check_gpu_image_without_a_gpu(scripts_env):
    if shutil.which("nvidia-smi"):
        machine.skip_lacking("a machine without a GPU: with one, local_test/check_gpu_image.sh is run by hand (a 3 GB build)")
    refused = run(scripts_env, "check_gpu_image.sh", expect=1, timeout=60, extra_env={"IMAGE": "llm-byoc:gpu"})
    assert "no NVIDIA GPU here" in refused.stderr
    # Its steps on the CPU with the CPU image, as its header says.
    result = run(scripts_env, "check_gpu_image.sh", extra_env={"GPUS": "", "DEVICE": "cpu", "BUILD": "0"})
    assert "== done" in result.stdout
    assert (Path(scripts_env["RESULTS_DIR"]) / "engine_bench.json").is_file()
    for workload in ("w1", "c64"):  # the CPU image has no vLLM: our engine's runs only, and it says so
        assert (Path(scripts_env["RESULTS_DIR"]) / f"http_{workload}_native.json").is_file()
    assert "== 5. (skipped:" in result.stdout
