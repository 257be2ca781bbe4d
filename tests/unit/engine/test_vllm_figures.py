"""SchedulerFigures: vLLM's scheduler stats (as its stat loggers get them after each step) in our
terms for /ping and /metrics. Plain objects stand in for vLLM's SchedulerStats and IterationStats
(the fields read are named in vllm/v1/metrics/stats.py); the vLLM tests run the real ones."""

from __future__ import annotations

from types import SimpleNamespace

from llm_byoc.engine.vllm_core import SchedulerFigures


def scheduler(running, waiting, usage, queries=0, hits=0):
    return SimpleNamespace(num_running_reqs=running, num_waiting_reqs=waiting, kv_cache_usage=usage,
                           prefix_cache_stats=SimpleNamespace(queries=queries, hits=hits))


def test_queues_and_block_use_are_the_latest_step_s_and_counts_add_up():
    figures = SchedulerFigures()
    figures.record(scheduler(2, 5, 0.25, queries=100, hits=0), SimpleNamespace(num_preempted_reqs=0))
    figures.record(scheduler(3, 1, 0.5, queries=100, hits=64), SimpleNamespace(num_preempted_reqs=2))
    figures.record(None, None)  # a step without stats changes nothing
    assert (figures.running, figures.waiting) == (3, 1)
    kv = figures.kv_stats(block_size=16, blocks_total=200, idle=False)
    assert (kv.blocks_total, kv.blocks_used, kv.tokens_used) == (200, 100, 1600)
    assert kv.usage == 0.5  # tokens in whole blocks: vLLM's block share
    assert (kv.prefix_queried_tokens, kv.prefix_hit_tokens, kv.preemptions) == (200, 64, 2)


def test_an_idle_engine_holds_no_blocks_and_use_never_passes_the_total():
    figures = SchedulerFigures()
    figures.record(scheduler(1, 0, 1.0), None)
    assert figures.kv_stats(16, 10, idle=True).blocks_used == 0  # the last step's figures predate its finish
    figures.record(scheduler(1, 0, 1.2), None)
    assert figures.kv_stats(16, 10, idle=False).blocks_used == 10
