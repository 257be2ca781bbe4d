"""The backends benchmark's arithmetic and table (the runs themselves: tests/integration)."""

from __future__ import annotations

from benchmarks.multimodel_backends import _percentile, table


def test_percentiles_pick_an_observed_value():
    values = [float(v) for v in range(1, 101)]
    assert _percentile(values, 0.5) in (50.0, 51.0)
    assert _percentile(values, 0.99) == 99.0 and _percentile([3.0], 0.99) == 3.0


def test_the_table_has_a_row_per_model_and_backend_and_shows_batching():
    figures = {"cold_load_s": 0.25, "memory": {"accounted_mib": 90.0, "uss_mib": 95.5},
               "warm": {"1": {"p50_ms": 10.0, "p99_ms": 12.0, "requests_per_s": 90.0},
                        "8": {"p50_ms": 40.0, "p99_ms": 60.0, "requests_per_s": 170.0,
                              "triton_inferences_per_execution": 3.1}}}
    results = {"native": {"zygote_start_s": 4.0, "m": figures}, "triton": {"zygote_start_s": 0.1, "m": figures}}
    lines = table(results, [1, 8]).splitlines()
    assert len(lines) == 4 and lines[0].startswith("| model | backend | cold load s")
    assert lines[2].startswith("| m | native | 0.25 | 90.0 | 95.5 | 10.0 / 12.0 | 90.0 |")
    assert "170.0 (3.1/batch)" in lines[3] and "zygote" not in table(results, [1, 8])
