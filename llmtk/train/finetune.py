"""The trainer's fine-tuning and evaluation hooks, kept out of the loop itself.

- `sft_model(model)`, `setup_sft(spec, ...)`: `--sft` data instead of the pre-training token
  cache; with `--init-from RUN_DIR` the model shape and tokenizer come from that run unless
  given.
- `TaskEvaluator`: `--eval-tasks FILE...` scored at every `--eval-every` step and at the
  end, through `llmtk.evaluate` (files under OUT/eval/STEP/, `eval` rows in the log).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace

from llmtk.errors import ConfigError
from llmtk.train.run_shape import ModelSpec


def _source_state(init_from: str | None) -> dict | None:
    """state.json of the --init-from checkpoint (None for none or a `hf:` folder)."""
    from llmtk.train.checkpoint import files as C

    if not init_from or init_from.startswith("hf:"):
        return None
    src = C.resolve(init_from)
    if src is None:
        raise ConfigError("init_from", "no complete checkpoint there", value=init_from)
    return C.load_state(src)


def inherited_tokenizer(model: ModelSpec, state: dict | None):
    """The run's tokenizer: --tokenizer if given, else the one the --init-from run used."""
    from llmtk.text.tokenizer import load_tokenizer

    spec = model.tokenizer
    if state is not None and spec == "bytes":
        spec = state.get("train_config", {}).get("tokenizer", "bytes")
    tok = load_tokenizer(spec)
    if state is not None and state.get("tokenizer") not in (None, tok.fingerprint()):
        raise ConfigError("init_from", f"was trained with another tokenizer "
                          f"({state['tokenizer']}); pass the same {{0}}", also=("tokenizer",),
                          value=model.init_from)
    return tok


def inherited_model_config(model: ModelSpec, vocab_size: int, state: dict | None):
    """The --init-from run's model shape (flags given here still apply), else the flags'."""
    from llmtk.train.model.config import ModelConfig
    from llmtk.train.run_shape import model_config, shape_overrides

    if state is None:
        return model_config(model, vocab_size)
    mc = ModelConfig(**state["model_config"])
    mc = replace(mc, **{k: v for k, v in shape_overrides(model).items() if v is not None})
    return mc


@dataclass(frozen=True)
class SftSpec:
    """The configuration's sft section (config.section(SftSpec, cfg)): the instruction
    data, its layout and chat template, packing, and the sampler's batch and seed."""

    data: list[str]
    val_data: list[str]
    val_fraction: float
    template: str
    chat_template: str
    packing: bool
    batch_size: int
    seed: int
    out: str | None


@dataclass
class SFTData:
    """What --sft training reads instead of the token cache."""

    chat: object                # the chat template (train/data/chat.py)
    train_data: object          # SFTSampler
    val_data: object | None     # SFTSampler, or None without validation examples
    cache: str                  # names the data in checkpoints (a digest of the rows)
    data_meta: dict             # config.json's "data"


def sft_model(model: ModelSpec):
    """(tokenizer, ModelConfig) of an --sft run: the --init-from run's unless given."""
    state = _source_state(model.init_from)
    tok = inherited_tokenizer(model, state)
    return tok, inherited_model_config(model, tok.vocab_size, state)


def setup_sft(spec: SftSpec, tok, seq_len: int, dp: int, dp_rank: int, say,
              cp: tuple[int, int] = (1, 0)) -> SFTData:
    """Instruction data for the run (see sft_data) in windows of seq_len tokens; this rank
    reads part dp_rank of dp (and, under --cp, its chunks of them: cp = (size, rank));
    `say` reports the rows (rank 0)."""
    from llmtk.train.data import sft as S
    from llmtk.train.data.chat import chat_template

    T = seq_len
    chat = chat_template(tok, spec.chat_template)
    convs = S.read_conversations(spec.data, spec.template)
    if spec.val_data:
        val = S.read_conversations(spec.val_data, spec.template)
    else:
        convs, val = S.split_val(convs, spec.val_fraction)
    rows = S.build_rows(convs, chat, T, tok.eos_id, packing=spec.packing)
    train_data = S.SFTSampler(rows, spec.batch_size, dp, dp_rank, spec.seed, cp=cp)
    val_data = vrows = None
    if val:
        vrows = S.build_rows(val, chat, T, tok.eos_id, packing=spec.packing)
        val_data = S.SFTSampler(vrows, spec.batch_size, dp, dp_rank, spec.seed,
                                shuffle=False, cp=cp)
    digest = hashlib.sha1(rows.tokens.tobytes() + rows.trained.tobytes()).hexdigest()[:16]
    s = rows.stats
    say(f"sft: {s['examples']} examples in {s['rows']} rows of {T + 1} tokens "
        f"({'packed' if spec.packing else 'padded'}, {s['fill']:.0%} full), "
        f"{s['trained_tokens']} trained tokens, {s['truncated']} truncated, "
        f"{s['dropped']} dropped; chat template {chat.name}")
    return SFTData(
        chat=chat, train_data=train_data, val_data=val_data,
        cache=os.path.join(spec.out, f"sft-{digest}"),
        data_meta={"sft": rows.stats, "sft_val": vrows.stats if val else None,
                   "template": spec.template, "chat_template": chat.name})


class TaskEvaluator:
    """Scores --eval-tasks with the model being trained: the ranks `whole` (a
    whole.whole_model context) gives it to (rank 0, or every rank under FSDP2 alone), rank
    0 writing the scores under `run_dir` and logging them (`log`: the metrics log's
    writer, None elsewhere); the other ranks wait. Uses no random numbers, so exact resume
    is unaffected."""

    def __init__(self, specs: list[str], *, whole, tok, chat, autocast, run_dir: str,
                 rank0: bool, n_bad: int, max_new_tokens: int, log, say):
        from llmtk.evaluate import load_task

        self.tasks = [load_task(spec) for spec in specs]
        self.whole, self.tok, self.autocast, self.run_dir = whole, tok, autocast, run_dir
        self.rank0, self.n_bad, self.max_new_tokens = rank0, n_bad, max_new_tokens
        self.log, self.say = log, say
        self.prompt_ids = chat.prompt if chat is not None else None

    def __call__(self, step: int) -> None:
        import torch

        with self.whole() as model:
            if model is not None:
                # Eager: prompts of many lengths must not recompile (or evict) the training
                # graphs.
                with torch.compiler.set_stance("force_eager"):
                    self._score(step, model)

    def _score(self, step: int, model) -> None:
        """Score every task; rank 0 writes OUT/eval/STEP/ and the `eval` rows."""
        from llmtk.evaluate.prompts import Format
        from llmtk.evaluate.report import evaluate_tasks, summary_line
        from llmtk.evaluate.scoring import ModelScorer

        scorer = ModelScorer(model, self.tok, prompt_ids=self.prompt_ids,
                             autocast=self.autocast)
        # An --sft model is asked in its chat format, as `llmtk eval` asks it by default.
        formats = {task.name: Format(chat=self.prompt_ids is not None) for task in self.tasks}
        summaries = evaluate_tasks(
            self.tasks, scorer, run_dir=self.run_dir, step=step, n_bad=self.n_bad,
            max_new_tokens=self.max_new_tokens, formats=formats, log=self.log(),
            write=self.rank0)
        for s in summaries:
            self.say(summary_line(s))
