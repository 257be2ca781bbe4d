"""Finding tritonserver, its command line and environment; Triton's errors as ours."""

from __future__ import annotations

import sys

import pytest
from llm_byoc.config import TritonConfig
from llm_byoc.errors import EngineDead, RequestTimeout, ServingError
from llm_byoc.multimodel.triton.grpc_api import as_serving_error
from llm_byoc.multimodel.triton.server import TritonInstall, TritonUnavailable, find_install, server_command, server_env


def test_a_named_server_that_is_not_there_is_unavailable(tmp_path):
    with pytest.raises(TritonUnavailable, match="is not a file"):
        find_install(str(tmp_path / "tritonserver"))


def test_nvidias_layout_has_its_backends_beside_bin(tmp_path):
    binary = tmp_path / "opt" / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    (tmp_path / "opt" / "backends" / "onnxruntime").mkdir(parents=True)
    install = find_install(str(binary))
    assert install.backends == tmp_path / "opt" / "backends" and install.backend_names() == {"onnxruntime"}


def test_the_command_is_explicit_mode_on_loopback(tmp_path):
    install = TritonInstall(tmp_path / "tritonserver", tmp_path / "backends")
    config = TritonConfig(repository=str(tmp_path / "repo"), http_port=9100, grpc_port=9101, load_timeout_s=7)
    argv = server_command(config, install)
    assert argv[0] == str(tmp_path / "tritonserver") and (tmp_path / "repo").is_dir()
    for flag in ("--model-control-mode=explicit", f"--model-repository={tmp_path / 'repo'}", "--http-address=127.0.0.1",
                 "--grpc-address=127.0.0.1", "--grpc-port=9101", "--backend-config=python,stub-timeout-seconds=7"):
        assert flag in argv


def test_the_stubs_run_this_interpreter(tmp_path):
    env = server_env(TritonInstall(tmp_path / "t", tmp_path / "b", ("/libs",)), {"PATH": "/usr/bin"})
    assert env["PATH"].split(":")[0] == str(__import__("pathlib").Path(sys.executable).parent)
    assert "/libs" in env["LD_LIBRARY_PATH"].split(":")


class FakeTritonError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self._status, self._message = status, message

    def status(self) -> str:
        return self._status

    def message(self) -> str:
        return self._message


@pytest.mark.parametrize(
    "status, message, expected",
    [
        ("StatusCode.UNAVAILABLE", "failed to connect to all addresses", EngineDead),
        ("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded", RequestTimeout),
        ("StatusCode.INTERNAL", "Stub process 'm_0_0' is not healthy.", EngineDead),
        ("StatusCode.INTERNAL", "ValueError: bad", ServingError),
    ],
)
def test_tritons_errors_become_ours(status, message, expected):
    error = as_serving_error(FakeTritonError(status, message), "model 'm'")
    assert type(error) is expected and "model 'm'" in error.message
