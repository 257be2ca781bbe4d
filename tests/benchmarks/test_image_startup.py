"""The image start-up bench without Docker: the alternating order, docker stats' memory, the figures and the JSON."""

from __future__ import annotations

import json

from benchmarks import image_startup


def test_runs_alternate_between_the_images():
    order = []

    def start(image):
        order.append(image)
        return float(len(order))

    times = image_startup.alternate(["a", "b"], 3, start)
    assert order == ["a", "b", "a", "b", "a", "b"]
    assert times == {"a": [1.0, 3.0, 5.0], "b": [2.0, 4.0, 6.0]}


def test_main_prints_and_writes_each_images_size_and_start_up(monkeypatch, tmp_path, capsys):
    sizes = {"before": 1_830_000_000, "after": 1_830_020_000}
    monkeypatch.setattr(image_startup, "image_size", sizes.__getitem__)
    seen = []

    def fake_measure_run(image, model_dir, env, w1, timeout_s=300):
        seen.append((image, model_dir, env))
        figures = {"startup_s": {"before": 9.0, "after": 9.5}[image] + len(seen) / 100,
                   "memory_at_rest_bytes": {"before": 5 << 30, "after": 1 << 30}[image]}
        if w1:
            figures.update(w1={"output_tokens_per_s": 100.0 + len(seen)}, memory_after_w1_bytes=2 << 30)
        return figures

    monkeypatch.setattr(image_startup, "measure_run", fake_measure_run)
    out = tmp_path / "results" / "startup.json"
    rc = image_startup.main(["--image", "before", "--image", "after", "--runs", "2", "--model", str(tmp_path),
                             "--env", "LLM_BYOC_DEVICE=cpu", "--w1", "--json", str(out)])
    assert rc == 0
    assert {env["LLM_BYOC_DEVICE"] for _, _, env in seen} == {"cpu"} and len(seen) == 4
    figures = json.loads(out.read_text())["images"]
    assert figures["before"]["size_bytes"] == 1_830_000_000
    assert figures["before"]["startup_s"] == [9.01, 9.03] and figures["after"]["startup_s"] == [9.52, 9.54]
    assert figures["after"]["startup"]["min"] == 9.52
    assert figures["before"]["memory_at_rest_bytes_p50"] == 5 << 30 and figures["after"]["w1_tokens_per_s_p50"] == 103.0
    printed = capsys.readouterr().out
    assert "before" in printed and "1830" in printed and "9.01/" in printed and "5120" in printed


def test_docker_stats_memory_is_read_in_its_units(monkeypatch):
    for shown, expected in [("123.5MiB / 23.4GiB", int(123.5 * 2**20)), ("1.25GiB / 8GiB", int(1.25 * 2**30)),
                            ("900KiB / 1GiB", 900 * 1024), ("12B / 1GiB", 12)]:
        monkeypatch.setattr(image_startup, "docker", lambda *args, shown=shown, **kw: shown + "\n")
        assert image_startup.memory_usage("c") == expected
