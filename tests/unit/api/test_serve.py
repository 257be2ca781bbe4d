"""The gunicorn command line serve builds from ServerConfig; what serve checks before it starts anything."""

from __future__ import annotations

import os
import stat

import pytest
from llm_byoc.api import serve
from llm_byoc.api.serve import (OVERFLOW_CONNECTIONS, EXIT_BAD_CONFIG, Supervisor, gunicorn_command, main,
                                 served_paths)
from llm_byoc.config import EngineConfig, ServerConfig


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


def test_served_paths_are_the_local_model_and_its_adapters_or_the_models_root(tmp_path):
    (tmp_path / "adapters").mkdir()
    engine = EngineConfig(model=str(tmp_path), adapters_dir=str(tmp_path / "adapters"))
    assert served_paths(engine, None) == [str(tmp_path), str(tmp_path / "adapters")]
    assert served_paths(EngineConfig(model="org/hub-model", adapters_dir=str(tmp_path / "none")), None) == []
    assert served_paths(engine, "/opt/ml/models") == ["/opt/ml/models"]


def test_serve_decides_who_it_runs_as_before_it_makes_or_starts_anything(monkeypatch, tmp_path,
                                                                          restore_root_logger):
    events = []

    class RecordingSupervisor:
        def __init__(self, config):
            events.append("supervisor")  # where the engine socket's private directory is made

        def request_stop(self, *_):
            pass

        def run(self):
            return 0

    monkeypatch.setattr(serve.privileges, "give_up_root", lambda paths: events.append(("decide", paths)))
    monkeypatch.setattr(serve, "Supervisor", RecordingSupervisor)
    monkeypatch.setattr(serve.signal, "signal", lambda *_: None)
    monkeypatch.setenv("LLM_BYOC_MODEL", str(tmp_path))
    monkeypatch.setenv("LLM_BYOC_ADAPTERS_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("SAGEMAKER_MULTI_MODEL", raising=False)
    assert main([]) == 0
    assert events == [("decide", [str(tmp_path)]), "supervisor"]


def test_serve_reads_other_images_settings_and_fetches_the_model_first(monkeypatch, tmp_path, restore_root_logger):
    events = []

    class RecordingSupervisor:
        def __init__(self, config):
            events.append(("supervisor", os.environ.get("LLM_BYOC_MODEL"), "OPTION_MODEL_ID" in os.environ,
                           os.environ.get("LLM_BYOC_SERVED_MODEL_NAME")))

        def request_stop(self, *_):
            pass

        def run(self):
            return 0

    def fetch_model(source, download_dir, revision, token):
        events.append(("fetch", source, download_dir, revision, token))
        return str(tmp_path)

    environ = {"OPTION_MODEL_ID": "s3://bucket/llama/", "HF_MODEL_REVISION": "v2", "HF_TOKEN": "hf_secret",
               "LLM_BYOC_DOWNLOAD_DIR": str(tmp_path / "dl"), "LLM_BYOC_ADAPTERS_DIR": str(tmp_path / "none")}
    monkeypatch.setattr(os, "environ", environ)
    monkeypatch.setattr(serve.privileges, "give_up_root", lambda paths: events.append("decide"))
    monkeypatch.setattr(serve.fetch, "fetch_model", fetch_model)
    monkeypatch.setattr(serve, "Supervisor", RecordingSupervisor)
    monkeypatch.setattr(serve.signal, "signal", lambda *_: None)
    assert main([]) == 0
    assert events == ["decide", ("fetch", "s3://bucket/llama/", str(tmp_path / "dl"), "v2", "hf_secret"),
                      ("supervisor", str(tmp_path), False, "llama")]  # named as the source, not the folder


def test_a_model_that_cannot_be_fetched_is_exit_1_and_a_conflict_exit_2(monkeypatch, tmp_path, capsys,
                                                                         restore_root_logger):
    from llm_byoc.errors import ModelLoadError

    def refuse(*args):
        raise ModelLoadError("cannot list s3://bucket/x/: NoSuchBucket")

    monkeypatch.setattr(os, "environ", {"HF_MODEL_ID": "s3://bucket/x/"})
    monkeypatch.setattr(serve.privileges, "give_up_root", lambda paths: None)
    monkeypatch.setattr(serve.fetch, "fetch_model", refuse)
    monkeypatch.setattr(serve, "Supervisor", lambda config: pytest.fail("nothing may start"))
    assert main([]) == serve.EXIT_CHILD_FAILED
    monkeypatch.setattr(os, "environ", {"HF_MODEL_ID": "org/a", "LLM_BYOC_MODEL": "/opt/ml/model"})
    assert main([]) == EXIT_BAD_CONFIG
    assert "HF_MODEL_ID='org/a' and LLM_BYOC_MODEL='/opt/ml/model'" in capsys.readouterr().err
