"""What can go wrong in the agent, apart from an endpoint's own errors (``client.EndpointError``).

Each says what to do about it; the CLI prints the message and exits 1.
"""

from __future__ import annotations


class AgentError(Exception):
    """A problem the agent cannot work around."""


class StructuredOutputUnsupported(AgentError):
    """The server refused ``response_format``: it has no structured output (llm-byoc before issue 14 part 1)."""


class ToolsUnsupported(AgentError):
    """The server refused ``tools`` / ``tool_choice`` or tool messages."""


class KnowledgeBaseTooLarge(AgentError):
    """CAG: the whole knowledge base does not fit in the model's context with room for a question and answer."""


class PlanInvalid(AgentError):
    """A plan that does not parse as JSON or does not follow the plan schema."""


class IndexFormatError(AgentError):
    """An index folder that is missing, incomplete or not one this version wrote."""
