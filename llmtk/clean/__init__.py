"""Cleaning: normalisation, language filter, quality filters, PII scrubbing."""
