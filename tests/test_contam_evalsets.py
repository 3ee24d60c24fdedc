"""contam-check on evaluation sets as people have them: every benchmark layout recognised by
its fields, every file format, the per-benchmark summary, and the help's examples."""

import csv
import json
import re
import shlex
from pathlib import Path

import orjson
import pytest

from llmtk.commands.contam_check import HELP
from llmtk.contam.evalsets import detect_layout, eval_records
from tests.examples import help_examples
from tests.util import llmtk

DATA = Path(__file__).parent / "data" / "evals"

# Long enough for 13-gram matches; each question leaks into the training data below.
Q = [
    "Which of the following best describes the function of the mitochondria in a eukaryotic "
    "cell during aerobic respiration",
    "Natalia sold clips to forty eight of her friends in April and then she sold half as many "
    "clips in May how many clips did she sell",
    "def has_close_elements numbers threshold check if in given list of numbers are any two "
    "numbers closer to each other than given threshold",
    "A man is sitting on a roof of a house he starts pulling up roofing shingles and throws "
    "them down into the yard below",
    "George wants to warm his hands quickly by rubbing them which skin surface will produce "
    "the most heat when rubbed together",
    "Which American-born Sinclair won the Nobel Prize for Literature in 1930 for his novels "
    "about small town life in the Midwest",
    "The Normans were the people who in the tenth and eleventh centuries gave their name to "
    "Normandy a region in northern France",
    "长江是亚洲最长的河流全长约六千三百公里流经中国十一个省级行政区最后注入东海",
]

RECORDS = {
    "mmlu.jsonl": {"question": Q[0], "subject": "biology", "choices": [
        "energy production", "protein synthesis", "storage", "transport"], "answer": 0},
    "gsm8k.jsonl": {"question": Q[1], "answer": "Natalia sold 48/2 = 24 clips in May.\n#### 72"},
    "humaneval.jsonl": {"task_id": "HumanEval/0", "prompt": Q[2],
                        "canonical_solution": "    return any(abs(a - b) < threshold)",
                        "test": "def check(candidate): pass", "entry_point": "has_close"},
    "mbpp.jsonl": {"task_id": 11, "text": "Write a python function to remove first and last "
                   "occurrence of a given character from the string",
                   "code": "def remove_Occ(s,ch): return s",
                   "test_list": ["assert remove_Occ('hello','l') == 'heo'"]},
    "hellaswag.jsonl": {"ind": 24, "activity_label": "Roof shingle removal", "ctx": Q[3],
                        "endings": ["he then climbs down", "he keeps going", "a dog barks",
                                    "it rains"], "label": "1"},
    "arc.jsonl": {"id": "Mercury_SC_415702", "question": Q[4], "choices": {
        "text": ["dry palms", "wet palms", "palms covered with oil", "palms covered with lotion"],
        "label": ["A", "B", "C", "D"]}, "answerKey": "A"},
    "triviaqa.jsonl": {"question_id": "tc_33", "question": Q[5], "answer": {
        "value": "Sinclair Lewis", "aliases": ["Harry Sinclair Lewis"]}},
    "nq_open.jsonl": {"question": "when was the last time anyone was on the moon and who were "
                      "the astronauts that walked on it", "answer": ["14 December 1972"]},
    "boolq.jsonl": {"question": "is the normandy region named after the normans",
                    "passage": Q[6] + ".", "answer": True},
    "squad.jsonl": {"id": "56ddde6b9a695914005b9628", "title": "Normans", "context": Q[6],
                    "question": "In what country is Normandy located?",
                    "answers": {"text": ["France"], "answer_start": [159]}},
    "ceval.jsonl": {"id": 0, "question": Q[7], "A": "长江", "B": "黄河", "C": "珠江", "D": "淮河",
                    "answer": "A", "explanation": ""},
    "winogrande.jsonl": {"sentence": "Sarah was a much better surgeon than Maria so _ always "
                         "got the harder cases", "option1": "Sarah", "option2": "Maria",
                         "answer": "1"},
    "piqa.jsonl": {"goal": "How do I ready a guinea pig cage for its new occupants?",
                   "sol1": "Provide the guinea pig with a cage full of a few inches of bedding",
                   "sol2": "Provide the guinea pig with a cage full of a few inches of jeans",
                   "label": 0},
    "openbookqa.jsonl": {"id": "7-980", "question_stem": "The sun is responsible for",
                         "choices": {"text": ["puppies learning new tricks", "plants sprouting"],
                                     "label": ["A", "B"]}, "answerKey": "B"},
    "race.jsonl": {"example_id": "high19432.txt", "article": "Last week I talked with some of "
                   "my students about what they wanted to do", "question": "What did the writer "
                   "talk about?", "options": ["jobs", "food", "sports", "music"], "answer": "A"},
    "drop.jsonl": {"query_id": "f37e81fa", "passage": "Hoping to rebound from their loss to the "
                   "Patriots, the Raiders stayed at home", "question": "Who did the Raiders "
                   "lose to?", "answers_spans": {"spans": ["Patriots"], "types": ["span"]}},
    "chat.jsonl": {"id": "c1", "messages": [{"role": "user", "content": Q[0]},
                                            {"role": "assistant", "content": "energy"}]},
}
LAYOUT = {"mmlu.jsonl": "MMLU", "gsm8k.jsonl": "GSM8K", "humaneval.jsonl": "HumanEval",
          "mbpp.jsonl": "MBPP", "hellaswag.jsonl": "HellaSwag", "arc.jsonl": "ARC",
          "triviaqa.jsonl": "TriviaQA", "nq_open.jsonl": "NaturalQuestions",
          "boolq.jsonl": "BoolQ", "squad.jsonl": "SQuAD", "ceval.jsonl": "C-Eval",
          "winogrande.jsonl": "Winogrande", "piqa.jsonl": "PIQA", "openbookqa.jsonl": "OpenBookQA",
          "race.jsonl": "RACE", "drop.jsonl": "passage QA", "chat.jsonl": "chat"}
CLEAN = {"question": "What is the boiling point of water at sea level measured in degrees "
                     "Celsius on a normal day", "choices": ["100", "90", "80", "70"], "answer": 0}


def jsonl(rows):
    return b"".join(orjson.dumps(r) + b"\n" for r in rows)


@pytest.mark.parametrize("name", list(RECORDS))
def test_layouts_are_recognised_by_their_fields(name):
    layout, fields, _ = detect_layout(RECORDS[name])
    assert layout == LAYOUT[name]
    (item_id, _, text), = eval_records_of(RECORDS[name])
    assert "answer" not in fields or layout in ("GSM8K", "NaturalQuestions")
    if name == "mmlu.jsonl":
        assert text == Q[0] + " energy production protein synthesis storage transport"
    if name == "arc.jsonl":
        assert item_id == "Mercury_SC_415702" and text.endswith("palms covered with lotion")
    if name == "chat.jsonl":
        assert text == Q[0] + " energy"


def eval_records_of(record, tmp=None):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "e.jsonl"
        p.write_bytes(jsonl([record]))
        return list(eval_records([str(p)], None, "id", []))


def test_unknown_layout_is_one_line_naming_the_fields(tmp_path):
    ev = tmp_path / "odd.jsonl"
    assert detect_layout({"question": "q", "id": 1})[0] == "question"
    ev.write_bytes(jsonl([{"foo": "x", "bar": 1}]))
    tr = tmp_path / "train.jsonl"
    tr.write_bytes(jsonl([{"text": "anything"}]))
    r = llmtk("contam-check", tr, "--eval", ev, "-q")
    assert r.returncode == 1
    assert r.stderr.decode() == (f"llmtk: error: {ev}:1: no known benchmark layout in fields "
                                 "bar, foo; name the text with --eval-field\n")
    r = llmtk("contam-check", tr, "--eval", ev, "--eval-field", "foo", "-q")
    assert r.returncode == 0
    ev.write_text("")
    r = llmtk("contam-check", tr, "--eval", ev, "-q")
    assert r.returncode == 1 and b"an empty evaluation set" in r.stderr
    (tmp_path / "empty").mkdir()
    r = llmtk("contam-check", tr, "--eval", tmp_path / "empty", "-q")
    assert r.returncode == 2 and b"no evaluation files in this directory" in r.stderr


def test_every_layout_in_one_directory_with_a_per_benchmark_summary(tmp_path):
    evals = tmp_path / "evals"
    evals.mkdir()
    for name, record in RECORDS.items():
        (evals / name).write_bytes(jsonl([record, CLEAN]) if name == "mmlu.jsonl"
                                   else jsonl([record]))
    leaks = [Q[0] + " energy production protein synthesis storage transport", Q[1], Q[2],
             Q[4] + " dry palms wet palms", Q[5], Q[7]]
    tr = tmp_path / "train.jsonl"
    tr.write_bytes(jsonl([{"id": f"d{i}", "text": f"Forum post: {q}. Thanks!"}
                          for i, q in enumerate(leaks)]))
    report = tmp_path / "r.json"
    r = llmtk("contam-check", tr, "--eval", evals, "--report", report, "--report-only")
    assert r.returncode == 3, r.stderr
    rep = json.loads(report.read_text())["eval_sets"]
    assert {p.rsplit("/", 1)[1]: e["layout"] for p, e in rep.items()} == LAYOUT
    mmlu = rep[str(evals / "mmlu.jsonl")]
    assert mmlu["fields"] == ["question", "choices"]
    # the leaked question and its choices: dirty; the other item is clean
    assert (mmlu["items"], mmlu["dirty"], mmlu["clean"]) == (2, 1, 1)
    assert mmlu["dirty_share"] == 0.5 and mmlu["clean_share"] == 0.5
    assert rep[str(evals / "arc.jsonl")]["fields"] == ["question", "choices.text"]
    assert rep[str(evals / "boolq.jsonl")]["dirty"] == 0
    err = r.stderr.decode()
    assert (f"{evals / 'mmlu.jsonl'} (MMLU: question, choices): 2 items, 0 too short to "
            "check (fewer than 13 words); of the 2 checked: 1 dirty (50.0%), 0 partial (0.0%), "
            "1 clean (50.0%)\n") in err


def test_eval_file_formats(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [RECORDS["mmlu.jsonl"], CLEAN]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "mmlu.parquet")  # the Hub's format
    (tmp_path / "mmlu.json").write_text(json.dumps(rows))  # a JSON array
    with open(tmp_path / "ceval.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "question", "A", "B", "C", "D", "answer", "explanation"])
        w.writerow([0, Q[7], "长江", "黄河", "珠江", "淮河", "A", ""])
    with open(tmp_path / "cmmlu.tsv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["", "Question", "A", "B", "C", "D", "Answer"])
        w.writerow([0, Q[7], "长江", "黄河", "珠江", "淮河", "A"])
    # datasets' save_to_disk layout: a DatasetDict folder, one folder per split holding
    # Arrow IPC *stream* files listed in state.json
    hf = tmp_path / "gsm8k_hf"
    (hf / "test").mkdir(parents=True)
    (hf / "dataset_dict.json").write_text(json.dumps({"splits": ["test"]}))
    split = pa.Table.from_pylist([RECORDS["gsm8k.jsonl"]])
    with pa.OSFile(str(hf / "test" / "data-00000-of-00001.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, split.schema) as writer:
        writer.write_table(split)
    (hf / "test" / "state.json").write_text(json.dumps({
        "_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_fingerprint": "abc",
        "_format_type": None, "_split": "test"}))
    (hf / "test" / "dataset_info.json").write_text(json.dumps({"features": {}}))
    squad = tmp_path / "squad-v1.1.json"  # SQuAD's original nesting
    squad.write_text(json.dumps({"version": "1.1", "data": [{"title": "Normans", "paragraphs": [
        {"context": Q[6], "qas": [{"id": "q1", "question": "In what country is Normandy?",
                                   "answers": [{"text": "France", "answer_start": 159}]}]}]}]}))
    tr = tmp_path / "train.jsonl"
    tr.write_bytes(jsonl([{"text": f"{q} and so on"} for q in (
        Q[0] + " energy production protein synthesis storage transport", Q[1], Q[6], Q[7])]))
    report = tmp_path / "r.json"
    paths = ["mmlu.parquet", "mmlu.json", "ceval.csv", "cmmlu.tsv", "gsm8k_hf", squad.name]
    args = [a for p in paths for a in ("--eval", tmp_path / p)]
    r = llmtk("contam-check", tr, *args, "--report", report, "--report-only", "-q")
    assert r.returncode == 3, r.stderr
    rep = json.loads(report.read_text())["eval_sets"]
    got = {p.removeprefix(str(tmp_path) + "/"): (e["layout"], e["items"], e["dirty"])
           for p, e in rep.items()}
    assert got == {"mmlu.parquet": ("MMLU", 2, 1), "mmlu.json": ("MMLU", 2, 1),
                   "ceval.csv": ("C-Eval", 1, 1), "cmmlu.tsv": ("CMMLU", 1, 1),
                   "gsm8k_hf/test": ("GSM8K", 1, 0), squad.name: ("SQuAD", 1, 0)}
    items = {i["id"] for i in json.loads(report.read_text())["items"]}
    assert "q1" in items and f"{tmp_path / 'ceval.csv'}:2" not in items  # ids from the data


def test_real_save_to_disk_folders():
    """Folders written by `datasets` itself (tests/data/evals/make_save_to_disk.py)."""
    sets = []
    got = list(eval_records([str(DATA)], None, "id", sets))
    assert [(s.path.removeprefix(str(DATA) + "/"), s.layout, s.items) for s in sets] == [
        ("arc", "ARC", 1), ("gsm8k/test", "GSM8K", 2), ("gsm8k/train", "GSM8K", 1)]
    assert got[0][0] == "Mercury_SC_415702" and got[0][2].endswith("dry palms wet palms")
    assert got[1][0] == f"{DATA / 'gsm8k' / 'test'}:row 1" and "#### 72" in got[1][2]


def test_help_examples_run_as_written(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "mmlu.jsonl").write_bytes(jsonl([RECORDS["mmlu.jsonl"]]))
    (tmp_path / "mmlu.jsonl").write_bytes(jsonl([RECORDS["mmlu.jsonl"]]))
    (tmp_path / "gsm8k.jsonl").write_bytes(jsonl([RECORDS["gsm8k.jsonl"]]))
    docs = jsonl([{"text": Q[0]}, {"text": Q[1]}, {"text": "nothing in common here"}])
    (tmp_path / "train.jsonl").write_bytes(docs)
    import zstandard

    for name in ("train.jsonl.zst", "web.jsonl.zst"):
        (tmp_path / name).write_bytes(zstandard.ZstdCompressor().compress(docs))
    examples = help_examples(HELP)
    assert len(examples) == 3
    for example in examples:
        # zstdcat X | llmtk ...  -> llmtk reads X itself (it detects zstd from the bytes)
        command = example
        stdin_file = None
        if m := re.match(r"zstdcat (\S+) +\| (.*)", example):
            stdin_file, command = m.group(1), m.group(2)
        command = command.split(" > ")[0]
        args = shlex.split(command)[1:]
        r = llmtk(*args, input=(tmp_path / stdin_file).read_bytes() if stdin_file else None,
                  cwd=tmp_path)
        assert r.returncode in (0, 3), (example, r.stderr)
        assert b"none of the fields" not in r.stderr
