"""`llmtk estimate` for long context (--cp) and mixture-of-experts layouts (--ep): activations
per rank, the cp and ep traffic of the step-time model (hand-computed cases), the layout
search asking llmtk train's own rules, and the emitted config read back by train."""

import json
from dataclasses import replace

import pytest

from llmtk.compute import hardware
from llmtk.compute.models import preset
from llmtk.estimate import activations, memory, rules
from llmtk.estimate.layout import Candidate, step_time
from llmtk.estimate.plan import Request, estimate
from tests.util import llmtk

LLAMA = preset("llama3-8b")  # 32 layers, d 4096, 32 heads of 128, 8 kv heads
LONG = ["--model", "llama3-8b", "--seq-len", "131072", "--tokens", "1T", "--gpus", "64xH100"]


def run_json(*args):
    p = llmtk("estimate", *args, "--json", in_process=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


# --- activations per rank ---------------------------------------------------------------

@pytest.mark.parametrize("tp", [1, 2])
def test_cp_divides_a_layers_activations_and_adds_the_gathered_keys_and_values(tp):
    """Korthikanti's layer at s/cp tokens, plus the whole sequence's K and V the
    all-gather brought (2·s·b·kv_heads·head_dim elements, split over tp by heads)."""
    m = replace(LLAMA, seq_len=131072)
    s, kv = m.seq_len, m.kv_heads * m.hd

    def layer(cp):
        return memory.layer_activation_bytes(m, 1, tp=tp, sp=tp > 1, recompute="selective",
                                             elem=2, cp=cp)
    assert layer(8) == pytest.approx(layer(1) / 8 + 2 * s * 2 * kv / tp, rel=1e-12)
    # full recompute keeps only the layer input, the rank's s/cp of it
    full = memory.layer_activation_bytes(m, 1, recompute="full", elem=2, cp=8)
    assert full == 2 * s / 8 * m.d_model


def test_cp_divides_the_llmtk_models_activations():
    """The llmtk model's own bytes (what --solve layout and train --dry-run price): every
    per-token term at seq/cp tokens, + the gathered K and V per layer, - the fused qkv
    output and the rotated keys (C + 3·K·D per local token), which the gather's own
    copies replace (measured: tests/test_train_cp.py)."""
    from types import SimpleNamespace

    cfg = SimpleNamespace(d_model=4096, hidden=14336, active_ffn=14336, vocab_size=128256,
                          n_head=32, kv_heads=8, head_dim=128, n_layer=32)
    seq = 131072
    whole = activations.llmtk_saved_bytes(cfg, 1, seq // 8, elem=2, residual=2)
    cp8 = activations.llmtk_saved_bytes(cfg, 1, seq, elem=2, residual=2, cp=8)
    assert cp8["per_layer"] == pytest.approx(
        whole["per_layer"] + seq * 2 * 8 * 128 * 2 - seq // 8 * (4096 + 3 * 8 * 128) * 2)
    assert cp8["head"] == whole["head"] and cp8["inputs"] == whole["inputs"]


def test_interface_reports_cp_in_run_memory_and_step():
    """The check's command: cp in the run, activations per rank at seq/cp, the cp traffic
    in the step model; the causal attention work in the FLOPs."""
    one = run_json(*LONG, "--zero", "3")
    r = run_json(*LONG, "--cp", "8")
    assert r["run"]["cp"] == 8 and r["run"]["dp"] == 8 and r["run"]["tokens_per_rank"] == 16384
    assert r["run"]["global_batch"] == 8  # the cp ranks of a group read one sequence
    eight = run_json(*LONG, "--cp", "8", "--zero", "3")
    assert eight["memory"]["activations"] < one["memory"]["activations"] / 4
    # ZeRO 3 shards over dp x cp = 64 ranks either way: the same states
    assert eight["memory"]["model_states"] == pytest.approx(one["memory"]["model_states"])
    assert r["step"]["cp_bytes"] > 0 and r["step"]["cp_s"] > 0
    assert one["step"]["cp_bytes"] == 0
    fl = r["flops"]
    attn = 6 * 32 * 32 * 128 * 131072  # causal: half PaLM's 12·L·H·Q·T
    assert fl["attention_per_token_causal"] == attn == fl["attention_per_token"] / 2
    assert fl["per_token_causal"] == fl["per_token_6n"] + attn
    assert 0.69 < fl["attention_share_causal"] < 0.70  # 2.3 x 6N at 128K
    # the time is the causal work at --mfu
    assert r["time"]["seconds"] == pytest.approx(
        fl["total_causal"] / (64 * hardware.gpu("H100").bf16 * 0.4))
    # the full count is Narayanan et al. 2021's (appendix) attention part of
    # 72·B·s·l·h²·(1 + s/(6h) + V/(12hl)) per token, h = H·Q: 72·l·h²·s/(6h)
    assert fl["attention_per_token"] == 72 * 32 * 4096**2 * 131072 / (6 * 4096)


# --- the cp and ep traffic of the step-time model ------------------------------------------

COST = dict(peak=989.4e12, mfu=0.4, gpu=hardware.gpu("H100"), per_node=8)


def test_cp_volume_is_the_kv_all_gather_and_reduce_scatter():
    """llama3-8b at 128K, cp 8 (one node), micro-batch 1: per layer, the whole sequence's
    K and V are 131072 x 2 x 8 x 128 x 2 bytes = 512 MiB; a rank receives 7/8 of them in
    forward and sends 7/8 of their gradients in backward: 2 x 32 x 7/8 x 512 MiB."""
    m = replace(LLAMA, seq_len=131072)
    c = Candidate(8, 1, 1, 3, 1, "selective", cp=8)
    t = step_time(m, c, global_batch=8, flops_per_token=1.5e11, params=8e9, **COST)
    assert t["micro_batches"] == 1
    assert t["cp_bytes"] == 2 * 32 * 7 / 8 * 131072 * 2 * 8 * 128 * 2 == 30_064_771_072
    link = hardware.intra_node_bandwidth(hardware.gpu("H100")) * 0.8
    assert t["cp_s"] == pytest.approx(t["cp_bytes"] / link + 2 * 32 * 7 * 10e-6)
    assert t["step_s"] == pytest.approx(t["compute_s"] + t["cp_s"] + t["dp_exposed_s"])
    # full recompute gathers again in backward; across two nodes (cp 16) the network
    full = step_time(m, replace(c, recompute="full"), global_batch=8, flops_per_token=1.5e11,
                     params=8e9, **COST)
    assert full["cp_bytes"] == 1.5 * t["cp_bytes"]
    wide = step_time(m, Candidate(4, 1, 1, 3, 1, "selective", cp=16), global_batch=4,
                     flops_per_token=1.5e11, params=8e9, **COST)
    assert wide["cp_s"] > 10 * wide["cp_bytes"] / link / 16  # 50 GB/s, not NVLink


def test_ep_volume_is_four_token_all_to_alls_per_moe_layer():
    """mixtral-8x7b (32 MoE layers, top-2, d 4096) at 4096 tokens, ep 8, micro-batch 1:
    dispatch and combine, forward and backward, each sending 4096 x 2 x 4096 x 2 bytes x
    7/8 per rank, + one exchange of the 8 experts' int64 counts per forward."""
    m = replace(preset("mixtral-8x7b"), seq_len=4096)
    experts = memory.expert_params(m)
    assert experts == 32 * 8 * 3 * 4096 * 14336
    c = Candidate(8, 1, 1, 3, 1, "selective", ep=8)
    t = step_time(m, c, global_batch=16, flops_per_token=8e10, params=46.7e9,
                  expert_params=experts, **COST)
    per_call = 4096 * 2 * 4096 * 2 * 7 / 8
    assert t["micro_batches"] == 2
    assert t["ep_bytes"] == 2 * 32 * (4 * per_call + 8 * 8 * 7 / 8)
    assert t["ep_s"] > t["ep_bytes"] / (450e9 * 0.8)
    no_ep = step_time(m, replace(c, ep=1), global_batch=16, flops_per_token=8e10,
                      params=46.7e9, expert_params=experts, **COST)
    assert no_ep["ep_bytes"] == no_ep["ep_s"] == 0
    # the experts' FSDP gathers move 1/ep of them over dp/ep ranks: less traffic
    assert t["dp_comm_s"] < no_ep["dp_comm_s"]


def test_ep_splits_the_experts_states():
    """ZeRO 0: each ep rank holds 1/ep of the experts, everything else whole; ZeRO 3: the
    experts' 1/ep sharded over the dp x cp / ep ranks that hold the same ones, which is
    1/(dp x cp) again."""
    total, experts = 46.7e9, 45.1e9
    kw = dict(precision="bf16-mixed", optimizer="adamw")
    whole = memory.model_state_bytes(total, par=memory.Parallel(dp=8), **kw)
    split = memory.model_state_bytes(total, par=memory.Parallel(dp=8, ep=8),
                                     expert_params=experts, **kw)
    assert sum(split.values()) == pytest.approx(16 * (total - experts + experts / 8))
    assert sum(whole.values()) == pytest.approx(16 * total)
    z3 = memory.model_state_bytes(total, par=memory.Parallel(dp=8, zero=3, ep=8),
                                  expert_params=experts, **kw)
    assert sum(z3.values()) == pytest.approx(16 * total / 8)


MIXTRAL_LORA = ["--model", "mixtral-8x7b", "--tokens", "1T", "--gpus", "64xH100",
                "--lora-rank", "8"]


def test_ep_splits_the_experts_adapters_and_trains_only_them():
    """--lora-targets experts under ep 8, ZeRO 0 (bf16: 2-byte weights and gradients):
    each rank holds 1/8 of the frozen experts and 1/8 of their adapters (llmtk train
    places the adapters with their experts), and trains only the adapters. Before, the
    adapters were counted whole on every rank, and with LoRA the frozen experts were
    counted as trained, taken off the adapters: negative gradients (-79 GB)."""
    m = preset("mixtral-8x7b")
    experts = memory.expert_params(m)
    adapters = 8 * 32 * 8 * 3 * (4096 + 14336)  # rank x layers x experts x (A + B)
    assert memory.expert_adapter_params(m, 8, targets=("experts",)) == adapters
    one, split = (run_json(*MIXTRAL_LORA, "--lora-targets", "experts", "--ep", ep)
                  for ep in ("1", "8"))
    total = one["model"]["params"]
    assert one["memory"]["gradients"] == 2 * adapters
    assert split["memory"]["gradients"] == 2 * adapters / 8
    assert split["memory"]["optimizer"] == 8 * adapters / 8  # AdamW's m and v, fp32
    assert split["memory"]["weights"] == pytest.approx(
        2 * (total - experts + (experts + adapters) / 8), rel=1e-12)
    # the default targets adapt no routed expert: ep leaves their adapters whole
    attn = run_json(*MIXTRAL_LORA, "--ep", "8")["memory"]
    assert attn["gradients"] == run_json(*MIXTRAL_LORA)["memory"]["gradients"] > 0


def test_estimate_holds_the_experts_adapters_as_the_dry_run_does(monkeypatch):
    """What estimate counts for llmtk train's rank (its `llmtk_train_total`) under ep 8 with
    adapters on the experts: the states and FSDP2's gather buffers (1 of the 8 experts'
    adapters per MoE block, before: all 8, 12 MB over) are the dry run's, to the byte."""
    from llmtk.commands.train import plan_rows
    from llmtk.estimate import plan
    from llmtk.train.config import TrainConfig
    from llmtk.train.layout.dryrun import dry_run

    cfg = TrainConfig(model="mixtral-8x7b", ep=8, parallel="fsdp", dtype="bf16",
                      lora_rank=8, lora_targets="experts")
    row = plan_rows(dry_run(cfg, 64), "H100", True)["rows"][0]
    seen = {}
    counted = plan._memory

    def llmtk_trains(*args, **kw):  # what estimate counts as llmtk train holds it
        out = counted(*args, **kw)
        if kw.get("llmtk_model"):
            seen.update(out)
        return out

    monkeypatch.setattr(plan, "_memory", llmtk_trains)
    estimate(Request(model="mixtral-8x7b", gpus="64xH100", ep=8, zero=3, lora_rank=8,
                     lora_targets="experts", micro_batch=cfg.batch_size,
                     global_batch=cfg.batch_size * 64))
    for part in ("weights", "gradients", "optimizer", "fsdp_buffers"):
        assert seen[part] == pytest.approx(row[part], rel=1e-12), part


def test_moe_interface_keeps_total_and_active_params_and_prices_ep():
    r = run_json("--model", "mixtral-8x7b", "--tokens", "1T", "--gpus", "64xH100")
    assert r["model"]["params"] == pytest.approx(46.70e9, rel=0.005)
    assert r["model"]["active_params"] == pytest.approx(12.88e9, rel=0.005)
    z3 = ["--model", "mixtral-8x7b", "--tokens", "1T", "--gpus", "64xH100", "--zero", "3"]
    e, one = run_json(*z3, "--ep", "8"), run_json(*z3)
    assert e["run"]["ep"] == 8 and e["step"]["ep_bytes"] > 0 and one["step"]["ep_bytes"] == 0
    # FSDP gathers a MoE block with the rank's 1 expert of 8 instead of all 8
    assert e["memory"]["fsdp_buffers"] < one["memory"]["fsdp_buffers"] / 3
    assert e["memory"]["model_states"] == pytest.approx(one["memory"]["model_states"])


@pytest.mark.parametrize("args,message", [
    (["--model", "llama3-8b", "--ep", "2", "--gpus", "8xH100"],
     "--ep: 2 needs a mixture-of-experts model"),
    (["--model", "deepseek-v3", "--ep", "8", "--gpus", "64xH800"],
     "the deepseek-v3 preset carries its published counts, not its experts' shape"),
    (["--model", "mixtral-8x7b", "--ep", "16", "--gpus", "16xH100"],
     "--ep: 16 does not divide the model's 8 experts"),
    (["--model", "llama3-8b", "--cp", "3", "--gpus", "6xH100"],
     "--cp: 3 does not split the 8192-token sequence"),
    (["--model", "llama3-8b", "--cp", "8", "--gpus", "4xH100"],
     "--gpus: 4 GPUs are not a multiple of tp x pp x cp = 8"),
])
def test_bad_cp_and_ep_are_one_line_errors(args, message):
    p = llmtk("estimate", *args, in_process=True)
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert message in err, err


# --- the search, with llmtk train's rules ----------------------------------------------

def solve(*args):
    return run_json(*args, "--solve", "layout")


def test_solve_picks_cp_when_the_sequence_does_not_fit_one_gpu():
    """llama3-8b at 256K on 64 H100s: even with full recompute one GPU cannot hold a
    sequence (its checkpointed inputs and the one recomputed layer), so the answer splits
    it; at 8K the fastest layout has no cp (it only adds traffic)."""
    r = solve("--model", "llama3-8b", "--seq-len", "262144", "--tokens", "1T",
              "--gpus", "64xH100")
    c = r["solve"]["chosen"]
    assert c["cp"] > 1 and c["cp_bytes"] > 0 and r["run"]["cp"] == c["cp"]
    assert c["memory_bytes"] <= 85.9e9
    no_cp = estimate(Request(model="llama3-8b", dims=replace(_dims(), seq_len=262144),
                             tokens=1e12, gpus="64xH100", zero=3, recompute="full"))
    assert no_cp["memory"]["llmtk_train_total"] > no_cp["memory"]["capacity"]
    short = solve("--model", "llama3-8b", "--tokens", "1T", "--gpus", "64xH100")
    assert short["solve"]["chosen"]["cp"] == 1


def _dims():
    from llmtk.compute.models import Dims

    return Dims()


def test_solve_asks_the_trainers_rules(monkeypatch):
    """The search accepts what train's check_model accepts: teach it a rule (no cp above
    2) and the answer follows; MoE layouts are those check_model lets through."""
    from llmtk.errors import ConfigError
    from llmtk.train.layout import mesh

    real = mesh.check_model

    def at_most_cp2(layout, mcfg):
        if layout.cp > 2:
            raise ConfigError("cp", "at most 2 in this test")
        real(layout, mcfg)
    monkeypatch.setattr(mesh, "check_model", at_most_cp2)
    r = solve("--model", "llama3-8b", "--seq-len", "262144", "--tokens", "1T",
              "--gpus", "64xH100")
    assert r["solve"]["chosen"]["cp"] == 2
    assert all(a["cp"] <= 2 for a in r["solve"]["alternatives"])
    monkeypatch.setattr(mesh, "check_model", real)
    m = solve("--model", "mixtral-8x7b", "--tokens", "1T", "--gpus", "64xH100",
              "--seq-len", "4096")
    spec = replace(preset("mixtral-8x7b"), seq_len=4096)
    for c in [m["solve"]["chosen"], *m["solve"]["alternatives"]]:
        assert rules.runs(spec, dp=c["dp"], tp=c["tp"], pp=c["pp"], cp=c["cp"], ep=c["ep"],
                          zero=c["zero"])


def test_emitted_cp_config_is_read_by_train(tmp_path):
    """--emit-config writes `cp = N`; train's config reader reads it back with the same
    layout, and train's planner accepts the layout's mesh."""
    from llmtk.train.config import resolve_config, section
    from llmtk.train.layout.mesh import ParallelSpec, plan_layout

    toml = tmp_path / "long.toml"
    p = llmtk("estimate", "--model", "llama3-8b", "--seq-len", "262144", "--tokens", "1T",
              "--gpus", "64xH100", "--solve", "layout", "--emit-config", str(toml), "--json",
              in_process=True)
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["solve"]["chosen"]
    assert f"cp = {c['cp']}" in toml.read_text().splitlines()
    cfg = resolve_config({"dry_run": True}, str(toml))
    assert (cfg.cp, cfg.tp, cfg.pp, cfg.dp_shard, cfg.seq_len) == \
        (c["cp"], c["tp"], c["pp"], c["dp"], 262144)
    _, layout = plan_layout(64, section(ParallelSpec, cfg))
    assert (layout.cp, layout.dp_shard) == (c["cp"], c["dp"])


def test_emitted_ep_config_is_read_by_train(tmp_path, monkeypatch):
    """`ep = N` written and read back. check_model refuses ep > 1 until expert
    parallelism is built in train (its own branch): the test stands in train's verdict
    that accepts it, so the writer and the reader are what is checked here."""
    from llmtk.estimate import emit
    from llmtk.train.config import resolve_config

    monkeypatch.setattr(emit.rules, "refusal", lambda spec, **layout: None)
    toml = tmp_path / "moe.toml"
    p = llmtk("estimate", "--model", "mixtral-8x7b", "--tokens", "1T", "--gpus", "64xH100",
              "--ep", "8", "--zero", "3", "--emit-config", str(toml), in_process=True)
    assert p.returncode == 0, p.stderr
    text = toml.read_text()
    assert "ep = 8" in text.splitlines() and "(ep 8)" in text.splitlines()[0]
    cfg = resolve_config({"dry_run": True}, str(toml))
    assert (cfg.ep, cfg.dp_shard, cfg.model) == (8, 64, "mixtral-8x7b")
