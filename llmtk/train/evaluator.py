"""What the run measures besides its training loss, each at its own steps: the
validation loss (--val-data / --val-fraction, every --eval-every steps or at the end),
the --eval-tasks scores (finetune.TaskEvaluator) and the --sample-every samples, the last
two on the whole model (whole.py) whatever the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmtk.train.steplog import due


@dataclass(frozen=True)
class EvalSpec:
    """--eval-every, --eval-batches, --sample-every, --prompt, --sample-tokens, --seed
    (the samples' generator), --steps (the last step evaluates)."""

    eval_every: int
    eval_batches: int
    sample_every: int
    prompt: str
    sample_tokens: int
    seed: int
    steps: int


class Evaluator:
    """`built`: the parallelize.Parallelized model; `whole()`: whole.whole_model for it;
    `loss_ranks`: the ranks whose losses are averaged (the last pipeline stage's);
    `val_data` / `val_sets`: the validation samplers; `log`: the run's StepLog."""

    def __init__(self, spec: EvalSpec, *, built, whole, dist, autocast, loss_ranks: int,
                 val_data, val_sets: dict, tok, log):
        self.spec, self.built, self.whole, self.dist = spec, built, whole, dist
        self.autocast, self.loss_ranks, self.tok, self.log = autocast, loss_ranks, tok, log
        self.val_data, self.val_sets = val_data, val_sets
        self.task_eval = None  # --eval-tasks: a finetune.TaskEvaluator (open_tasks)

    @property
    def validates(self) -> bool:
        return self.val_data is not None or bool(self.val_sets)

    def _evaluating(self, st) -> bool:
        s = self.spec
        return due(st.step, s.eval_every, s.steps) if s.eval_every else st.step == s.steps

    def val_losses(self, st) -> tuple[float | None, dict]:
        """(val_loss, {val/NAME/loss: ...}) when due, else (None, {})."""
        if not (self.validates and self._evaluating(st)):
            return None, {}
        with self.log.meter.exclude():
            # --val-data NAME=DIR: val/NAME/loss each; val_loss is their mean
            per_source = {f"val/{n}/loss": self._evaluate(s) for n, s in self.val_sets.items()}
            val = self._evaluate(self.val_data) if self.val_data is not None else \
                sum(per_source.values()) / len(per_source)
        return val, per_source

    def open_tasks(self, specs: list[str], *, chat, run_dir: str, n_bad: int,
                   max_new_tokens: int) -> None:
        """--eval-tasks FILE...: read (and checked) before training; scored under run_dir
        in the `chat` template's format (--sft), else plainly."""
        from llmtk.train.finetune import TaskEvaluator

        log = self.log
        self.task_eval = TaskEvaluator(
            specs, whole=self.whole, tok=self.tok, chat=chat, autocast=self.autocast,
            run_dir=run_dir, rank0=self.dist.rank == 0, n_bad=n_bad,
            max_new_tokens=max_new_tokens,
            log=lambda: log.metrics.write if log.metrics is not None else None, say=log.say)

    def tasks_and_samples(self, st) -> None:
        """--eval-tasks and --sample-every, when due."""
        if self.task_eval is not None and self._evaluating(st):
            with self.log.meter.exclude():
                self.task_eval(st.step)
        if self.spec.sample_every and due(st.step, self.spec.sample_every, self.spec.steps):
            with self.log.meter.exclude():
                self._sample(st)

    def _evaluate(self, sampler) -> float:
        import torch

        model, pipe = self.built.model, self.built.pipe
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.dist.device)
        with torch.no_grad():
            for g in range(self.spec.eval_batches):
                batch = [t.to(self.dist.device)  # (x, y), or (x, y, doc) for SFT
                         for t in sampler.batch(g * sampler.global_batch)]
                with self.autocast():
                    if pipe is not None:  # through every stage; the last has the loss
                        loss = pipe.forward_only(*batch)
                    else:
                        _, loss = model(*batch)
                        if hasattr(sampler, "cp_share"):  # SFT under --cp: token-weighted
                            loss = loss * sampler.cp_share(g * sampler.global_batch)
                if loss is not None:
                    total += loss.double()
        model.train()
        if self.dist.distributed:
            import torch.distributed as tdist

            tdist.all_reduce(total)
        return total.item() / (self.spec.eval_batches * self.loss_ranks)

    def _sample(self, st) -> None:
        import torch

        # rank 0 (every rank under FSDP2 alone): the whole model, any layout (whole.py);
        # only rank 0 logs
        s = self.spec
        with self.whole() as model:
            if model is None:
                return  # another rank: waits until rank 0 has sampled
            ids = self.tok.encode(s.prompt) or [self.tok.eos_id]
            gen = torch.Generator(device=self.dist.device).manual_seed(s.seed + st.step)
            # Eager: prompts of growing length must not recompile (or evict) the training
            # graphs.
            with torch.compiler.set_stance("force_eager"), self.autocast():
                out = model.generate(torch.tensor([ids], device=self.dist.device),
                                     s.sample_tokens, temperature=0.8, top_k=50,
                                     generator=gen)
            text = self.tok.decode(out[0, len(ids):].tolist())
            self.log.event("sample", step=st.step, prompt=s.prompt, text=text)
            self.log.say(f"sample @ {st.step}: {s.prompt!r} -> {text!r}")
