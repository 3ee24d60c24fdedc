"""llmtk: small Unix-style tools for the LLM pre-training workflow."""

__version__ = "0.1.0"
