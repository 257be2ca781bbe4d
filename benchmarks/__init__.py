"""Development benchmarks: A/B runs, engine and step timings, start-up and overload figures.

Not part of the served package (the image does not carry them); run from the repository root,
``python -m benchmarks.NAME``. The load generator users run is ``llm_byoc.bench``.
"""
