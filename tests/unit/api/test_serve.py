"""The gunicorn command line serve builds from ServerConfig."""

from __future__ import annotations

import pytest
from llm_byoc.api.serve import gunicorn_command, main
from llm_byoc.config import ServerConfig


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_gunicorn_command_follows_the_config():
    config = ServerConfig(port=9000, workers=3, threads=96, timeout_s=120, graceful_timeout_s=20)
    command = gunicorn_command(config)
    assert option(command, "--worker-class") == "gthread"
    assert option(command, "--bind") == "0.0.0.0:9000"
    assert (option(command, "--workers"), option(command, "--threads")) == ("3", "96")
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
