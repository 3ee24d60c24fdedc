"""Contamination checks: evaluation-set n-grams inside training data."""
