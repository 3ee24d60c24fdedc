"""Evaluation of a language model on local task files (typer-free, torch only in scoring).

- `tasks`: read a JSONL task file and detect its layout (HellaSwag, ARC, MMLU,
  GSM8K, prompt/response, plain text) into items of one of three kinds:
  multiple choice, generation, perplexity.
- `metrics`: score items through a `Scorer` (anything with `loglikelihood`,
  `generate` and `rolling`), giving per-item results and task metrics as
  lm-evaluation-harness defines them (acc, acc_norm, exact_match, perplexity).
- `scoring`: the `Scorer` over a llmtk GPT and its tokenizer.
- `report`: bad cases (most confident wrong, flipped since the previous
  checkpoint), the files under RUN_DIR/eval/STEP/ and the `eval` metrics records.
"""

from llmtk.evaluate.metrics import TaskResult, evaluate_task
from llmtk.evaluate.report import evaluate_tasks
from llmtk.evaluate.tasks import Task, load_task

__all__ = ["Task", "TaskResult", "evaluate_task", "evaluate_tasks", "load_task"]
