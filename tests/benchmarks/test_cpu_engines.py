"""The llama.cpp side-by-side benchmark's pieces that need no llama.cpp: the rows it plans,
the --ours-env parser, llama-server's command line, the per-round ratios."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from benchmarks.cpu_engines import build_parser, parse_variant, ratios, subjects
from benchmarks.llama_server import CTX_PER_SLOT, llama_server_command


def test_ours_env_variants_parse_into_a_name_and_settings():
    assert parse_variant("int8:LLM_BYOC_QUANTIZATION=int8") == ("int8", {"LLM_BYOC_QUANTIZATION": "int8"})
    assert parse_variant("b:A=1, B=x=y") == ("b", {"A": "1", "B": "x=y"})


@pytest.mark.parametrize("text", ["int8", "int8:", ":A=1", "int8:A", "int8:=1"])
def test_malformed_variants_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_variant(text)


def test_the_rows_are_the_three_ggufs_ours_on_both_routes_then_the_variants_and_vllm():
    args = build_parser().parse_args(["--gguf-dir", "/g", "--ours-env", "int8:LLM_BYOC_QUANTIZATION=int8",
                                      "--vllm-python", "/v/bin/python"])
    plan = subjects(args)
    assert [s.name for s in plan] == ["llama-server F32", "llama-server Q8_0", "llama-server Q4_1", "ours fp32",
                                      "ours int8", "vLLM in our serve"]
    assert plan[1].gguf == Path("/g/smollm2-135m-instruct-q8_0.gguf")
    assert [r.api for r in plan[3].routes] == ["openai", "tgi"]
    assert plan[4].env["LLM_BYOC_QUANTIZATION"] == "int8" and plan[4].env["LLM_BYOC_ENGINE"] == "native"
    assert plan[5].python == "/v/bin/python" and plan[5].env["LLM_BYOC_ENGINE"] == "vllm"


def test_llama_quants_and_routes_leave_rows_out():
    args = build_parser().parse_args(["--gguf-dir", "/g", "--llama-quants", "f32", "--routes", "openai",
                                      "--ours-env", "x:A=1"])
    plan = subjects(args)
    assert [s.name for s in plan] == ["llama-server F32", "ours fp32", "ours x"]
    assert [[r.api for r in s.routes] for s in plan[1:]] == [["openai"], ["openai"]]


def test_llama_server_gets_a_context_of_its_slots_times_the_per_slot_budget_on_loopback():
    command = llama_server_command(Path("/b/llama-server"), Path("/g/m.gguf"), 1234, slots=16, threads=2)
    flags = dict(zip(command[1::2], command[2::2]))
    assert flags["-np"] == "16" and flags["-t"] == "2" and flags["-c"] == str(16 * CTX_PER_SLOT)
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "1234" and flags["-m"] == "/g/m.gguf"
    with pytest.raises(ValueError):
        llama_server_command(Path("/b"), Path("/g"), 1, slots=0, threads=2)


def test_ratios_pair_each_round_with_the_base_rows_same_round():
    rows = {"base": [{"c1": {"tok_s": 10.0}}, {"c1": {"tok_s": 20.0}}, {"c1": {"tok_s": 40.0}}],
            "other": [{"c1": {"tok_s": 5.0}}, {"c1": {"tok_s": 30.0}}, {"c1": {"tok_s": 40.0}}]}
    relative = ratios(rows, "base")
    assert relative["base"] == {"c1": 1.0}
    assert relative["other"] == {"c1": 1.0}  # median of 0.5, 1.5, 1.0


def test_a_phase_warms_up_in_a_run_of_its_own_then_measures_whole_waves(tmp_path):
    from benchmarks.cpu_engines import OPENAI, PHASES, load_commands

    def flags(command):
        args = command[command.index("llm_byoc.bench") + 1:]
        return {k: v for k, v in zip(args, args[1:]) if k.startswith("--")}

    clients, requests, warmup, seed = PHASES["c16"]
    warm, measured = (flags(c) for c in load_commands("http://h:1", OPENAI, "c16", False, tmp_path / "c16"))
    # the measured run is whole waves of every client, with no warm-up requests among them (no tail)
    assert measured["--concurrency"] == str(clients) and measured["--num-requests"] == str(requests)
    assert requests % clients == 0 and measured["--warmup-requests"] == "0" and measured["--seed"] == str(seed)
    assert measured["--out"] == str(tmp_path / "c16")
    # the warm-up: its own prompts (nothing for the prefix cache to hand the measured ones)
    assert warm["--num-requests"] == str(warmup) and warm["--seed"] != str(seed)
    assert warm["--out"] != measured["--out"]
    assert len(load_commands("http://h:1", OPENAI, "c16", True, tmp_path / "s")) == 1  # --short: no warm-up
