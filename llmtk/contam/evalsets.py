"""Evaluation sets as people have them: the files, and which text of each item to check.

Files: JSON Lines (plain, .gz, .zst), JSON arrays (also `{"data": [...]}` and SQuAD's
nested original), CSV/TSV with a header, Parquet (the Hugging Face Hub's format) and a
folder written by `datasets.save_to_disk` (Arrow IPC stream files listed in
`state.json`; a DatasetDict folder gives one eval set per split). Parquet and Arrow
are read with pyarrow; `datasets` is never imported, nothing is downloaded.

Layouts: the fields of the first record name the benchmark, and with it the text to
check (question and choices, never the answer letter). `--eval-field` overrides.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass

from llmtk.errors import DataError

# (name, fields that identify it, fields whose text is checked, id field). Tested in order:
# the more specific layouts first. A field "a.b" is b inside a (a dict, or a list of dicts).
LAYOUTS: list[tuple[str, tuple[str, ...], tuple[str, ...], str | None]] = [
    ("SQuAD", ("context", "question", "answers.text"), ("context", "question", "answers.text"),
     "id"),
    ("BoolQ", ("passage", "question"), ("passage", "question"), None),  # answer: a bool
    ("passage QA", ("passage", "question"), ("passage", "question"), "query_id"),  # DROP ...
    ("RACE", ("article", "question", "options"), ("article", "question", "options"),
     "example_id"),
    ("OpenBookQA", ("question_stem", "choices.text"), ("question_stem", "choices.text"), "id"),
    ("ARC", ("question", "choices.text"), ("question", "choices.text"), "id"),
    ("MMLU", ("question", "choices"), ("question", "choices"), None),
    ("C-Eval", ("question", "A", "B", "C", "D"), ("question", "A", "B", "C", "D"), "id"),
    ("CMMLU", ("Question", "A", "B", "C", "D"), ("Question", "A", "B", "C", "D"), None),
    ("TriviaQA", ("question", "answer.value"), ("question", "answer.value"), "question_id"),
    ("GSM8K", ("question", "answer"), ("question", "answer"), None),  # answer: the worked text
    ("NaturalQuestions", ("question", "answer"), ("question", "answer"), None),  # answers: list
    ("HumanEval", ("prompt", "canonical_solution"), ("prompt", "canonical_solution"),
     "task_id"),
    ("MBPP", ("text", "code"), ("text", "code"), "task_id"),
    ("MBPP", ("prompt", "code"), ("prompt", "code"), "task_id"),
    ("HellaSwag", ("ctx", "endings"), ("ctx", "endings"), "ind"),
    ("Winogrande", ("sentence", "option1", "option2"), ("sentence", "option1", "option2"), None),
    ("PIQA", ("goal", "sol1", "sol2"), ("goal", "sol1", "sol2"), None),
    ("chat", ("messages.content",), ("messages.content",), "id"),
    ("text", ("text",), ("text",), "id"),
    ("question", ("question",), ("question",), "id"),  # any other QA set: its question
]
SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".json", ".csv", ".tsv", ".parquet")


@dataclass
class EvalSet:
    """One evaluation file (or split), how it was read, and the fields checked."""

    path: str
    layout: str
    fields: list[str]
    items: int = 0


def get_field(record: dict, name: str):
    """The value at a field path: `a.b` reaches into a dict, or into each dict of a list."""
    value = record
    for part in name.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list):
            value = [v.get(part) for v in value if isinstance(v, dict)]
        else:
            return None
    return value


def text_of(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        parts = [t for v in value if (t := text_of(v))]
        return " ".join(parts) if parts else None
    if isinstance(value, dict):
        return None
    text = str(value).strip()
    return text or None


def detect_layout(record: dict) -> tuple[str, list[str], str | None] | None:
    for name, needs, fields, id_field in LAYOUTS:
        if all(text_of(get_field(record, f)) is not None or (
                f == "choices" and isinstance(record.get(f), list)) for f in needs):
            if name == "MMLU" and not isinstance(record.get("choices"), list):
                continue  # ARC's choices are a dict: handled above
            if name == "GSM8K" and not isinstance(record.get("answer"), str):
                continue  # NaturalQuestions-open: answer is a list
            if name == "NaturalQuestions" and not isinstance(record.get("answer"), list):
                continue
            if name == "BoolQ" and not isinstance(record.get("answer"), bool):
                continue  # DROP and other passage/question sets: "passage QA"
            return name, list(fields), id_field
    return None


# -- files ------------------------------------------------------------------------------


def expand(paths: list[str]) -> list[str]:
    """Eval files and `save_to_disk` folders, directories searched recursively, sorted."""
    out: list[str] = []
    for path in paths:
        if _is_hf_folder(path) or os.path.isfile(path):
            out.append(path)
        elif os.path.isdir(path):
            found = []
            for dirpath, dirs, files in os.walk(path):
                if _is_hf_folder(dirpath):
                    found.append(dirpath)
                    dirs.clear()
                    continue
                found += [os.path.join(dirpath, f) for f in files if f.endswith(SUFFIXES)
                          and f not in ("dataset_info.json", "state.json", "dataset_dict.json")]
                dirs.sort()
            if not found:
                from llmtk.errors import ConfigError

                raise ConfigError("eval", f"{path}: no evaluation files in this directory "
                                  f"(expected {', '.join(SUFFIXES)} or save_to_disk folders)")
            out += sorted(found)
        else:
            from llmtk.errors import ConfigError

            raise ConfigError("eval", f"{path}: no such file or directory")
    return out


def _is_hf_folder(path: str) -> bool:
    return os.path.isdir(path) and (os.path.isfile(os.path.join(path, "state.json")) or
                                    os.path.isfile(os.path.join(path, "dataset_dict.json")))


def records(path: str) -> Iterator[tuple[str, str, dict]]:
    """(source, where, record) for every record of an eval file or folder."""
    if os.path.isdir(path):
        yield from _hf_folder(path)
        return
    name = path.lower()
    if name.endswith(".parquet") or _magic(path) == b"PAR1":
        yield from ((path, f"{path}:row {i}", r) for i, r in enumerate(_parquet(path), 1))
    elif name.endswith((".csv", ".tsv")):
        yield from _csv(path, "\t" if name.endswith(".tsv") else ",")
    elif name.endswith(".json") and (doc := _whole_json(path)) is not None:
        yield from _json_doc(path, doc)
    else:  # JSON Lines (also a .json file holding one object per line)
        from llmtk.io import read_docs

        for doc in read_docs([path], require_text=False):
            yield path, doc.where(), doc.data


def _magic(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def _whole_json(path: str):
    """The file as one JSON document, or None when it is not one (e.g. JSON Lines)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except ValueError:
        return None
    return doc if isinstance(doc, list) or (isinstance(doc, dict) and any(
        isinstance(v, list) for v in doc.values())) else None


def _json_doc(path: str, doc) -> Iterator[tuple[str, str, dict]]:
    if isinstance(doc, dict):
        lists = [v for v in doc.values() if isinstance(v, list) and v and
                 all(isinstance(r, dict) for r in v)]
        if len(lists) != 1:
            raise DataError(f"{path}: expected a JSON array of records (or one list of them)")
        doc = lists[0]
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise DataError(f"{path}: expected a JSON array of records")
    if doc and "paragraphs" in doc[0]:  # SQuAD's original nesting: articles > paragraphs > qas
        doc = [{"id": qa.get("id"), "context": p.get("context"), "question": qa.get("question"),
                "answers": qa.get("answers")}
               for article in doc for p in article.get("paragraphs", []) for qa in p.get("qas", [])]
    for i, record in enumerate(doc):
        yield path, f"{path}:record {i + 1}", record


def _csv(path: str, delimiter: str) -> Iterator[tuple[str, str, dict]]:
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if not reader.fieldnames:
            raise DataError(f"{path}:1: a CSV file without a header")
        for lineno, row in enumerate(reader, 2):
            yield path, f"{path}:{lineno}", {k: v for k, v in row.items() if k}


def _parquet(path: str) -> Iterator[dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=4096):
            yield from batch.to_pylist()
    except (pa.ArrowException, OSError) as e:
        raise DataError(f"{path}: not a readable Parquet file ({e})") from None


def _hf_folder(path: str) -> Iterator[tuple[str, str, dict]]:
    """A `save_to_disk` folder: state.json lists its Arrow stream files in order; a
    DatasetDict folder lists its splits in dataset_dict.json."""
    dict_file = os.path.join(path, "dataset_dict.json")
    if os.path.isfile(dict_file):
        with open(dict_file, encoding="utf-8") as f:
            splits = json.load(f).get("splits", [])
        for split in splits:
            yield from _hf_folder(os.path.join(path, split))
        return
    import pyarrow as pa

    with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
        state = json.load(f)
    row = 0
    for entry in state.get("_data_files", []):
        arrow = os.path.join(path, entry["filename"])
        try:
            with pa.memory_map(arrow) as source:
                try:
                    reader = pa.ipc.open_stream(source)
                except pa.ArrowInvalid:
                    source.seek(0)
                    reader = pa.ipc.open_file(source)
                table = reader.read_all()
        except (pa.ArrowException, OSError) as e:
            raise DataError(f"{arrow}: not a readable Arrow file ({e})") from None
        for record in table.to_pylist():
            row += 1
            yield path, f"{path}:row {row}", record


# -- items ------------------------------------------------------------------------------


def eval_records(paths: list[str], fields: list[str] | None, id_field: str,
                 sets: list[EvalSet]) -> Iterator[tuple[str, str, str]]:
    """(item id, source, text to check) for every eval record; appends one EvalSet per
    file or split to `sets` as it goes (layout and fields used, item count)."""
    for path in expand(paths):
        current: EvalSet | None = None
        layout_id: str | None = None
        for source, where, record in records(path):
            if current is None or current.path != source:
                if fields:
                    current = EvalSet(source, "--eval-field", list(fields))
                else:
                    found = detect_layout(record)
                    if found is None:
                        raise DataError(f"{where}: no known benchmark layout in fields "
                                        f"{', '.join(sorted(record)) or '(none)'}; name the "
                                        "text with --eval-field")
                    current = EvalSet(source, found[0], found[1])
                    layout_id = found[2]
                sets.append(current)
            text = text_of([get_field(record, f) for f in current.fields])
            if text is None:
                raise DataError(f"{where}: none of the fields {', '.join(current.fields)}")
            item_id = record.get(id_field)
            if item_id is None and id_field == "id" and layout_id:
                item_id = record.get(layout_id)
            current.items += 1
            yield (str(item_id) if item_id is not None else where, source, text)
        if current is None:
            raise DataError(f"{path}: an empty evaluation set (no records)")


def summary(sets: list[EvalSet], sources: dict) -> dict:
    """Per eval file: the layout and fields checked, and items dirty/partial/clean with
    their shares of the checkable items (Llama 2 Table 51 / GPT-3 Table C.1 style)."""
    out = {}
    for s in sets:
        counts = sources.get(s.path, {})
        checkable = sum(counts.get(c, 0) for c in ("dirty", "partial", "clean"))
        entry = {"layout": s.layout, "fields": s.fields, "items": counts.get("items", 0),
                 "too_short": counts.get("too_short", 0)}
        for cls in ("dirty", "partial", "clean"):
            entry[cls] = counts.get(cls, 0)
            entry[f"{cls}_share"] = round(entry[cls] / checkable, 4) if checkable else 0.0
        out[s.path] = entry
    return out
