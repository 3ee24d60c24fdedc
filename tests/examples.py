"""The examples of a command's help, as a user would copy them: one command line each."""

import re


def help_examples(help_text: str) -> list[str]:
    """Example commands after `[bold]Examples[/bold]`, continuation lines (`\\`) joined."""
    body = help_text.split("[bold]Examples[/bold]", 1)[1]
    examples, current = [], ""
    for line in body.splitlines():
        if not line.strip():
            if current:
                examples.append(current)
            current = ""
            continue
        part = line.strip()
        current = f"{current} {part}".strip() if current else part
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        examples.append(current)
        current = ""
    if current:
        examples.append(current)
    return [re.sub(r"\s+#\s.*$", "", e) for e in examples]  # without shell comments
