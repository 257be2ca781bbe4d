"""The image start-up bench without Docker: the alternating order, the figures and the JSON."""

from __future__ import annotations

import json

from llm_byoc.bench import image_startup


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

    def fake_time_to_ping(image, model_dir, env, timeout_s=300):
        seen.append((image, model_dir, env))
        return {"before": 9.0, "after": 9.5}[image] + len(seen) / 100

    monkeypatch.setattr(image_startup, "time_to_ping", fake_time_to_ping)
    out = tmp_path / "results" / "startup.json"
    rc = image_startup.main(["--image", "before", "--image", "after", "--runs", "2", "--model", str(tmp_path),
                             "--env", "LLM_BYOC_DEVICE=cpu", "--json", str(out)])
    assert rc == 0
    assert {env["LLM_BYOC_DEVICE"] for _, _, env in seen} == {"cpu"} and len(seen) == 4
    figures = json.loads(out.read_text())["images"]
    assert figures["before"]["size_bytes"] == 1_830_000_000
    assert figures["before"]["startup_s"] == [9.01, 9.03] and figures["after"]["startup_s"] == [9.52, 9.54]
    assert figures["after"]["startup"]["min"] == 9.52
    printed = capsys.readouterr().out
    assert "before" in printed and "1830" in printed and "9.01/" in printed
