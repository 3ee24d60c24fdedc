"""Chat templates: a conversation -> token ids, with the ids that carry loss marked.

Two templates, one surface (`encode(messages) -> (ids, trained)` and
`prompt(messages) -> ids` ending in the assistant header, for generation):

- `llmtk` (the default): explicit role markers as plain text,
      <|system|>\\n{content}\\n<|user|>\\n{content}\\n<|assistant|>\\n{content}<EOS>
  where <EOS> is the tokenizer's end-of-document token (so the byte tokenizer works
  too, and generation stops at it). Only the assistant contents and their EOS train.
- a Hugging Face Jinja chat template: the `chat_template` of a `tokenizer_config.json`
  next to the tokenizer.json (`--chat-template auto`), or a `.jinja` file. It is rendered
  the way `transformers` renders it (sandboxed Jinja, trim_blocks, lstrip_blocks,
  `raise_exception`, bos/eos tokens); the assistant spans are found by rendering each
  prefix of the conversation with `add_generation_prompt=True` and taking what the
  next assistant turn adds. Each span is tokenized on its own, so token boundaries
  never cross a prompt/response boundary.
"""

from __future__ import annotations

import json
import os

from llmtk.errors import ConfigError, DataError

ROLES = ("system", "user", "assistant")


def check_messages(messages, where: str) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: messages must be a non-empty list")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(
                m.get("content"), str):
            raise DataError(f"{where}: each message needs role (system, user or assistant) "
                            "and string content")
    return messages


class LlmtkTemplate:
    name = "llmtk"

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def _header(self, role: str) -> list[int]:
        return self.tok.encode(f"<|{role}|>\n")

    def encode(self, messages: list[dict]) -> tuple[list[int], list[bool]]:
        ids: list[int] = []
        trained: list[bool] = []
        for m in messages:
            head = self._header(m["role"])
            ids += head
            trained += [False] * len(head)
            if m["role"] == "assistant":
                body = self.tok.encode(m["content"]) + [self.tok.eos_id]
                ids += body
                trained += [True] * len(body)
            else:
                body = self.tok.encode(m["content"] + "\n")
                ids += body
                trained += [False] * len(body)
        return ids, trained

    def prompt(self, messages: list[dict]) -> list[int]:
        return self.encode(messages)[0] + self._header("assistant")

    def record(self) -> dict:
        return {"name": self.name}


class JinjaTemplate:
    def __init__(self, tokenizer, source: str, name: str, bos: str = "", eos: str = ""):
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = raise_exception
        try:
            self.template = env.from_string(source)
        except jinja2.TemplateError as e:
            raise ConfigError("chat_template", f"not a valid Jinja template ({e})",
                              value=name) from None
        self.tok, self.name, self.source = tokenizer, name, source
        self.bos, self.eos = bos, eos or getattr(tokenizer, "eos_token", "")

    def record(self) -> dict:
        """What a checkpoint stores, so evaluation uses this template even if the file it
        came from changes or goes."""
        return {"name": self.name, "source": self.source, "bos": self.bos, "eos": self.eos}

    def render(self, messages: list[dict], generation_prompt: bool) -> str:
        import jinja2

        try:
            return self.template.render(messages=messages, add_generation_prompt=generation_prompt,
                                        bos_token=self.bos, eos_token=self.eos)
        except jinja2.TemplateError as e:
            raise DataError(f"chat template {self.name}: {e}") from None

    def encode(self, messages: list[dict]) -> tuple[list[int], list[bool]]:
        ids: list[int] = []
        trained: list[bool] = []
        done = ""  # the text already turned into ids

        def add(text: str, train: bool):
            piece = self.tok.encode(text) if text else []
            ids.extend(piece)
            trained.extend([train] * len(piece))

        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before = self.render(messages[:i], True)
            full = self.render(messages[:i + 1], False)
            if not (before.startswith(done) and full.startswith(before)):
                raise DataError(f"chat template {self.name}: rendering a longer conversation "
                                "changes its beginning; cannot find the assistant tokens")
            add(before[len(done):], False)
            add(full[len(before):], True)
            done = full
        rest = self.render(messages, False)
        add(rest[len(done):], False)
        return ids, trained

    def prompt(self, messages: list[dict]) -> list[int]:
        return self.tok.encode(self.render(messages, True))


def _hf_template(tokenizer_path: str) -> tuple[str, str, str] | None:
    """(template, bos, eos) from the tokenizer_config.json beside a tokenizer.json."""
    path = os.path.join(os.path.dirname(os.path.abspath(tokenizer_path)), "tokenizer_config.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        conf = json.load(f)
    tpl = conf.get("chat_template")
    if isinstance(tpl, list):  # named templates: the default one
        tpl = next((t.get("template") for t in tpl if t.get("name") == "default"), None)

    def token(value):
        return value.get("content", "") if isinstance(value, dict) else (value or "")

    return (tpl, token(conf.get("bos_token")), token(conf.get("eos_token"))) if tpl else None


def own_template(tokenizer):
    """The Hugging Face chat template shipped with the tokenizer, or None."""
    found = _hf_template(tokenizer.path) if hasattr(tokenizer, "path") else None
    if found is None:
        return None
    source, bos, eos = found
    return JinjaTemplate(tokenizer, source, "tokenizer_config.json", bos, eos)


def from_record(tokenizer, record: dict):
    """The template a checkpoint recorded (`record()`)."""
    if "source" not in record:
        return LlmtkTemplate(tokenizer)
    return JinjaTemplate(tokenizer, record["source"], record["name"], record["bos"],
                         record["eos"])


def chat_template(tokenizer, spec: str = "auto"):
    """`auto`: the tokenizer's own Hugging Face chat template if it has one, else llmtk's;
    `llmtk`; or a .jinja file."""
    if spec == "llmtk":
        return LlmtkTemplate(tokenizer)
    if spec == "auto":
        return own_template(tokenizer) or LlmtkTemplate(tokenizer)
    try:
        with open(spec, encoding="utf-8") as f:
            source = f.read()
    except OSError as e:
        raise ConfigError("chat_template", f"cannot read: {e.strerror or e}", value=spec
                          ) from None
    return JinjaTemplate(tokenizer, source, spec)
