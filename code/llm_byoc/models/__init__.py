"""Model manager: resolve a model source and load its tokenizer, config and weights.

``source.resolve_model_source`` classifies a source (local folder, GGUF file,
hub id); ``loader`` loads safetensors-only causal LMs; ``fast_tokenizer`` loads
tokenizers without torch (``tokenizer_files``, ``tokenizer_build`` and
``chat_template`` reproduce transformers' reading, building and chat rendering),
falling back to transformers; ``gguf_cache`` makes a GGUF file loadable once: an
entry whose tensors ``gguf_tensors`` reads from the GGUF in place (Llama family),
else a cached safetensors folder.
"""
