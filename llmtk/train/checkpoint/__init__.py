"""Checkpoints: the files and their manifest, the checkpointer that writes and restores
them, full state dicts, and the restore drill."""
