"""The planner: one LLM call at low temperature for a plan that follows the plan schema.

Where the plan's JSON comes from (``structured``, the figure compares them):

- ``on``: the schema goes to the server as OpenAI ``response_format``
  ``json_schema`` (strict), so constrained decoding makes every plan parse. A
  server without structured output refuses the field with a 400:
  ``StructuredOutputUnsupported``, raised with what to do about it.
- ``off`` (prompted): the schema and an example are in the prompt.
- ``auto`` (default): ``on`` until the server refuses ``response_format``, then
  ``off`` for this and every later plan (logged once).

Either way the reply is read leniently (the whole reply as JSON, else the
first JSON object in it), validated against the schema, and on failure the
model is told what was wrong and asked again, at most ``max_attempts`` calls.
When no attempt gives a valid plan, the fallback plan (``query_rag`` of the
question) runs, and ``PlanResult.fallback`` and the log say so.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from .actions import ACTIONS, ActionSpec
from .errors import AgentError, PlanInvalid, StructuredOutputUnsupported
from .knowledge import Knowledge
from .llm import ChatModel, Completion
from .plans import PLAN_TOKEN_BOUND, Plan, PlanStep, parse_plan_text, plan_schema, response_format, validate_plan

log = logging.getLogger(__name__)

DEFAULT_PLAN_TEMPERATURE = 0.2  # low: a plan wants consistency, not invention
DEFAULT_PLAN_TOKENS = PLAN_TOKEN_BOUND  # a constrained plan always fits (plans.py)
DEFAULT_PLAN_ATTEMPTS = 3
STRUCTURED_MODES = ("auto", "on", "off")
EXAMPLE = {"steps": [{"action": "query_rag", "input": "What does the cache store?"},
                     {"action": "generate_summary", "input": "what the cache stores"}],
           "reasoning": "Look the facts up, then summarize them."}


@dataclass(frozen=True)
class PlanAttempt:
    text: str
    error: str | None  # None: this attempt gave the plan
    strict_json: bool  # the whole reply was JSON that validates (no extraction needed)
    latency_s: float


@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    mode: str  # "structured" | "prompted"
    attempts: tuple[PlanAttempt, ...] = field(default_factory=tuple)
    fallback: bool = False

    @property
    def valid_first_attempt(self) -> bool:
        return bool(self.attempts) and self.attempts[0].error is None


def fallback_plan(question: str) -> Plan:
    return Plan((PlanStep("query_rag", question),), "fallback: no valid plan from the model")


def planning_prompt(question: str, specs: tuple[ActionSpec, ...], schema: dict, structured: bool) -> str:
    actions = "\n".join(f"- {spec.name}: {spec.description} Its input: {spec.argument_description}."
                        for spec in specs)
    lines = [f"Plan how to answer the question with these actions, run in order (1 to 3 steps):\n{actions}"]
    if not structured:
        lines.append(f"Reply with only a JSON object that follows this JSON schema:\n{json.dumps(schema)}")
    lines.append(f"Example of a plan:\n{json.dumps(EXAMPLE)}")
    lines.append(f"Question: {question}")
    return "\n\n".join(lines)


class Planner:
    def __init__(self, llm: ChatModel, knowledge: Knowledge, structured: str = "auto",
                 specs: tuple[ActionSpec, ...] = ACTIONS, temperature: float = DEFAULT_PLAN_TEMPERATURE,
                 max_tokens: int = DEFAULT_PLAN_TOKENS, max_attempts: int = DEFAULT_PLAN_ATTEMPTS):
        if structured not in STRUCTURED_MODES:
            raise AgentError(f"structured must be one of {', '.join(STRUCTURED_MODES)}, not {structured!r}")
        self.llm = llm
        self.knowledge = knowledge
        self.structured = structured
        self.use_schema = structured != "off"  # auto: until the server refuses response_format
        self.specs = specs
        self.schema = plan_schema([spec.name for spec in specs])
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_attempts = max_attempts

    @property
    def mode(self) -> str:
        return "structured" if self.use_schema else "prompted"

    def plan(self, question: str) -> PlanResult:
        messages = self._messages(question)
        attempts: list[PlanAttempt] = []
        for number in range(1, self.max_attempts + 1):
            started = time.perf_counter()
            completion = self._complete(question, messages)
            if completion is None:  # the server refused response_format: ask again, with the schema in the prompt
                messages = self._messages(question)
                completion = self._complete(question, messages)
            plan, error, strict = self._read(completion.text)
            if error is None and completion.finish_reason == "length":
                plan, error = None, "the reply was cut at max_tokens"
            attempts.append(PlanAttempt(completion.text, error, strict, time.perf_counter() - started))
            log.info("plan attempt", extra={"mode": self.mode, "attempt": number, "valid": error is None,
                                            "error": error, "reply": completion.text[:500],
                                            "finish_reason": completion.finish_reason})
            if plan is not None:
                return self._done(question, PlanResult(plan, self.mode, tuple(attempts)))
            messages = [*messages, {"role": "assistant", "content": completion.text},
                        {"role": "user", "content": f"That is not a valid plan: {error}. Reply with only the "
                                                    "JSON object, following the schema."}]
        log.warning("no valid plan: running the fallback plan",
                    extra={"mode": self.mode, "attempts": len(attempts), "last_error": attempts[-1].error})
        return self._done(question, PlanResult(fallback_plan(question), self.mode, tuple(attempts), fallback=True))

    def _messages(self, question: str) -> list[dict]:
        user = planning_prompt(question, self.specs, self.schema, structured=self.use_schema)
        return [self.knowledge.system_message(), {"role": "user", "content": user}]

    def _complete(self, question: str, messages: list[dict]) -> Completion | None:
        """The reply; None when ``auto`` just learned that the server has no structured output."""
        try:
            return self.llm.complete(messages, max_tokens=self.max_tokens, temperature=self.temperature,
                                     response_format=response_format(self.schema) if self.use_schema else None)
        except StructuredOutputUnsupported as exc:
            if self.structured == "on" or not self.use_schema:
                raise
            log.warning("the server has no structured output: the plan's schema goes in the prompt from now on",
                        extra={"reason": str(exc)})
            self.use_schema = False
            return None

    def _read(self, text: str) -> tuple[Plan | None, str | None, bool]:
        """(plan, error, strict): ``strict`` when the whole reply is the plan's JSON, nothing around it."""
        try:
            return validate_plan(json.loads(text), self.schema), None, True
        except (ValueError, PlanInvalid):
            pass
        try:
            return parse_plan_text(text, self.schema), None, False
        except PlanInvalid as exc:
            return None, str(exc), False

    def _done(self, question: str, result: PlanResult) -> PlanResult:
        log.info("plan", extra={"question": question, "mode": result.mode, "plan": result.plan.to_json(),
                                "attempts": len(result.attempts), "fallback": result.fallback})
        return result
