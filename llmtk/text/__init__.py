"""Text pieces shared by several tools: script census, CJK-aware segmentation,
language ID, PII, tokenizers. Lowest layer: imports no other llmtk package but io/errors."""
