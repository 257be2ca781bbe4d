"""The real Flask app over the fake engine, for gunicorn: ``gunicorn 'fakes.fake_wsgi:create()'``
(with tests/ on PYTHONPATH). The HTTP stack is the container's, the model is the
fake's (instant start). ``FAKE_TOKEN_DELAY_S`` slows each token down; the
capacity is ``FAKE_CAPACITY`` sequences.
"""

from __future__ import annotations

import os

from llm_byoc.api.app import create_app
from llm_byoc.config import ServerConfig

from fakes.fake_engine import FakeEngine


def create():
    engine = FakeEngine(token_delay_s=float(os.environ.get("FAKE_TOKEN_DELAY_S", "0")), max_new_tokens_limit=1_000_000)
    return create_app(engine, ServerConfig.from_env(), capacity=int(os.environ.get("FAKE_CAPACITY", "64")))
