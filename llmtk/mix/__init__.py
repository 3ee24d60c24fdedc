"""Mixing: blend several document streams by weight to a token budget."""
