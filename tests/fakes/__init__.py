"""Fakes for fast tests: a deterministic model worker speaking the real protocol."""
