"""Stateful sessions (SageMaker's ``X-Amzn-SageMaker-Session-Id``): a session keeps its prompt's prefix cached.

A CAG client sends the same long prefix (a knowledge base) on every call of a
session, and SageMaker routes every call of a session to the same instance.
While the session is open, the full prompt blocks of its latest finished
request are pinned (one reference held), so they are not evicted between its
calls. Pins are bounded: at most ``max_blocks`` in all, the least recently
used session's pins going first; a session idle for ``ttl_s`` is closed; and
the scheduler takes pins back before it would preempt a running sequence or
leave a waiting one stuck behind them. Pinned blocks are still shared with
any other sequence whose prompt has the same prefix.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable

from ..errors import SessionNotFound
from .block_pool import Block, BlockPool


class SessionPins:
    def __init__(self, pool: BlockPool, max_blocks: int, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.pool = pool
        self.max_blocks = max_blocks
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: OrderedDict[str, tuple[float, list[Block]]] = OrderedDict()  # least recent first

    @property
    def num_open(self) -> int:
        return len(self._sessions)

    @property
    def num_pinned(self) -> int:
        return sum(len(blocks) for _, blocks in self._sessions.values())

    def open(self) -> str:
        self.expire()
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = (self._clock(), [])
        return session_id

    def check(self, session_id: str) -> None:
        """A request names this session: it must be open (it is then the most recent)."""
        self.expire()
        if session_id not in self._sessions:
            raise SessionNotFound(f"session {session_id!r} is not open on this instance (closed, expired after "
                                 f"{self.ttl_s:g} s idle, or never opened: start one with NEW_SESSION)")
        self._touch(session_id)

    def close(self, session_id: str) -> None:
        if session_id not in self._sessions:
            raise SessionNotFound(f"session {session_id!r} is not open on this instance")
        _, blocks = self._sessions.pop(session_id)
        self.pool.free(list(reversed(blocks)))

    def pin(self, session_id: str, blocks: list[Block]) -> None:
        """Hold ``blocks`` (a finished request's cached prompt blocks) for the session instead of
        what it held before; within ``max_blocks`` in all."""
        if session_id not in self._sessions:
            return  # closed while the request ran
        blocks = blocks[: self.max_blocks]
        self.pool.touch(blocks)  # first, so blocks it already held are never freed in between
        _, old = self._sessions[session_id]
        self.pool.free(list(reversed(old)))
        self._sessions[session_id] = (self._clock(), blocks)
        self._sessions.move_to_end(session_id)
        while self.num_pinned > self.max_blocks and self.release_one(keep=session_id):
            pass

    def release_one(self, keep: str | None = None) -> bool:
        """Unpin the least recently used session's blocks (it stays open); False if none holds any."""
        for session_id, (used, blocks) in self._sessions.items():
            if blocks and session_id != keep:
                self._sessions[session_id] = (used, [])
                self.pool.free(list(reversed(blocks)))
                return True
        return False

    def expire(self) -> None:
        now = self._clock()
        for session_id in [s for s, (used, _) in self._sessions.items() if now - used > self.ttl_s]:
            _, blocks = self._sessions.pop(session_id)
            self.pool.free(list(reversed(blocks)))

    def _touch(self, session_id: str) -> None:
        _, blocks = self._sessions[session_id]
        self._sessions[session_id] = (self._clock(), blocks)
        self._sessions.move_to_end(session_id)
