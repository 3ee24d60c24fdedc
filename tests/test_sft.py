"""Instruction fine-tuning and LoRA: chat templates and their loss masks, packed rows with
document masking, no gradient through prompt tokens, LoRA freezing / merging / sizing
against `llmtk estimate`, and the CLI runs (exact resume; learning: test_sft_learning.py)."""

import json
import os

import pytest
import torch

from llmtk.errors import DataError
from llmtk.text.tokenizer import ByteTokenizer
from llmtk.train.data import sft as S
from llmtk.train.data.chat import JinjaTemplate, LlmtkTemplate
from llmtk.train.model.gpt import GPT, ModelConfig
from llmtk.train.model.lora import add_lora, merged_state_dict
from tests.tolerance import FP64, PARITY_REL, assert_close64, logit_bound, max_abs_diff

TOK = ByteTokenizer()
CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"}, {"role": "user", "content": "and?"},
        {"role": "assistant", "content": "ok"}]


def write_jsonl(path, records):
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    return str(path)


def trained_text(ids, trained):
    """The trained tokens as text, EOS shown as |."""
    return "".join("|" if i == TOK.eos_id else chr(i) for i, t in zip(ids, trained, strict=True)
                   if t)


# ---------------------------------------------------------------- templates and data


def test_llmtk_template_trains_only_assistant_contents_and_their_eos():
    ids, trained = LlmtkTemplate(TOK).encode(CHAT)
    assert TOK.decode(ids) == ("<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\nyo"
                               "<|user|>\nand?\n<|assistant|>\nok")
    assert trained_text(ids, trained) == "yo|ok|"
    prompt = LlmtkTemplate(TOK).prompt(CHAT[:2])
    assert TOK.decode(prompt).endswith("<|user|>\nhi\n<|assistant|>\n")


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_a_jinja_chat_template_marks_what_each_assistant_turn_adds():
    tpl = JinjaTemplate(TOK, CHATML, "chatml")
    ids, trained = tpl.encode(CHAT)
    assert TOK.decode(ids) == tpl.render(CHAT, False)
    assert trained_text(ids, trained) == "yo<|im_end|>\nok<|im_end|>\n"
    assert TOK.decode(tpl.prompt(CHAT[:2])).endswith("<|im_start|>assistant\n")


def test_layouts_are_detected_and_template_forces_one(tmp_path):
    path = write_jsonl(tmp_path / "mix.jsonl", [
        {"messages": CHAT},
        {"prompt": "p", "response": "r", "system": "s"},
        {"instruction": "i", "input": "x", "output": "o"},
        {"instruction": "i", "input": "", "output": "o"},
    ])
    convs = [m for _, m in S.read_conversations([path], "auto")]
    assert convs[1] == [{"role": "system", "content": "s"}, {"role": "user", "content": "p"},
                        {"role": "assistant", "content": "r"}]
    assert convs[2][0] == {"role": "user", "content": "i\n\nx"}
    assert convs[3][0] == {"role": "user", "content": "i"}
    with pytest.raises(DataError, match=r"mix\.jsonl:1: no 'prompt' field for the 'prompt' layout"):
        S.read_conversations([path], "prompt")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "p", "response": "r"},
                                               {"messages": [{"role": "bot", "content": "x"}]}])
    with pytest.raises(DataError, match=r"bad\.jsonl:2: each message needs role"):
        S.read_conversations([bad], "auto")


def _convs(*pairs):
    return [(f"f:{i}", [{"role": "user", "content": p}, {"role": "assistant", "content": r}])
            for i, (p, r) in enumerate(pairs)]


def test_packing_keeps_examples_whole_and_never_targets_across_them():
    chat = LlmtkTemplate(TOK)
    convs = _convs(("a", "bc"), ("d", "ef"), ("g", "h"))
    one = len(chat.encode(convs[0][1])[0])  # 28 tokens
    rows = S.build_rows(convs, chat, seq_len=2 * one + 1, pad_id=TOK.eos_id)
    assert rows.stats["rows"] == 2 and rows.stats["examples"] == 3
    assert rows.doc[0].tolist() == [0] * one + [1] * one + [2] * 2  # + padding as its own doc
    sampler = S.SFTSampler(rows, 2, 1, 0, 0, shuffle=False)
    x, y, doc = sampler.batch(0)
    trained = [(chr(int(a)), chr(int(b)) if b != TOK.eos_id else "|")
               for a, b in zip(x[0], y[0], strict=True) if b >= 0]
    assert trained == [("\n", "b"), ("b", "c"), ("c", "|"), ("\n", "e"), ("e", "f"), ("f", "|")]
    assert rows.stats["trained_tokens"] == 3 + 3 + 2
    assert sampler.trained_tokens(2) == 8 and sampler.trained_tokens(3) == 8 + 6
    padded = S.build_rows(convs, chat, seq_len=2 * one + 1, pad_id=TOK.eos_id, packing=False)
    assert padded.stats["rows"] == 3


def test_long_examples_are_truncated_and_prompt_only_ones_dropped():
    chat = LlmtkTemplate(TOK)
    rows = S.build_rows(_convs(("x" * 40, "yy"), ("q", "r" * 50)), chat, seq_len=40,
                        pad_id=TOK.eos_id)
    assert rows.stats["truncated"] == 2 and rows.stats["dropped"] == 1
    assert rows.stats["examples"] == 1
    with pytest.raises(DataError, match="no instruction example with an assistant token"):
        S.build_rows(_convs(("x" * 60, "y")), chat, seq_len=40, pad_id=TOK.eos_id)


# ---------------------------------------------------------------- model: masking, gradients


def tiny(seq_len=64, **kw):
    torch.manual_seed(0)
    return GPT(ModelConfig(vocab_size=257, seq_len=seq_len, n_layer=2, d_model=32, n_head=4,
                           **kw))


def test_packed_examples_see_only_themselves():
    m = tiny(n_kv_head=2).eval()
    a, b = torch.randint(0, 256, (1, 10)), torch.randint(0, 256, (1, 14))
    doc = torch.tensor([[0] * 10 + [1] * 14])
    packed, _ = m(torch.cat([a, b], 1), doc=doc)
    alone_a, _ = m(a)
    alone_b, _ = m(b)
    # the same arithmetic up to summation order (other sequence lengths, other blocking)
    bound = logit_bound(m, torch.cat([a, b], 1), doc=doc)
    assert max_abs_diff(packed[0, :10], alone_a[0]) <= bound
    assert max_abs_diff(packed[0, 10:], alone_b[0]) <= bound
    unmasked, _ = m(torch.cat([a, b], 1))
    assert max_abs_diff(unmasked[0, 10:], alone_b[0]) > 10 * bound


def test_prompt_tokens_get_no_gradient():
    chat = LlmtkTemplate(TOK)
    rows = S.build_rows(_convs(("reverse abc", "cba"), ("add 1 2", "3")), chat, 63, TOK.eos_id)
    x, y, doc = S.SFTSampler(rows, 1, 1, 0, 0, shuffle=False).batch(0)
    m = tiny()
    seen = {}

    def keep(module, args, out):  # the head's input (the chunked loss never forms logits)
        out.retain_grad()
        seen["h"] = out

    m.norm.register_forward_hook(keep)
    _, loss = m(x, y, doc)
    loss.backward()
    g = seen["h"].grad[0].abs().sum(-1)  # (T,) gradient at each output position
    prompt = y[0] == -1
    assert prompt.sum() > 2 * (~prompt).sum()  # mostly prompt, so the check means something
    assert g[prompt].max() == 0  # no loss flows from any prompt (or padding) position
    assert (g[~prompt] > 0).all()


# ---------------------------------------------------------------- LoRA


def test_lora_freezes_the_base_and_starts_as_the_base_model():
    m = tiny()
    x = torch.randint(0, 256, (2, 16))
    before, _ = m.eval()(x)
    n = add_lora(m, rank=4)
    after, _ = m(x)
    assert torch.equal(before, after)  # B = 0: step 0 is the base model
    trainable = {k for k, p in m.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in k for k in trainable)
    assert n == sum(p.numel() for p in m.parameters() if p.requires_grad)


def test_lora_on_the_meta_device_is_initialised_like_add_lora():
    """FSDP2's path: adapters added to a meta model, to_empty, init_weights, init_lora."""
    from llmtk.train.model.lora import init_lora

    with torch.device("meta"):
        m = GPT(ModelConfig(vocab_size=257, seq_len=64, n_layer=2, d_model=32, n_head=4,
                            n_kv_head=2, tie_embeddings=False))
    add_lora(m, rank=4)
    m.to_empty(device="cpu")
    torch.manual_seed(0)
    m.init_weights()
    init_lora(m)
    # The single-process trainer's order: the seed, init_weights, then add_lora draws A.
    ref = tiny(n_kv_head=2, tie_embeddings=False)
    torch.manual_seed(0)
    ref.init_weights()
    add_lora(ref, rank=4)
    want_sd, got_sd = ref.state_dict(), m.state_dict()
    assert want_sd.keys() == got_sd.keys()
    # Every tensor, adapters' A included (B = 0 alone would hide a different A: the output
    # is the base model's either way, but the first update is not).
    assert all(torch.equal(want_sd[k], got_sd[k]) for k in want_sd)
    for k, p in m.named_parameters():
        assert p.requires_grad == (".lora_" in k)
        if ".lora_A." in k:
            assert torch.isfinite(p).all() and p.abs().sum() > 0


@pytest.mark.parametrize("lora", [False, True])
def test_a_tied_model_built_on_the_meta_device_stays_tied(lora):
    """A plain to_empty (no FSDP) gives each module its own new tensor; init_weights ties the
    head to the embedding again, so the model is the one GPT(cfg) builds with that seed."""
    from llmtk.train.model.lora import init_lora

    cfg = ModelConfig(vocab_size=257, seq_len=64, n_layer=2, d_model=32, n_head=4)
    with torch.device("meta"):
        m = GPT(cfg)
    if lora:
        add_lora(m, rank=4)
    m.to_empty(device="cpu")
    torch.manual_seed(0)
    m.init_weights()
    if lora:
        init_lora(m)
    assert m.lm_head.weight is m.tok_emb.weight
    ref = GPT(cfg)
    torch.manual_seed(0)
    ref.init_weights()
    if lora:
        add_lora(ref, rank=4)
    x = torch.randint(0, 256, (2, 16))
    assert torch.equal(m.eval()(x)[0], ref.eval()(x)[0])
    # Still one tensor after an update: a step on the embedding moves the head too.
    with torch.no_grad():
        m.tok_emb.weight[0].add_(1.0)
    assert torch.equal(m.lm_head.weight[0], m.tok_emb.weight[0])


def test_the_chunked_loss_of_a_frozen_head_gives_the_same_input_gradient():
    """LoRA freezes the (tied) head: the loss skips its d/dW, d/dh is unchanged."""
    import torch.nn.functional as F

    from llmtk.train.model.gpt import chunked_cross_entropy

    torch.manual_seed(0)
    # fp64: the chunks sum in another order than one matmul (tests/tolerance.py)
    h = torch.randn(10, 16, requires_grad=True, dtype=torch.float64)
    w = torch.randn(128, 16, dtype=torch.float64)  # frozen: no requires_grad
    t = torch.randint(0, 100, (10,))
    t[3] = -1
    chunked_cross_entropy(h, w, t, 100, chunk=4).backward()
    ref_h = h.detach().clone().requires_grad_(True)
    logits = (ref_h @ w.t())[:, :100]
    F.cross_entropy(logits, t, ignore_index=-1).backward()
    assert_close64(h.grad, ref_h.grad)
    assert w.grad is None


def test_merged_lora_equals_adapter_inference():
    m = tiny(n_kv_head=2)
    add_lora(m, rank=4, alpha=8, targets="q,v,o,down")
    torch.manual_seed(1)
    for p in m.parameters():
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.1)  # as after training
    m.eval()
    x = torch.randint(0, 256, (2, 20))
    with_adapters, _ = m(x)
    plain = tiny(n_kv_head=2).eval()
    plain.load_state_dict(merged_state_dict(m.state_dict(), m.cfg.to_dict(), alpha=8))
    merged, _ = plain(x)
    # merging rounds each adapted matrix's W + s B A once more (r + 2 roundings, rank 4):
    # on a layer's path q/k/v, o and down are adapted
    bound = logit_bound(plain, x, extra=m.cfg.n_layer * 3 * (4 + 2))
    assert max_abs_diff(with_adapters, merged) <= bound


def test_lora_size_and_memory_match_llmtk_estimate():
    """The adapter count is estimate's formula exactly; `llmtk estimate --measure
    --lora-rank 8` (one real LoRA training step, fp32, CPU) is within 10% of the
    prediction for weights, gradients, AdamW states and activations alike."""
    from llmtk.commands.measure import compare
    from llmtk.estimate.activations import spec_of
    from llmtk.estimate.memory import lora_params
    from tests.util import llmtk

    cfg = ModelConfig(vocab_size=257, seq_len=64, n_layer=4, d_model=128, n_head=4)
    m = GPT(cfg)
    assert add_lora(m, rank=8) == lora_params(spec_of(cfg), 8)
    rows = compare(cfg, 2, lora_rank=8)["rows"]
    assert rows["gradients"]["measured"] == 4 * lora_params(spec_of(cfg), 8)  # adapters only
    for name in ("weights", "gradients", "optimizer", "model_states", "activations"):
        assert abs(rows[name]["error"]) < 0.10, (name, rows[name])
    # The activation prediction is LoRA's own and exact, also with GQA and with full
    # recompute (the full-training formula was 11% over at 4 x 256 GQA).
    gqa = ModelConfig(vocab_size=257, seq_len=32, n_layer=2, d_model=64, n_head=4, n_kv_head=2)
    for c, recompute in ((cfg, "selective"), (gqa, "selective"), (gqa, "full")):
        act = compare(c, 2, recompute=recompute, lora_rank=4)["rows"]["activations"]
        assert act["measured"] == act["predicted"], (recompute, act)
    p = llmtk("estimate", "--layers", "4", "--d-model", "128", "--heads", "4", "--vocab", "257",
              "--seq-len", "64", "--measure", "--lora-rank", "8", "--json", in_process=True,
              **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()
    assert json.loads(p.stdout)["rows"]["model_states"]["error"] == 0.0


# ---------------------------------------------------------------- the CLI
# The learning tests are in tests/test_sft_learning.py (another pytest-xdist worker).

SMALL = ["--layers", "2", "--d-model", "64", "--heads", "4", "--seq-len", "64", "--warmup", "2",
         "--lr", "3e-3", "--log-every", "1", "-q"]
ONE_THREAD = {"OMP_NUM_THREADS": "1"}  # 2 busy cores: threads only fight each other


def words(n, seed, tasks=("repeat", "upper", "reverse")):
    """n distinct synthetic instruction pairs over 3-letter words."""
    import random

    rng = random.Random(seed)
    fn = {"repeat": lambda w: w, "upper": str.upper, "reverse": lambda w: w[::-1]}
    seen, out = set(), []
    while len(out) < n:
        w = "".join(rng.choice("abcdefgh") for _ in range(3))
        kind = rng.choice(tasks)
        if (kind, w) not in seen:
            seen.add((kind, w))
            out.append({"prompt": f"{kind} {w}", "response": fn[kind](w)})
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny pre-trained run (a few steps on stdlib docstrings) to fine-tune from."""
    from tests.util import llmtk

    d = tmp_path_factory.mktemp("base")
    docs = write_docstrings(d / "docs.jsonl")
    out = str(d / "run")
    p = llmtk("train", "--data", docs, "--out", out, *SMALL, "--steps", "10",
              **ONE_THREAD)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return {"run": out, "dir": d}


def write_docstrings(path):
    """Stdlib docstrings as JSONL: the pre-training text of the base runs."""
    import importlib
    import inspect

    with open(path, "w") as f:
        for name in ("json", "os", "re", "collections", "itertools"):
            for _, obj in inspect.getmembers(importlib.import_module(name)):
                doc = inspect.getdoc(obj)
                if doc and len(doc) > 200:
                    f.write(json.dumps({"text": doc}) + "\n")
    return path


def rows(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def sft(base, out, data, *args, check=True, faults=None, **env):
    """`llmtk train --sft` from the base run, as a real process: in this process a step
    measured 4-5x slower (tests/train_runs.py)."""
    import json

    from tests.util import env as make_env
    from tests.util import run_module

    # tests.train_driver: llmtk with the test faults of LLMTK_TEST_FAULTS injected
    argv = ["train", "--sft", "--init-from", base["run"], "--data", data, "--out", out,
            "--warmup", "2", "--lr", "3e-3", "--log-every", "1", "-q", *map(str, args)]
    p = run_module("tests.train_driver", argv,
                   environ=make_env(**{**ONE_THREAD, **env,
                                       "LLMTK_TEST_FAULTS": json.dumps(faults or {})}))
    if check:
        assert p.returncode == 0, p.stderr.decode()[-3000:]
    return p


def test_sft_with_lora_resumes_exactly_and_leaves_the_base_untouched(base, tmp_path):
    data = write_jsonl(tmp_path / "sft.jsonl", words(60, 0))
    common = ["--steps", "6", "--batch-size", "4", "--checkpoint-every", "3", "--lora-rank", "4",
              "--lora-dropout", "0.1"]  # dropout: the RNG state must resume too
    ref = str(tmp_path / "ref")
    sft(base, ref, data, *common)
    out = str(tmp_path / "crash")
    marker = str(tmp_path / "died")
    p = sft(base, out, data, *common, check=False, faults={"die_once": [marker, 4]})
    assert p.returncode == 17 and os.path.exists(marker)
    sft(base, out, data, *common)

    def train_rows(run):
        return [(r["step"], r["loss"], r["grad_norm"], r["trained_tokens"]) for r in rows(run)
                if "loss" in r and "event" not in r]

    assert train_rows(out) == train_rows(ref)
    assert [r[0] for r in train_rows(ref)] == [1, 2, 3, 4, 5, 6]
    assert train_rows(ref)[-1][3] > train_rows(ref)[0][3] > 0  # loss-carrying tokens counted
    # Frozen: every base weight in the final checkpoint is the base run's.
    from llmtk.train.checkpoint import files as C

    before = C.load_tensors(C.resolve(base["run"]), "model.pt")
    after = C.load_tensors(C.resolve(ref), "model.pt")
    assert {k for k in after if ".lora_" in k}
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert any(not torch.equal(after[k], torch.zeros_like(after[k]))
               for k in after if ".lora_B." in k)
    # The public loader folds the adapters in: a plain GPT with the base's keys.
    from llmtk.train import full_state_dict, load_model

    model, _ = load_model(ref)
    assert set(full_state_dict(ref)) == set(before) == set(model.state_dict())


def _losses(run):
    return [(r["step"], r["loss"], r["grad_norm"], r["trained_tokens"]) for r in rows(run)
            if "loss" in r and "event" not in r]


@pytest.mark.parametrize("lora,extra", [
    ([], ["--grad-accum", "2"]),
    pytest.param([], ["--nproc-per-node", "2"],
                 marks=[pytest.mark.slow, pytest.mark.integration]),
    # Under FSDP2 the adapters are initialised after sharding (lora.init_lora): each rank's
    # slice of A must be the single process's, or every step after the first differs.
    pytest.param(["--lora-rank", "4"], ["--nproc-per-node", "2", "--parallel", "fsdp"],
                 marks=[pytest.mark.slow, pytest.mark.integration]),
    # Two pipeline stages: the document ids travel to both (each builds its attention
    # mask), and each microbatch's share of the step's tokens scales the last stage's loss.
    pytest.param([], ["--grad-accum", "2", "--nproc-per-node", "2", "--pp", "2"],
                 marks=[pytest.mark.slow, pytest.mark.integration], id="pp2"),
])
def test_sft_steps_do_not_depend_on_how_the_batch_is_split(base, tmp_path, lora, extra):
    """The loss is the mean over every trained token of the step, whatever the split into
    processes and micro-steps: 2 x 2 (DDP, FSDP2 with LoRA, grad accumulation, two pipeline
    stages) = 1 x 4."""
    # Responses of 1-7 tokens: micro-batches hold different numbers of trained tokens, so a
    # mean of per-micro-batch means would differ from the step's token mean.
    data = write_jsonl(tmp_path / "sft.jsonl", [
        {"prompt": f"say {i}", "response": "x" * (1 + i % 7)} for i in range(40)])
    # fp64: the splits sum the step's tokens in other orders, and AdamW carries a rounding
    # difference in a tiny gradient into a full-size update (tests/tolerance.py PARITY_REL)
    common = ["--steps", "3", *FP64, *lora]
    ref, out = str(tmp_path / "ref"), str(tmp_path / "split")
    sft(base, ref, data, *common, "--batch-size", "4")
    sft(base, out, data, *common, "--batch-size", "2", *extra)
    a, b = _losses(ref), _losses(out)
    assert [x[0] for x in a] == [x[0] for x in b] == [1, 2, 3]
    for (_, la, ga, ta), (_, lb, gb, tb) in zip(a, b, strict=True):
        assert lb == pytest.approx(la, rel=PARITY_REL) and gb == pytest.approx(ga, rel=PARITY_REL)
        assert ta == tb


def test_sft_refuses_bad_records_with_file_and_line(base, tmp_path):
    data = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "p", "response": "r"},
                                                {"prompt": "p"}])
    p = sft(base, str(tmp_path / "o"), data, "--steps", "1", check=False)
    assert p.returncode == 1
    assert p.stderr.decode().strip().splitlines()[-1].startswith(
        f"llmtk: error: {data}:2: not an instruction record")
