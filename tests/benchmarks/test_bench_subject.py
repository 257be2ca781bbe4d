from benchmarks.bench_subject import run_prompts
from benchmarks.engine_bench import bench_prompts


def test_each_run_sends_the_benchmark_prompts_new_to_a_prefix_cache():
    prompts = bench_prompts(32)
    runs = [run_prompts(prompts, k) for k in range(3)]
    for run in runs:
        assert [p.split(". ", 1)[1] for p in run] == prompts  # the same workload behind the run's tag
    assert runs[0] == run_prompts(prompts, 0)  # every subject gets the same prompts in run K
    starts = {p[:8] for run in runs for p in run}
    assert len(starts) == 3  # no run starts like another: none finds the last run's blocks cached
