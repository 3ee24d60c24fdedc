"""The perplexity filter with a small byte-level model saved in `llmtk train`'s checkpoint
layout (trained here for a few steps on English so that other text scores worse).
`llmtk clean --ppl-model` runs in this process (torch is loaded here anyway), but with
workers (-j 2), which fork."""

import json
import warnings
from pathlib import Path

import pytest

from tests.util import llmtk

DATA = Path(__file__).parent / "data" / "clean"
ARTICLES = [
    json.loads(x) for x in (DATA / "articles.jsonl").read_text(encoding="utf-8").splitlines()
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from llmtk.text.tokenizer import ByteTokenizer
    from llmtk.train.checkpoint.checkpointer import Checkpointer
    from llmtk.train.model.gpt import GPT, ModelConfig

    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = ModelConfig(vocab_size=257, seq_len=64, n_layer=1, d_model=32, n_head=2)
    model = GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    tok = ByteTokenizer()
    ids = torch.tensor([tok.eos_id, *tok.encode(ARTICLES[0]["text"]), tok.eos_id])
    for _ in range(60):
        starts = torch.randint(0, len(ids) - 65, (8,))
        x = torch.stack([ids[s:s + 64] for s in starts])  # (B, T)
        y = torch.stack([ids[s + 1:s + 65] for s in starts])  # (B, T)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    root = tmp_path_factory.mktemp("run") / "checkpoints"
    state = {"model_config": cfg.to_dict(), "train_config": {"tokenizer": "bytes"},
             "tokenizer": tok.fingerprint(), "step": 60}
    Checkpointer(str(root), keep=1).save(60, state, model)
    return root.parent


@pytest.fixture(scope="module")
def dcp_checkpoint(checkpoint, tmp_path_factory):
    """The same model as a DCP-sharded checkpoint (what an FSDP2 run writes), with
    torch.compile's and DDP's key prefixes on top: --ppl-model must not care."""
    import torch.distributed.checkpoint as dcp

    from llmtk.train.checkpoint import files as C

    src = C.resolve(str(checkpoint))
    weights = C.load_tensors(src, "model.pt")
    root = str(tmp_path_factory.mktemp("dcp-run") / "checkpoints")
    tmp = C.begin(root, 60)
    C.write_rank_files(tmp, 0, C.load_state(src))
    sd = {"model": {f"module._orig_mod.{k}": v for k, v in weights.items()}, "optim": {}}
    with warnings.catch_warnings():  # "assuming ... a single process": it is one
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(sd, checkpoint_id=f"{tmp}/dcp", no_dist=True)
    final = C.commit(root, 60, keep=1)
    assert C.is_sharded(final) and not (Path(final) / "model.pt").exists()
    return Path(root).parent


def test_perplexity_from_a_dcp_sharded_checkpoint_equals_the_full_one(checkpoint,
                                                                      dcp_checkpoint):
    data = jsonl([{"id": a["lang"], "text": a["text"]} for a in ARTICLES])
    got = []
    for model in (checkpoint, dcp_checkpoint):
        r = llmtk("clean", "--ppl-model", model, "--max-ppl", "1e9", "--annotate", "-q",
                  "--filters", "none", input=data, in_process=True)
        assert r.returncode == 0, r.stderr
        got.append([d["llmtk"]["perplexity"] for d in map(json.loads, r.stdout.splitlines())])
    assert got[0] == got[1] and len(got[0]) == len(ARTICLES)


def test_the_filter_loads_through_train_s_public_loader():
    """#14: clean knows nothing of train's checkpoint layout (no model.pt, no prefixes)."""
    src = (Path(__file__).parent.parent / "llmtk" / "clean" / "perplexity.py").read_text()
    assert "from llmtk.train import load_model" in src
    for layout in ("model.pt", "_orig_mod", "module.", "checkpoint as C", "state.json"):
        assert layout not in src, layout


def jsonl(records) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in records)


def test_perplexity_scores_and_max_ppl(checkpoint, tmp_path):
    data = jsonl([{"id": a["lang"], "text": a["text"]} for a in ARTICLES])
    r = llmtk("clean", "--ppl-model", checkpoint, "--max-ppl", "1e9", "--annotate", "-q",
              "--filters", "none", input=data, in_process=True)
    assert r.returncode == 0, r.stderr
    ppl = {d["id"]: d["llmtk"]["perplexity"] for d in map(json.loads, r.stdout.splitlines())}
    assert ppl["en"] == min(ppl.values())  # the model saw English
    assert ppl["en"] < ppl["zh"] and ppl["en"] < ppl["ru"]
    ordered = sorted(ppl.values())
    limit = (ordered[2] + ordered[3]) / 2
    rej = tmp_path / "rej.jsonl"
    r = llmtk("clean", "--ppl-model", checkpoint, "--max-ppl", str(limit), "-q", "--rejects", rej,
              "--filters", "none", input=data, in_process=True)
    kept = [json.loads(x)["id"] for x in r.stdout.splitlines()]
    assert len(kept) == 3 and "en" in kept
    assert {json.loads(x)["llmtk"]["reason"] for x in rej.read_bytes().splitlines()} \
        == {"perplexity.too_high"}


def test_perplexity_quantile_two_passes(checkpoint, tmp_path):
    data = tmp_path / "in.jsonl"
    data.write_bytes(jsonl([{"id": a["lang"], "text": a["text"]} for a in ARTICLES] * 2))
    # -j 2 forks workers: a real process for it, this one for -j 1
    outs = [llmtk("clean", data, "--ppl-model", checkpoint, "--ppl-quantile", "0.5", "-q",
                  "--filters", "none", "-j", j, in_process=j == "1") for j in ("1", "2")]
    assert outs[0].returncode == 0, outs[0].stderr
    assert outs[0].stdout == outs[1].stdout
    assert len(outs[0].stdout.splitlines()) == 6  # half of 12
    r = llmtk("clean", "--ppl-model", checkpoint, "--ppl-quantile", "0.5", input=data.read_bytes(),
              in_process=True)
    assert r.returncode == 2 and b"--ppl-quantile" in r.stderr


def test_perplexity_option_errors(tmp_path):
    r = llmtk("clean", "--ppl-model", tmp_path, "--max-ppl", "10", input=b"", in_process=True)
    assert r.returncode == 2 and b"--ppl-model" in r.stderr and b"Traceback" not in r.stderr
    r = llmtk("clean", "--max-ppl", "10", input=b"")
    assert r.returncode == 2 and b"--ppl-model" in r.stderr
