"""Structured output: grammars (JSON schema, regex, Lark) compiled by llguidance.

``specs``: a ``GrammarSpec`` -> llguidance's grammar text, checked without a
tokenizer (the front end's 400s). ``compiler``: compiled once per spec, on a
thread of its own, against the served model's tokenizer (the engine process).
``matcher``: one sequence's grammar state, its token mask and accepted tokens.
"""

from .compiler import CompiledGrammar, GrammarCompiler
from .matcher import GrammarMatcher
from .specs import check_grammar, grammar_text

__all__ = ["CompiledGrammar", "GrammarCompiler", "GrammarMatcher", "check_grammar", "grammar_text"]
