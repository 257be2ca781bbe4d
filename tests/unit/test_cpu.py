"""What the CPU offers: usable cores under a cgroup quota, thread defaults, descriptions."""

from __future__ import annotations

import os

import pytest

from llm_byoc import cpu


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_cgroup_v2_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpu.cgroup_cpu_quota(tmp_path) == 1.5
    assert cpu.usable_cpus(tmp_path) == 1  # 1.5 CPUs run one thread well, not two


def test_cgroup_v2_without_quota(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpu.cgroup_cpu_quota(tmp_path) is None
    assert cpu.usable_cpus(tmp_path) == _affinity()


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cpu.cgroup_cpu_quota(tmp_path) == 1.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cpu.cgroup_cpu_quota(tmp_path) is None


def test_a_quota_above_the_affinity_mask_does_not_add_cores(tmp_path):
    (tmp_path / "cpu.max").write_text(f"{(_affinity() + 8) * 100000} 100000")
    assert cpu.usable_cpus(tmp_path) == _affinity()


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cpu.cgroup_cpu_quota(tmp_path / "absent") is None


@pytest.mark.parametrize("configured, env, expected", [
    (3, {"OMP_NUM_THREADS": "7"}, 3),  # LLM_BYOC_NUM_THREADS wins
    (0, {"OMP_NUM_THREADS": "7"}, 7),  # then the operator's OpenMP setting
    (0, {"OMP_NUM_THREADS": "5,2"}, 5),  # nested form: the outer level
])
def test_thread_default_respects_the_operator(configured, env, expected):
    assert cpu.default_num_threads(configured, env) == expected


def test_thread_default_is_the_usable_cores(monkeypatch):
    monkeypatch.setattr(cpu, "usable_cpus", lambda root=cpu.CGROUP_ROOT: 3)
    assert cpu.default_num_threads(0, {}) == 3
    assert cpu.default_num_threads(0, {"OMP_NUM_THREADS": "junk"}) == 3


def test_describe_names_the_cpu_and_its_features():
    info = cpu.describe()
    assert info["cpu"] and info["usable_cpus"] >= 1
    assert set(info["features"]) <= {"AVX2", "AVX-512", "AVX-512-BF16", "AVX-NE-CONVERT", "AMX-BF16"}
    assert info["cpu"] in cpu.describe_line()
