import importlib

import pytest

from llm_byoc import cli


def test_every_command_points_at_a_module_with_main():
    for name, (module_name, _) in cli.COMMANDS.items():
        assert callable(importlib.import_module(module_name).main), name


def test_help_lists_the_commands(capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "serve" in out and "deploy" in out and "bench" in out


def test_unknown_command_is_an_error(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err


def test_client_subcommands_keep_their_name(monkeypatch):
    seen = {}
    monkeypatch.setattr("llm_byoc.client.cli.main", lambda argv: seen.setdefault("argv", argv) and 0)
    cli.main(["stream", "--local", "http://127.0.0.1:1", "hi"])
    assert seen["argv"][0] == "stream"


@pytest.mark.parametrize("flag", ["-h", "help"])
def test_help_aliases(flag):
    assert cli.main([flag]) == 0
