"""The instance-per-model-size table in docs/deploy.md is what benchmarks/sizing_shapes.py prints (the
sizing code of `python -m llm_byoc.deploy size` on five Llama shapes): a change to the sizing rule
that leaves the table stale fails here."""

from __future__ import annotations

from pathlib import Path

from benchmarks import sizing_shapes

DOCS = Path(__file__).resolve().parents[3] / "docs" / "deploy.md"


def test_the_documented_table_is_the_computed_one(capsys):
    sizing_shapes.main()
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 2 + len(sizing_shapes.SHAPES)
    assert "70B (Llama-3.1-70B) | 131.4 GiB" in rows[-1] and "`ml.g6e.12xlarge` (TP 4" in rows[-1]
    documented = DOCS.read_text()
    for row in rows:
        assert row in documented, row
