"""fastText quality classifiers: score documents (`--quality-model`) and train one.

Models are standard fastText files; we use `fasttext_new` (import name distinct from the
`fasttext` module that fasttext-predict installs, see docs/clean.md) both to train and to
predict. A document is one fastText line: whitespace runs, newlines included, become one space.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

from llmtk.errors import ConfigError
from llmtk.io.atomic import atomic_name

_WS = re.compile(r"\s+")


def fasttext_line(text: str) -> str:
    return _WS.sub(" ", text).strip()


# Loaded models by path, per process (see llmtk.text.langid._LOADED for why).
_LOADED: dict[str, object] = {}


class QualityModel:
    """P(label | text) from a fastText classifier; picklable, loads lazily per process."""

    def __init__(self, path: str, label: str = "hq") -> None:
        self.path = path
        self.label = label if label.startswith("__label__") else f"__label__{label}"
        self._model = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "label": self.label, "_model": None}

    def load(self):
        if self._model is None and self.path in _LOADED:
            self._model = _LOADED[self.path]
        if self._model is None:
            if not os.path.exists(self.path):
                raise ConfigError("quality.model", f"no such file: {self.path}")
            import fasttext_new

            try:
                self._model = fasttext_new.load_model(self.path)
            except Exception as e:  # the binding raises plain ValueError/RuntimeError
                raise ConfigError("quality.model", f"cannot load {self.path}: {e}") from None
            _LOADED[self.path] = self._model
            labels = self._model.get_labels()
            if self.label not in labels:
                names = ", ".join(x.removeprefix("__label__") for x in labels)
                raise ConfigError(
                    "quality.label", f"{self.label.removeprefix('__label__')!r} is not a label "
                    f"of {self.path} (it has: {names})"
                )
        return self._model

    def score(self, text: str) -> float:
        model = self._model or self.load()
        labels, probs = model.predict(fasttext_line(text), k=-1)
        for label, prob in zip(labels, probs, strict=True):
            if label == self.label:
                return round(min(float(prob), 1.0), 4)
        return 0.0


@dataclass
class TrainReport:
    train: int
    test: int
    precision: float
    recall: float
    f1: float
    threshold: float

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def train_quality(
    positive: Iterable[str],
    negative: Iterable[str],
    output: str,
    *,
    test_fraction: float = 0.1,
    epoch: int = 5,
    lr: float = 0.1,
    word_ngrams: int = 2,
    dim: int = 64,
    seed: int = 0,
    threshold: float = 0.5,
    label: str = "hq",
) -> TrainReport:
    """Train a positive-vs-negative fastText classifier; report held-out precision/recall.

    Deterministic for a seed: the split is a seeded shuffle and training uses one thread.
    """
    import fasttext_new

    pos_label = f"__label__{label}"
    rows = [(pos_label, fasttext_line(t)) for t in positive]
    rows += [("__label__other", fasttext_line(t)) for t in negative]
    rows = [r for r in rows if r[1]]
    n_pos = sum(1 for r in rows if r[0] == pos_label)
    if n_pos == 0 or n_pos == len(rows):
        raise ConfigError("positive", "train-quality needs documents of both classes, here and "
                          "in {0}", also=("negative",))
    rng = random.Random(seed)
    rng.shuffle(rows)
    n_test = max(1, int(len(rows) * test_fraction)) if len(rows) >= 10 else 0
    test, train = rows[:n_test], rows[n_test:]
    with tempfile.TemporaryDirectory(prefix="llmtk-quality-") as tmp:
        path = os.path.join(tmp, "train.txt")
        with open(path, "w", encoding="utf-8") as f:
            for lab, text in train:
                f.write(f"{lab} {text}\n")
        model = fasttext_new.train_supervised(
            input=path, epoch=epoch, lr=lr, wordNgrams=word_ngrams, dim=dim, seed=seed,
            thread=1, verbose=0, minCount=1,
        )
    with atomic_name(output) as tmp:
        model.save_model(tmp)  # fastText writes by name: into the file we created
    tp = fp = fn = 0
    for lab, text in test:
        labels, probs = model.predict(text, k=-1)
        p = dict(zip(labels, (float(x) for x in probs), strict=True)).get(pos_label, 0.0)
        predicted = p >= threshold
        actual = lab == pos_label
        tp += predicted and actual
        fp += predicted and not actual
        fn += actual and not predicted
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return TrainReport(len(train), len(test), round(precision, 4), round(recall, 4), round(f1, 4),
                       threshold)
