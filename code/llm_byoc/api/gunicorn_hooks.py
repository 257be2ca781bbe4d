"""gunicorn server hooks (loaded with ``--config python:llm_byoc.api.gunicorn_hooks``)."""

from __future__ import annotations

from ..metrics import mark_process_dead


def child_exit(server, worker) -> None:
    """A dead worker's Prometheus files stop counting toward live gauges."""
    mark_process_dead(worker.pid)
