"""Training: the GPT model, data cache, loop, checkpoints and the torchrun launcher."""
