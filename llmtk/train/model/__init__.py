"""The model and its parts: the GPT, its shape, LoRA, mixture of experts, Hugging Face
mapping, sampling."""
