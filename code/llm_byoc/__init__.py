"""llm-byoc: a SageMaker bring-your-own-container image that serves LLMs."""

__version__ = "0.1.0"
