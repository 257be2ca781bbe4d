"""The knowledge agent: plan, then act; or the tool-calling loop; RAG or CAG underneath.

    agent = KnowledgeAgent(llm, knowledge, AgentSettings())
    answer = agent.answer("How many tokens does a KV block hold?")    # plan -> actions in order
    looped = agent.answer_with_tools("...")                           # OpenAI tool calls

With CAG, ``cag_session`` opens a stateful session for the run (SageMaker then
keeps every call on the instance whose cache holds the prefix) and
``CacheAugmentedKnowledge.preload`` puts the prefix in that cache first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..client import EndpointError, Session
from .actions import DEFAULT_ANSWER_TOKENS, ActionContext, ActionExecutor, ActionResult
from .errors import AgentError
from .knowledge import DEFAULT_CONTEXT_TOKENS, DEFAULT_TOP_K, Knowledge
from .llm import ChatModel
from .planner import DEFAULT_PLAN_ATTEMPTS, DEFAULT_PLAN_TEMPERATURE, DEFAULT_PLAN_TOKENS, Planner, PlanResult
from .tool_loop import ToolLoop, ToolLoopResult

log = logging.getLogger(__name__)

SESSION_MODES = ("auto", "on", "off")


@dataclass(frozen=True)
class AgentSettings:
    top_k: int = DEFAULT_TOP_K
    answer_tokens: int = DEFAULT_ANSWER_TOKENS
    plan_tokens: int = DEFAULT_PLAN_TOKENS
    plan_attempts: int = DEFAULT_PLAN_ATTEMPTS
    plan_temperature: float = DEFAULT_PLAN_TEMPERATURE
    structured_output: str = "auto"  # planner.STRUCTURED_MODES
    context_tokens: int = DEFAULT_CONTEXT_TOKENS

    def __post_init__(self) -> None:
        for name in ("top_k", "answer_tokens", "plan_tokens", "plan_attempts", "context_tokens"):
            if getattr(self, name) < 1:
                raise AgentError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not 0 <= self.plan_temperature <= 2:
            raise AgentError(f"plan_temperature must be from 0 to 2, not {self.plan_temperature}")


@dataclass(frozen=True)
class AgentAnswer:
    question: str
    mode: str  # rag | cag
    plan: PlanResult
    results: list[ActionResult]
    latency_s: float

    @property
    def answer(self) -> str:
        return self.results[-1].output if self.results else ""


class KnowledgeAgent:
    def __init__(self, llm: ChatModel, knowledge: Knowledge, settings: AgentSettings = AgentSettings()):
        self.llm = llm
        self.knowledge = knowledge
        self.settings = settings
        self.planner = Planner(llm, knowledge, structured=settings.structured_output,
                               temperature=settings.plan_temperature, max_tokens=settings.plan_tokens,
                               max_attempts=settings.plan_attempts)
        self.executor = ActionExecutor(llm, knowledge, answer_tokens=settings.answer_tokens)

    def answer(self, question: str) -> AgentAnswer:
        started = time.perf_counter()
        log.info("question", extra={"question": question, "mode": self.knowledge.mode,
                                    "planner": self.planner.mode})
        plan = self.planner.plan(question)
        results = self.executor.run_plan(plan.plan, ActionContext(question))
        answer = AgentAnswer(question, self.knowledge.mode, plan, results, time.perf_counter() - started)
        log.info("answer", extra={"question": question, "mode": answer.mode, "steps": len(results),
                                  "latency_s": round(answer.latency_s, 3), "answer_chars": len(answer.answer)})
        return answer

    def answer_with_tools(self, question: str, tool_choice: str | dict = "auto") -> ToolLoopResult:
        loop = ToolLoop(self.llm, self.executor, tool_choice=tool_choice, answer_tokens=self.settings.answer_tokens)
        result = loop.run(question)
        log.info("answer", extra={"question": question, "mode": self.knowledge.mode, "tool_rounds": result.rounds,
                                  "tool_calls": len(result.results), "answer_chars": len(result.answer)})
        return result


@contextmanager
def cag_session(llm: ChatModel, mode: str = "auto") -> Iterator[Session | None]:
    """A stateful session around a CAG run: ``on`` requires one, ``auto`` goes on without one if the
    endpoint refuses (a multi-model container, a server without sessions), ``off`` never asks."""
    if mode not in SESSION_MODES:
        raise AgentError(f"session mode must be one of {', '.join(SESSION_MODES)}, not {mode!r}")
    if mode == "off":
        yield None
        return
    try:
        session = llm.client.open_session(target_model=llm.target_model)
    except EndpointError as exc:
        if mode == "on":
            raise AgentError(f"the endpoint opened no stateful session: {exc}") from None
        log.warning("no stateful session: the calls are not pinned to one instance (the prefix cache still "
                    "serves the knowledge base on a single instance)", extra={"reason": str(exc)})
        yield None
        return
    log.info("session opened", extra={"session_id": session.id, "expires": session.expires})
    llm.session = session
    try:
        yield session
    finally:
        llm.session = None
        try:
            llm.client.close_session(session, target_model=llm.target_model)
            log.info("session closed", extra={"session_id": session.id})
        except EndpointError as exc:
            log.warning("could not close the session (it expires on its own)",
                        extra={"session_id": session.id, "reason": str(exc)})
