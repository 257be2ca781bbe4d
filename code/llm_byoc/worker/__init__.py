"""Model worker: owns the weights and the KV cache; runs one batched step per call.

``main.run_worker`` is the process entry; ``runner.ModelRunner`` does the work
and can be used in-process.
"""
