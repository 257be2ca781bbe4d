"""engine_bench's arguments: the GPU run the GPU image check makes, and what it refuses."""

from __future__ import annotations

import pytest

from benchmarks import engine_bench


def test_cuda_runs_need_skip_baselines(capsys):
    with pytest.raises(SystemExit) as raised:
        engine_bench.main(["--device", "cuda"])
    assert raised.value.code == 2
    assert "--skip-baselines" in capsys.readouterr().err


def test_the_gpu_check_arguments_parse():
    args = engine_bench.build_parser().parse_args(
        ["--device", "cuda", "--dtype", "bfloat16", "--skip-baselines", "--model", "/opt/ml/model"])
    assert (args.device, args.dtype, args.num_requests, args.concurrency, args.max_new_tokens) == \
        ("cuda", "bfloat16", 32, 16, 64)  # W1's shape by default
