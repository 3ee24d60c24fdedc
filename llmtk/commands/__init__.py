"""One thin module per tool: parse options, call the domain package.

Each module exposes `register(app)`. Shared options live in `options.py`.
"""
