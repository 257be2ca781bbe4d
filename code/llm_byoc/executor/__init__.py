"""Starts and watches the model worker process."""

from .worker_process import StepFailed, WorkerProcess

__all__ = ["StepFailed", "WorkerProcess"]
