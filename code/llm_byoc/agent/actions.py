"""The agent's actions: a prompt built from the task and what came before, and one LLM call.

    query_rag(query)            the knowledge for ``query`` (retrieved chunks, or the CAG prefix) -> an answer
    generate_analysis(request)  the question, its documents and the previous result -> an analysis
    generate_summary(focus)     the previous result (or the documents) -> a short summary

``ActionExecutor.run_plan`` runs a plan's steps in order; each step sees the
result of the one before it and the chunks retrieved so far. The same actions
are offered as OpenAI-style tools (``tool_definitions``): one string argument
each, a JSON schema the tool-calling loop validates the model's arguments
against. Every action is logged with its input, sources, output size and time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import AgentError
from .index import Hit
from .knowledge import Knowledge, format_hits
from .llm import ChatModel, Completion
from .plans import Plan

log = logging.getLogger(__name__)

DEFAULT_ANSWER_TOKENS = 160


@dataclass(frozen=True)
class ActionSpec:
    name: str
    description: str
    argument: str  # the one parameter's name (the plan step's "input")
    argument_description: str


ACTIONS = (
    ActionSpec("query_rag", "Find the passages of the documents about a query and answer it from them.",
               "query", "what to look up, as a question"),
    ActionSpec("generate_analysis", "Write an analysis of the question from the documents found so far and the "
               "previous result (a comparison, causes, trade-offs).", "request", "what to analyse"),
    ActionSpec("generate_summary", "Summarize the previous result (or the documents found so far) briefly.",
               "focus", "what the summary should keep"),
)
ACTION_NAMES = [spec.name for spec in ACTIONS]


def tool_definitions(specs: tuple[ActionSpec, ...] = ACTIONS) -> list[dict]:
    """OpenAI ``tools``: one function per action."""
    return [{"type": "function", "function": {
        "name": spec.name,
        "description": spec.description,
        "parameters": {"type": "object",
                       "properties": {spec.argument: {"type": "string", "description": spec.argument_description}},
                       "required": [spec.argument], "additionalProperties": False},
    }} for spec in specs]


@dataclass(frozen=True)
class ActionResult:
    action: str
    input: str
    output: str
    sources: tuple[str, ...]  # chunk labels the action's prompt held
    latency_s: float
    completion: Completion = field(repr=False, compare=False)


@dataclass
class ActionContext:
    """What a run has gathered: the question, chunks retrieved so far, results in order."""

    question: str
    hits: list[Hit] = field(default_factory=list)
    results: list[ActionResult] = field(default_factory=list)

    @property
    def previous(self) -> str:
        return self.results[-1].output if self.results else ""

    def add_hits(self, hits: list[Hit]) -> None:
        known = {hit.index for hit in self.hits}
        self.hits.extend(hit for hit in hits if hit.index not in known)


class ActionExecutor:
    def __init__(self, llm: ChatModel, knowledge: Knowledge, answer_tokens: int = DEFAULT_ANSWER_TOKENS,
                 temperature: float = 0.0):
        self.llm = llm
        self.knowledge = knowledge
        self.answer_tokens = answer_tokens
        self.temperature = temperature
        self._prompts: dict[str, Callable[[str, ActionContext], tuple[str, list[Hit]]]] = {
            "query_rag": self._query_rag, "generate_analysis": self._analysis, "generate_summary": self._summary,
        }

    def run_plan(self, plan: Plan, context: ActionContext) -> list[ActionResult]:
        for number, step in enumerate(plan.steps, 1):
            self.run(step.action, step.input, context, step_number=number)
        return context.results

    def messages(self, action: str, argument: str, context: ActionContext) -> tuple[list[dict], list[Hit]]:
        """The action's chat messages (the knowledge's system message first) and the chunks they show."""
        prompt = self._prompts.get(action)
        if prompt is None:
            raise AgentError(f"no action {action!r} (the agent has {', '.join(self._prompts)})")
        user, shown = prompt(argument, context)
        return [self.knowledge.system_message(), {"role": "user", "content": user}], shown

    def run(self, action: str, argument: str, context: ActionContext, step_number: int | None = None) -> ActionResult:
        started = time.perf_counter()
        messages, shown = self.messages(action, argument, context)
        completion = self.llm.complete(messages, max_tokens=self.answer_tokens, temperature=self.temperature)
        sources = tuple(hit.chunk.label for hit in shown)
        result = ActionResult(action, argument, completion.text.strip(), sources,
                              time.perf_counter() - started, completion)
        context.results.append(result)
        log.info("action", extra={"step": step_number, "action": action, "input": argument, "sources": list(sources),
                                  "output_chars": len(result.output), "finish_reason": completion.finish_reason,
                                  "prompt_tokens": completion.prompt_tokens,
                                  "cached_tokens": completion.cached_tokens,
                                  "latency_s": round(result.latency_s, 3), "mode": self.knowledge.mode})
        return result

    def _documents(self, context: ActionContext) -> list[Hit]:
        """The chunks found so far (RAG: retrieved for the question if none yet); none with CAG."""
        if not context.hits:
            context.add_hits(self.knowledge.context_for(context.question)[1])
        return context.hits

    def _query_rag(self, query: str, context: ActionContext) -> tuple[str, list[Hit]]:
        text, hits = self.knowledge.context_for(query)
        context.add_hits(hits)
        if not text:
            return f"Answer from the knowledge base.\nQuestion: {query}", []
        return f"Documents:\n{text}\n\nAnswer from these documents.\nQuestion: {query}", hits

    def _analysis(self, request: str, context: ActionContext) -> tuple[str, list[Hit]]:
        hits = self._documents(context)
        parts = [f"Question: {context.question}"]
        if hits:
            parts.append(f"Documents:\n{format_hits(hits)}")
        if context.previous:
            parts.append(f"Previous result:\n{context.previous}")
        parts.append(f"Task: write a short analysis: {request}")
        return "\n\n".join(parts), hits

    def _summary(self, focus: str, context: ActionContext) -> tuple[str, list[Hit]]:
        if context.previous:
            return f"Text:\n{context.previous}\n\nSummarize this in two or three sentences, keeping: {focus}", []
        hits = self._documents(context)
        if hits:
            return (f"Documents:\n{format_hits(hits)}\n\nSummarize in two or three sentences what they say "
                    f"about: {focus}"), hits
        return f"Summarize in two or three sentences what the knowledge base says about: {focus}", []
