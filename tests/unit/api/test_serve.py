"""The gunicorn command line serve builds from ServerConfig."""

from __future__ import annotations

import os
import stat

import pytest
from llm_byoc.api.serve import OVERFLOW_CONNECTIONS, EXIT_BAD_CONFIG, Supervisor, gunicorn_command, main
from llm_byoc.config import ServerConfig


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_gunicorn_command_follows_the_config():
    config = ServerConfig(port=9000, workers=3, max_connections=96, timeout_s=120, graceful_timeout_s=20)
    command = gunicorn_command(config)
    assert option(command, "--worker-class") == "llm_byoc.api.http_worker.ThreadPerConnectionWorker"
    assert option(command, "--bind") == "0.0.0.0:9000"
    # a thread for every admitted connection, and room to refuse more with a 429
    assert (option(command, "--workers"), option(command, "--threads")) == ("3", "96")
    assert int(option(command, "--worker-connections")) == 96 + OVERFLOW_CONNECTIONS
    assert (option(command, "--timeout"), option(command, "--graceful-timeout")) == ("120", "20")
    assert command[-1] == "llm_byoc.api.wsgi:create_wsgi_app()"


def test_multi_model_mode_runs_one_worker():
    command = gunicorn_command(ServerConfig(workers=4, multi_model=True))
    assert option(command, "--workers") == "1"


def test_short_request_timeouts_keep_a_sane_worker_heartbeat():
    assert option(gunicorn_command(ServerConfig(timeout_s=5)), "--timeout") == "30"


def test_only_the_serve_word_is_accepted_as_an_argument():
    with pytest.raises(SystemExit):
        main(["train"])


def test_a_bad_setting_is_exit_code_2(monkeypatch, capsys):
    monkeypatch.setenv("LLM_BYOC_MAX_CONNECTIONS", "none")
    assert main([]) == EXIT_BAD_CONFIG
    assert "LLM_BYOC_MAX_CONNECTIONS" in capsys.readouterr().err
    monkeypatch.delenv("LLM_BYOC_MAX_CONNECTIONS")
    monkeypatch.setenv("LLM_BYOC_DTYPE", "float8")  # read by the engine process, checked by serve first
    assert main([]) == EXIT_BAD_CONFIG


def test_the_engine_socket_goes_in_a_fresh_private_directory(monkeypatch):
    supervisor = Supervisor(ServerConfig())
    folder = os.path.dirname(supervisor.config.engine_socket)
    try:
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
        assert not folder.startswith("/tmp/llm_byoc_engine")
    finally:
        os.rmdir(folder)
    assert Supervisor(ServerConfig(engine_socket="/run/x/engine.sock")).config.engine_socket == "/run/x/engine.sock"
    assert Supervisor(ServerConfig(multi_model=True)).config.engine_socket == ""
