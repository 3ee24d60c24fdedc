"""The one rich console on stderr (rich honours NO_COLOR by itself)."""

from functools import cache


@cache
def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)
