"""Model manager: resolve a model source and load its tokenizer, config and weights.

``source.resolve_model_source`` classifies a source (local folder, GGUF file,
hub id); ``loader`` loads tokenizers and safetensors-only causal LMs;
``gguf_cache`` converts a GGUF file once into a cached safetensors folder.
"""
