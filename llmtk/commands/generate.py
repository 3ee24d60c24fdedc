"""`llmtk generate`: text from a trained model (an llmtk run or a Hugging Face folder)."""

from typing import Annotated

import typer

from llmtk.commands import configs
from llmtk.commands import options as o

SUMMARY = "Generate text from an llmtk run or a Hugging Face Llama-family folder."

HELP = f"""\
{SUMMARY}

With --prompt, prints each prompt followed by its continuation on stdout. With \
--prompts FILE (JSON Lines, '-' for stdin), writes each record back with a \
`completion` field added: batches for evals and spot checks. Sampling stops at \
the end-of-document token or after --max-new-tokens.

[bold]Examples[/bold]

  llmtk generate runs/a --prompt "Once upon a time" --max-new-tokens 100

  llmtk generate hf/my-model --prompt "def fib(n):" --temperature 0

  llmtk generate runs/a --prompts prompts.jsonl --seed 1 > completions.jsonl

  llmtk train export runs/a --hf hf/a && llmtk generate hf/a --prompt "Hello"
"""

EPILOG = ("Exit status: 0 success, 1 an unreadable model or prompts file (FILE:LINE), "
          "2 bad usage (e.g. a model that does not map onto llmtk's).")


@configs.keys_are_flags
def command(
    source: Annotated[str, typer.Argument(
        help="An llmtk run, checkpoints or step directory, or a Hugging Face folder "
             "(config.json, model.safetensors, tokenizer.json).", show_default=False)],
    prompt: Annotated[list[str] | None, typer.Option(
        "--prompt", "-p", help="A prompt (repeatable). Printed with its continuation.",
        show_default=False)] = None,
    prompts: Annotated[str | None, typer.Option(
        "--prompts", help="JSON Lines of prompts ('-': stdin); each record is written back "
        "with `completion` added.", show_default=False)] = None,
    prompt_field: Annotated[str, typer.Option(
        "--prompt-field", help="The field of --prompts records that holds the prompt.")]
    = "prompt",
    max_new_tokens: Annotated[int, typer.Option(
        "--max-new-tokens", "-n", help="Tokens to generate at most per prompt.")] = 64,
    temperature: Annotated[float, typer.Option(
        "--temperature", help="Sampling temperature; 0 is greedy (argmax).")] = 0.8,
    top_k: Annotated[int, typer.Option(
        "--top-k", help="Sample among the k most likely tokens (0: all).")] = 50,
    seed: o.Seed = 0,
    device: Annotated[o.choice("Device", "auto", "cpu", "cuda"), typer.Option(
        "--device", help="cpu, cuda or auto.")] = "auto",
) -> None:
    import sys

    import orjson

    from llmtk.errors import UsageError

    if bool(prompt) == bool(prompts):
        raise UsageError("give --prompt TEXT or --prompts FILE.jsonl (one of them)")
    if max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be >= 1")
    if temperature < 0 or top_k < 0:
        raise UsageError("--temperature and --top-k must be >= 0")
    records = _read_prompts(prompts, prompt_field) if prompts else None

    import torch

    from llmtk.io.writer import Sink
    from llmtk.train import load_model
    from llmtk.train.model.sample import SampleOptions, complete

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    loaded = load_model(source, device)
    opts = SampleOptions(max_new_tokens, temperature, top_k or None, seed)
    generator = torch.Generator(device=device).manual_seed(seed)
    out = Sink(None)  # stdout through the one buffered writer (a closed pipe exits 0)
    try:
        if records is None:
            for text in prompt:  # type: ignore[union-attr]
                completion, _ = complete(loaded.model, loaded.tokenizer, text, opts, generator)
                out.write((text + completion + "\n").encode("utf-8", "surrogatepass"))
        else:
            for record in records:
                completion, n = complete(loaded.model, loaded.tokenizer,
                                         record[prompt_field], opts, generator)
                record["completion"] = completion
                out.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        out.commit()
    finally:
        out.abort()
    sys.stdout.flush()


def _read_prompts(path: str, field: str) -> list[dict]:
    """Every prompt record, read (and checked) before the model is loaded."""
    from llmtk.io import expand_inputs, read_docs

    return [doc.data for doc in read_docs(expand_inputs([path]), text_field=field)]


def register(app: typer.Typer) -> None:
    app.command(name="generate", help=HELP, short_help=SUMMARY, epilog=EPILOG)(command)
