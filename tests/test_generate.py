"""`llmtk generate`: text out on stdout, JSONL prompts in for batches, EOS stops."""

import json

import pytest

torch = pytest.importorskip("torch")

from llmtk.train.checkpoint.checkpointer import Checkpointer  # noqa: E402
from llmtk.train.model.gpt import GPT, ModelConfig  # noqa: E402
from llmtk.train.model.sample import SampleOptions, complete  # noqa: E402
from tests.util import InProcess  # noqa: E402


@pytest.fixture
def cli():
    return InProcess()


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory with one complete checkpoint of a small random byte-level model."""
    out = tmp_path_factory.mktemp("run")
    torch.manual_seed(1)
    cfg = ModelConfig(vocab_size=257, seq_len=32, n_layer=1, d_model=32, n_head=2)
    model = GPT(cfg)
    state = {"step": 5, "model_config": cfg.to_dict(), "train_config": {"tokenizer": "bytes"},
             "tokenizer": "bytes-v1"}
    Checkpointer(str(out / "checkpoints")).save(5, state, model)
    return out


def test_prompt_prints_the_prompt_and_its_greedy_continuation(cli, run_dir):
    r = cli("generate", run_dir, "--prompt", "abc", "--temperature", "0", "-n", "40")
    assert r.exit_code == 0, r.output
    from llmtk.train import load_model

    loaded = load_model(str(run_dir))
    text, _ = complete(loaded.model, loaded.tokenizer, "abc",
                       SampleOptions(max_new_tokens=40, temperature=0))
    assert r.stdout == "abc" + text + "\n"
    assert r.output == ""  # nothing but data on stdout, nothing on stderr


def test_several_prompts_and_seeded_sampling_is_reproducible(cli, run_dir):
    args = ["generate", run_dir, "-p", "one", "-p", "two", "--temperature", "1", "-n", "20"]
    a = cli(*args, "--seed", "3").stdout
    assert a == cli(*args, "--seed", "3").stdout
    assert a != cli(*args, "--seed", "4").stdout
    lines = a.split("\n")
    assert lines[0].startswith("one") and any(x.startswith("two") for x in lines[1:])


def test_jsonl_prompts_get_a_completion_field(cli, run_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": 1, "prompt": "Hello"}\n{"id": 2, "prompt": "", "k": [1]}\n')
    r = cli("generate", run_dir, "--prompts", prompts, "--temperature", "0", "-n", "5")
    assert r.exit_code == 0, r.output
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["id"] for o in out] == [1, 2] and out[1]["k"] == [1]
    assert all(isinstance(o["completion"], str) for o in out)
    r2 = cli("generate", run_dir, "--prompts", prompts, "--temperature", "0", "-n", "5")
    assert r2.stdout == r.stdout


def test_bad_prompts_file_fails_before_loading_the_model(cli, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    r = cli("generate", tmp_path / "no-model", "--prompts", prompts)
    assert r.exit_code == 1 and f"{prompts}:2: no 'prompt' field" in r.output


@pytest.mark.parametrize("args, message", [
    ([], "give --prompt TEXT or --prompts FILE.jsonl"),
    (["-p", "x", "--prompts", "p.jsonl"], "one of them"),
    (["-p", "x", "-n", "0"], "--max-new-tokens"),
    (["-p", "x", "--temperature", "-1"], "--temperature"),
])
def test_usage_errors(cli, run_dir, args, message):
    r = cli("generate", run_dir, *args)
    assert r.exit_code == 2 and message in r.output


def test_a_folder_that_is_no_model_is_a_usage_error(cli, tmp_path):
    r = cli("generate", tmp_path, "-p", "x")
    assert r.exit_code == 2 and "neither a Hugging Face model folder nor an llmtk run" in r.output


class EosAfter:
    """A stand-in model that prefers token 65 ('A') for n steps, then EOS."""

    def __init__(self, n):
        self.n, self.calls = n, 0
        self.cfg = ModelConfig(vocab_size=257, seq_len=8)
        self.weight = torch.zeros(1)

    def parameters(self):
        yield self.weight

    def __call__(self, idx):
        logits = torch.zeros(1, idx.shape[1], 257)
        logits[0, -1, 256 if self.calls >= self.n else 65] = 10.0
        self.calls += 1
        return logits, None


def test_generation_stops_at_eos_and_at_max_new_tokens():
    from llmtk.text.tokenizer import ByteTokenizer

    text, n = complete(EosAfter(3), ByteTokenizer(), "x", SampleOptions(20, temperature=0))
    assert (text, n) == ("AAA", 3)
    text, n = complete(EosAfter(100), ByteTokenizer(), "x" * 50, SampleOptions(12, 0))
    assert (text, n) == ("A" * 12, 12)  # the context window slides past seq_len
