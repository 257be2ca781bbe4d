"""A knowledge agent (RAG and CAG) that runs on llm-byoc endpoints only.

    python -m llm_byoc.agent ingest local_test/agent_docs --index /tmp/kb --local http://localhost:8080
    python -m llm_byoc.agent ask "How many tokens does a KV block hold?" --index /tmp/kb \\
        --local http://localhost:8080 --llm-model smollm2-135m-instruct
    python -m llm_byoc.agent ask "..." --cag local_test/agent_docs --local ... --llm-model ...

The pieces, in the order a question meets them:

  documents.py / chunking.py   PDF, Markdown and text files -> chunks of about N tokens with overlap
  embeddings.py / index.py     chunk embeddings through the endpoint (all-MiniLM-L6-v2), saved as
                               vectors.npy + manifest.json; cosine top-k
  knowledge.py                 what every prompt starts with: RAG (retrieved chunks) or CAG (the whole
                               knowledge base as one fixed prefix, refused when it does not fit)
  plans.py / planner.py        the plan's JSON schema; the planner (structured output, or JSON asked
                               for in the prompt, validated and retried a bounded number of times)
  actions.py                   query_rag, generate_analysis, generate_summary: run in order, each
                               result fed to the next; the same actions as OpenAI-style tools
  tool_loop.py                 the OpenAI tool-calling loop over those tools
  llm.py                       chat completions through ``EndpointClient`` (local container or
                               SageMaker, one model of a multi-model endpoint, a stateful session)
  agent.py / cli.py            the orchestrator and the command
  bench.py                     the figures: recall@k, planner JSON validity, RAG against CAG latency
"""
