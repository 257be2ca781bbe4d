"""Model manager: resolve a model source and load its tokenizer, config and weights."""
