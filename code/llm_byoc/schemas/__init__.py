"""The request and response schemas of the HTTP API, as plain data and text.

Below both the HTTP layer (``api/``) and the multi-model causal-LM handler
(``multimodel/handlers/causal_lm.py``), which parse the same bodies; nothing
here imports Flask or a route.

    invocation.py       what a parsed request is (Invocation), ResponseContext, the shared field checks
    dispatch.py         which style a body speaks -> tgi.py or openai.py
    tgi.py              Hugging Face / TGI bodies and answers
    openai.py           OpenAI chat and text completions
    openai_fields.py    OpenAI / vLLM fields beyond the basic ones (top_k, logit_bias, token-id prompts, ...)
    openai_stream.py    OpenAI's streamed chunks
    openai_logprobs.py  OpenAI's logprobs from the engine's
    structured.py       grammars: JSON schema, regex, tool calling
    tool_calls.py       reading tool calls out of generated text (our own JSON format)
    tool_formats.py     reading tool calls in a model's own format (Hermes/Qwen, Llama 3, Mistral)
    reasoning.py        a thinking model's <think> text split off as reasoning_content
    chat_tools.py       tools and tool messages into the chat template
    sse.py              server-sent event framing
"""
