"""Model and hardware arithmetic shared by `train` and `estimate`: architecture dims and
parameter counts (models), training FLOPs per token (flops), GPU peak FLOP/s (hardware).

A low layer: it imports nothing of llmtk's but errors and presets, so the trainer's MFU
and the estimator's plan use one formula without either package importing the other.
"""
