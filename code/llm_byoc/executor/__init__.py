"""The engine's handle on its model worker process (built on ``llm_byoc.process``)."""

from .step_worker import StepFailed, StepWorker

__all__ = ["StepFailed", "StepWorker"]
