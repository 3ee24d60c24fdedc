"""Estimates: FLOPs, memory, time and cost; GPU and model tables."""
