"""Training data: the token store (cache and token datasets), blends, batches, SFT examples
and chat templates."""
