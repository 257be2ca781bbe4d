"""A fake engine with the LLMEngine front-end API, for testing the HTTP layer.

The "model" is character level: a prompt's tokens are its characters' code
points, and its reply is the prompt reversed, one character per token, then
EOS. Enough to check order, counts, stop strings, streaming and aborts.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass, field

from llm_byoc.adapters.messages import AdapterStatus
from llm_byoc.engine.outputs import GenerationResult, TokenEvent
from llm_byoc.errors import (
    AdapterExists,
    AdapterNotFound,
    SessionNotFound,
    EngineDead,
    EngineNotReady,
    InvalidRequest,
    QueueFull,
    RequestTimeout,
)
from llm_byoc.engine.llm_engine import per_prompt_params
from llm_byoc.protocol import (
    EngineState,
    FinishReason,
    HealthReport,
    ModelInfo,
    PromptLogprobs,
    SamplingParams,
)

BOS, EOS = 1, 2


class FakeTokenizer:
    chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
    all_special_ids = [BOS, EOS]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return ([BOS] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids if i not in (BOS, EOS))

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True, **variables):
        if messages[-1]["role"] == "assistant":
            raise ValueError("the last message must not be the assistant's")
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


@dataclass
class FakeEngine:
    state: EngineState = EngineState.READY
    queue_full: bool = False
    token_delay_s: float = 0.0
    hang: bool = False  # never produce a token (for timeouts)
    die_after_tokens: int | None = None
    max_new_tokens_limit: int = 100
    tokenizer: FakeTokenizer | None = field(default_factory=FakeTokenizer)
    submitted: list = field(default_factory=list)
    aborted: list = field(default_factory=list)
    shut_down: bool = False
    adapters: dict = field(default_factory=dict)  # name -> AdapterStatus
    adapters_used: list = field(default_factory=list)  # the adapter of each submitted request
    sessions: set = field(default_factory=set)  # open stateful sessions
    sessions_used: list = field(default_factory=list)  # the session of each submitted request
    metrics_text: str = ""  # what engine_metrics() returns (a vLLM engine's own series)

    def shutdown(self) -> None:
        self.shut_down = True

    def wait_ready(self, timeout_s: float | None = None) -> None:
        if self.state is EngineState.DEAD:
            raise EngineDead("the model worker died")
        if self.state is EngineState.LOADING:
            time.sleep(min(timeout_s or 0.01, 0.01))
            raise EngineNotReady("the model is still loading")

    def health(self) -> HealthReport:
        info = ModelInfo("fake", "/opt/ml/model/fake-model", 256, 512, [EOS], "cpu", "float32", 8, 0.1)
        return HealthReport(self.state, "fake", info if self.state is EngineState.READY else None)

    def engine_metrics(self) -> str:
        return self.metrics_text


    def register_adapter(self, name: str, src: str, preload: bool = False) -> list:
        if name in self.adapters:
            raise AdapterExists(f"adapter {name!r} is already registered")
        if not src.startswith("/opt/ml/"):
            raise InvalidRequest(f"src {src!r} is outside the allowed adapter roots")
        self.adapters[name] = AdapterStatus(name, 8, ["q_proj"], src, "loaded" if preload else "registered")
        return [self.adapters[name]]

    def unregister_adapter(self, name: str) -> list:
        if name not in self.adapters:
            raise AdapterNotFound(f"adapter {name!r} is not registered")
        return [dataclasses.replace(self.adapters.pop(name), state="unregistered")]

    def list_adapters(self) -> list:
        return list(self.adapters.values())

    def open_session(self) -> tuple[str, float]:
        session_id = f"s{len(self.sessions_used)}x{len(self.sessions)}"
        self.sessions.add(session_id)
        return session_id, 1200.0

    def close_session(self, session_id: str) -> None:
        if session_id not in self.sessions:
            raise SessionNotFound(f"session {session_id!r} is not open on this instance")
        self.sessions.remove(session_id)

    def submit(self, prompts, params, request_id: str | None = None, adapter: str | None = None,
               session_id: str | None = None) -> FakeHandle:
        """``params``: one SamplingParams for all prompts, or one per prompt (as LLMEngine.submit)."""
        if adapter is not None and adapter not in self.adapters:
            raise AdapterNotFound(f"adapter {adapter!r} is not registered")
        if session_id is not None and session_id not in self.sessions:
            raise SessionNotFound(f"session {session_id!r} is not open on this instance")
        if self.state is EngineState.DEAD:
            raise EngineDead("the model worker died")
        if self.state is EngineState.LOADING:
            raise EngineNotReady("the model is still loading")
        per_prompt = per_prompt_params(params, len(prompts))
        for p in per_prompt:
            p.validate(self.max_new_tokens_limit)
        if self.queue_full:
            raise QueueFull("the queue is full")
        ids = [self.tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        if any(len(i) == 0 for i in ids):
            raise InvalidRequest("a prompt is empty")
        self.submitted.append((prompts, params, request_id))
        self.adapters_used.append(adapter)
        self.sessions_used.append(session_id)
        return FakeHandle(self, request_id or "req", ids, per_prompt)


class FakeHandle:
    def __init__(self, engine: FakeEngine, request_id: str, prompt_ids: list[list[int]], params: list[SamplingParams]):
        self.engine = engine
        self.request_id = request_id
        self.num_prompts = len(prompt_ids)
        self._prompt_ids = prompt_ids
        self._params = params  # one per prompt
        self._aborted = threading.Event()
        self._done = False  # every prompt finished: abort is then a no-op, as in LLMEngine

    def _reply(self, ids: list[int]) -> list[int]:
        return [i for i in reversed(ids) if i not in (BOS, EOS)] + [EOS]

    def events(self, timeout_s: float | None = None):
        if self.engine.hang:
            self._aborted.wait(timeout_s)
            raise RequestTimeout(f"the request did not finish within {timeout_s} s")
        streams = [self._prompt_events(i, ids) for i, ids in enumerate(self._prompt_ids)]
        produced = 0
        while streams and not self._aborted.is_set():
            for stream in list(streams):
                event = next(stream, None)
                if event is None:
                    streams.remove(stream)
                    continue
                if self.engine.die_after_tokens is not None and produced >= self.engine.die_after_tokens:
                    raise EngineDead("the model worker died")
                produced += 1
                time.sleep(self.engine.token_delay_s)
                yield event
        self._done = not self._aborted.is_set()

    def _prompt_events(self, index: int, ids: list[int]):
        text = ""
        reply = self._reply(ids)
        params = self._params[index]
        for n, token in enumerate(reply[: params.max_new_tokens], start=1):
            piece = "" if token == EOS else chr(token)
            stop = next((s for s in params.stop if s in text + piece), None)
            if stop is not None:  # like the real front end: cut the stop string, finish STOP
                kept = (text + piece)[: (text + piece).index(stop)]
                yield self._event(index, None, kept[len(text):], FinishReason.STOP, len(ids), n - 1)
                return
            text += piece
            if token == EOS and not params.ignore_eos:
                reason = FinishReason.STOP
            elif n == params.max_new_tokens:
                reason = FinishReason.LENGTH
            else:
                reason = None
            yield self._event(index, token, piece, reason, len(ids), n)
            if reason is not None:
                return

    def _event(self, index, token, text, reason, prompt_tokens, completion_tokens) -> TokenEvent:
        logprob = -0.5 if self._params[index].logprobs and token is not None else None
        return TokenEvent(index, token, text, logprob, reason, prompt_tokens, completion_tokens)

    def result(self, timeout_s: float | None = None) -> list[GenerationResult]:
        texts: dict[int, list] = {i: [] for i in range(self.num_prompts)}
        last: dict[int, TokenEvent] = {}
        for event in self.events(timeout_s):
            texts[event.index].append(event)
            last[event.index] = event
        results = []
        for i in range(self.num_prompts):
            tokens = [e.token_id for e in texts[i] if e.token_id is not None]
            logprobs = [e.logprob for e in texts[i] if e.token_id is not None] if self._params[i].logprobs else None
            prompt = None
            if self._params[i].prompt_logprobs is not None:  # every prompt token after the first at -1.0
                prompt = PromptLogprobs([-1.0] * (len(self._prompt_ids[i]) - 1))
            results.append(GenerationResult(
                i, "".join(e.text for e in texts[i]), tokens, last[i].finish_reason,
                last[i].prompt_tokens, last[i].completion_tokens, logprobs,
                prompt_token_ids=list(self._prompt_ids[i]), prompt_logprobs=prompt,
            ))
        return results

    def abort(self) -> None:
        if not self._done and not self._aborted.is_set():
            self._aborted.set()
            self.engine.aborted.append(self.request_id)
