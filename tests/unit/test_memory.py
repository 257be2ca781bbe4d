"""The container's memory: cgroup v1/v2 limits and usage, MemAvailable."""

from __future__ import annotations

from llm_byoc import memory


def test_cgroup_v2_limit_and_usage_less_reclaimable_cache(tmp_path):
    (tmp_path / "memory.max").write_text("8589934592\n")
    (tmp_path / "memory.current").write_text("3221225472\n")
    (tmp_path / "memory.stat").write_text("anon 2147483648\ninactive_file 1073741824\n")
    assert memory.cgroup_memory_limit(tmp_path) == 8 * 1024**3
    assert memory.cgroup_memory_usage(tmp_path) == 2 * 1024**3


def test_cgroup_v2_without_a_limit(tmp_path):
    (tmp_path / "memory.max").write_text("max\n")
    assert memory.cgroup_memory_limit(tmp_path) is None
    assert memory.container_memory(tmp_path) == memory.physical_memory()


def test_cgroup_v1_unlimited_is_no_limit(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(9223372036854771712))
    assert memory.cgroup_memory_limit(tmp_path) is None
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text(str(2 * 1024**3))
    assert memory.cgroup_memory_limit(tmp_path) == 2 * 1024**3
    assert memory.container_memory(tmp_path) == min(2 * 1024**3, memory.physical_memory())


def test_available_memory_is_below_both_the_limit_and_memavailable(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:    4194304 kB\n")
    (tmp_path / "memory.max").write_text(str(3 * 1024**3))
    (tmp_path / "memory.current").write_text(str(2 * 1024**3))
    assert memory.mem_available(meminfo) == 4 * 1024**3
    assert memory.available_memory(tmp_path, meminfo) == 1024**3
    (tmp_path / "memory.max").write_text("max")
    assert memory.available_memory(tmp_path, meminfo) == 4 * 1024**3
