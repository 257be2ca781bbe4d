"""Model handlers: the code that runs inside a model's worker process, one per kind."""
