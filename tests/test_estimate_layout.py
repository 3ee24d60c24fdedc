"""`llmtk estimate --solve layout`: the fastest layout that fits, its cost model, and the
TOML it writes, which `llmtk train --config FILE --dry-run` plans."""

import json
import re
from dataclasses import replace

import pytest

from llmtk.compute import hardware
from llmtk.compute.models import preset
from llmtk.estimate.layout import Candidate, candidates, step_time
from tests.util import llmtk

SMALL = ["--layers", "12", "--d-model", "768", "--heads", "12", "--seq-len", "2048",
         "--global-batch", "64"]  # GPT-2 small's shape


def solve(*args: str) -> dict:
    p = llmtk("estimate", *args, "--solve", "layout", "--json", in_process=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_small_model_is_data_parallel_only():
    """Everything fits one GPU: splitting matrices (tp) or layers (pp) only adds
    communication and a bubble, so every GPU holds the whole model's work."""
    r = solve(*SMALL, "--gpus", "8xH100")
    c = r["solve"]["chosen"]
    assert (c["dp"], c["tp"], c["pp"]) == (8, 1, 1)
    assert (r["run"]["dp"], r["run"]["tp"], r["run"]["pp"]) == (8, 1, 1)
    assert c["tp_s"] == 0 and c["bubble"] == 0 and c["memory_bytes"] < 85.9e9
    # the runners-up are slower and differ in more than the micro-batch
    alts = r["solve"]["alternatives"]
    assert alts and all(a["step_s"] >= c["step_s"] for a in alts)
    assert len({(a["dp"], a["tp"], a["pp"], a["zero"], a["recompute"]) for a in alts}) \
        == len(alts)


def test_70b_on_two_nodes_fits_only_with_full_recompute():
    """llama3-70b on 16 H100s: AdamW's 16 bytes per parameter are 70.6 GB per GPU already;
    only full recompute leaves room for the activations."""
    r = solve("--model", "llama3-70b", "--gpus", "16xH100", "--global-batch", "64")
    assert r["solve"]["chosen"]["recompute"] == "full"
    assert {a["recompute"] for a in r["solve"]["alternatives"]} <= {"full"}


def test_a_model_that_fits_no_layout_is_one_line_error():
    p = llmtk("estimate", "--model", "llama3-405b", "--gpus", "8xH100", "--solve", "layout",
              in_process=True)
    err = p.stderr.decode()
    assert p.returncode == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("llmtk: error: --gpus: llama3-405b fits no layout of 8 x H100")
    assert "GB per GPU of 85.9; give more GPUs" in err


@pytest.mark.parametrize("flag,value", [("--tp", "2"), ("--zero", "3"), ("--micro-batch", "2"),
                                        ("--dp", "4")])
def test_layout_flags_are_what_the_solver_chooses(flag, value):
    p = llmtk("estimate", *SMALL, "--gpus", "8xH100", "--solve", "layout", flag, value,
              in_process=True)
    assert p.returncode == 2
    assert f"{flag}: is what --solve layout chooses: leave it out" in p.stderr.decode()


@pytest.mark.parametrize("model", [
    ["--model", "llama3-70b", "--gpus", "256xH100", "--global-batch", "512"],  # tp and pp
    ["--model", "llama2-7b", "--gpus", "8xH100"],  # FSDP with gradient accumulation
    ["--model", "llama3-70b", "--gpus", "16xH100", "--lora-rank", "16"],  # a frozen fp32 base
])
def test_solved_layout_round_trips_through_train_dry_run(tmp_path, model):
    """The TOML of the solved layout is read by train, whose per-rank plan shows the same
    layout and the memory the solver saw."""
    toml = tmp_path / "run.toml"
    if "--global-batch" not in model:
        model = [*model, "--global-batch", "64"]
    p = llmtk("estimate", *model, "--solve", "layout", "--emit-config", str(toml), "--json",
              in_process=True)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    c = r["solve"]["chosen"]
    text = toml.read_text()
    assert f"tp = {c['tp']}" in text.splitlines() and f"pp = {c['pp']}" in text.splitlines()
    assert f"batch-size = {c['micro_batch']}" in text.splitlines()
    assert f"activation-checkpointing = {str(c['recompute'] == 'full').lower()}" in text
    dry = re.search(r"--dry-run --nproc-per-node (\d+) --nnodes (\d+)", text)
    p = llmtk("train", "--config", str(toml), "--dry-run", "--nproc-per-node", dry[1],
              "--nnodes", dry[2], in_process=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert (f"tp {c['tp']}" in out.splitlines()[0]) == (c["tp"] > 1)
    # the solver priced memory as the dry-run does (the llmtk model's own activations)
    # the busiest kind of rank (one, or the first, middle and last pipeline stage)
    rows = [line for line in out.splitlines() if line.endswith((" yes", " NO"))]
    assert len(rows) == (1 if c["pp"] == 1 else min(c["pp"], 3))
    busiest = max(float(line.split()[-3]) for line in rows)
    assert busiest * 1e9 == pytest.approx(c["memory_bytes"], rel=0.005)


def test_fsdp_holds_whole_gradients_only_under_a_pipeline(tmp_path):
    """llmtk train reduce-scatters every micro-step's FSDP gradients: with 4 micro-steps
    nothing is held whole (the dry-run's fsdp_held is 0, as with one). torch's pipeline
    stage defers the reduce-scatter to the last micro-batch, so under --pp 2 each rank
    holds its stage's whole fp32 gradients and gathered weights through the step."""
    def held(accum: int, pp: int) -> float:
        toml = tmp_path / f"a{accum}-{pp}.toml"
        toml.write_text(f'model = "llama2-7b"\nbatch-size = 1\ngrad-accum = {accum}\n'
                        f'dtype = "bf16"\nparallel = "fsdp"\npp = {pp}\ngpu = "H100"\n')
        p = llmtk("train", "--config", str(toml), "--dry-run", "--nproc-per-node", "8",
                  in_process=True)
        assert p.returncode == 0, p.stderr
        lines = p.stdout.decode().splitlines()
        head = lines[1].split()
        return max(float(dict(zip(head[3:], line.split()[3:], strict=False))["fsdp_held"])
                   for line in lines[2:] if "(" in line and line.split()[-1] in ("yes", "NO"))
    assert held(1, 1) == held(4, 1) == 0
    assert held(4, 2) > 10  # GB: 4 bytes x ~3.4B trained x 3/4, and the stage's bf16 weights


# --- the cost model ------------------------------------------------------------------

SPEC = preset("llama3-8b")
COST = dict(global_batch=64, flops_per_token=6 * 8e9, params=8e9, peak=989.4e12, mfu=0.4,
            gpu=hardware.gpu("H100"), per_node=8)


def test_pipeline_bubble_is_1f1b():
    """pp 4 with m = 64 / (dp 4 x micro-batch 2) = 8 micro-batches: (pp-1)/(m+pp-1)."""
    t = step_time(SPEC, Candidate(4, 2, 4, 3, 2, "selective"), **COST)
    assert t["micro_batches"] == 8 and t["bubble"] == pytest.approx(3 / 11)
    assert t["bubble_s"] == pytest.approx((t["compute_s"] + t["tp_s"]) * 3 / 8)


def test_data_parallel_across_nodes_runs_at_network_speed():
    """The same FSDP traffic: inside one node over NVLink, across 2 nodes over the network
    (9x slower per GPU on H100), so the same dp costs more once it spans nodes."""
    inside = step_time(SPEC, Candidate(8, 1, 1, 3, 1, "selective"), **COST)
    across = step_time(SPEC, Candidate(8, 2, 1, 3, 1, "selective"), **COST)
    # tp 2 halves what one dp group gathers, but the network is 9x slower than NVLink
    assert across["dp_comm_s"] > 4 * inside["dp_comm_s"]
    assert inside["tp_s"] == 0 < across["tp_s"]


def test_full_recompute_costs_a_forward_and_more_tensor_parallel_traffic():
    sel = step_time(SPEC, Candidate(4, 2, 1, 3, 1, "selective"), **COST)
    full = step_time(SPEC, Candidate(4, 2, 1, 3, 1, "full"), **COST)
    assert full["compute_s"] == pytest.approx(sel["compute_s"] * 4 / 3)
    assert full["tp_s"] == pytest.approx(sel["tp_s"] * 12 / 8)


def test_candidates_respect_the_node_and_the_model():
    """tp stays inside a node and divides the heads; pp leaves a layer per stage; dp
    divides the global batch; ZeRO 3 only with something to shard over (dp x cp > 1),
    and the only ZeRO under cp; no cp for 8K sequences, up to 16 at 128K (each cp rank
    keeps 8K tokens at least, MIN_CP_TOKENS)."""
    spec = preset("llama3-8b")  # 32 heads, 8 kv heads, 32 layers, seq 8192
    cs = list(candidates(spec, 64, 8, 64))
    assert {c.tp for c in cs} == {1, 2, 4, 8}
    assert max(c.pp for c in cs) == 32
    assert all(64 % c.dp == 0 and (c.zero == 0 or c.dp > 1) for c in cs)
    assert all(c.dp * c.tp * c.pp == 64 for c in cs)
    assert {c.cp for c in cs} == {1} and {c.ep for c in cs} == {1}  # dense
    long = list(candidates(replace(spec, seq_len=131072), 64, 8, 64))
    assert {c.cp for c in long} == {1, 2, 4, 8, 16}
    assert all(c.zero == 3 for c in long if c.cp > 1)
    assert all(c.dp * c.tp * c.pp * c.cp == 64 for c in long)


def test_70b_on_256_h100_in_torchtitans_layout_fits(tmp_path):
    """torchtitan's llama3-70b split (docs/performance.md, Table 4: 256 H100s, global batch
    512, FSDP 32 x TP 8) with micro-batch 1 and 16 micro-steps: the dry-run of that config
    fits with nothing held whole through the micro-steps (llmtk train reduce-scatters each
    one's gradients)."""
    toml = tmp_path / "tt.toml"
    toml.write_text('model = "llama3-70b"\nbatch-size = 1\ngrad-accum = 16\ndtype = "bf16"\n'
                    'tp = 8\nparallel = "fsdp"\ndp-shard = 32\ngpu = "H100"\n')
    p = llmtk("train", "--config", str(toml), "--dry-run", "--nproc-per-node", "8",
              "--nnodes", "32", in_process=True)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    cols = dict(zip(lines[1].split()[3:], lines[2].split()[3:], strict=False))
    assert float(cols["fsdp_held"]) == 0 and lines[2].split()[-1] == "yes"  # fits


def test_lora_layouts_may_split_matrices(tmp_path):
    """llmtk train runs --lora-rank under --tp, so the solver searches tp for LoRA too (it
    kept tp 1 when train refused the pair): llama3-70b's LoRA on 16 H100s is fastest on
    tp 8 without recompute (its activations split over tp as train's do: the frozen norms'
    and the head's too), and the config it writes is one `llmtk train` plans."""
    r = solve("--model", "llama3-70b", "--lora-rank", "16", "--gpus", "16xH100")
    chosen = r["solve"]["chosen"]
    assert (chosen["dp"], chosen["tp"], chosen["pp"], chosen["recompute"]) == (
        2, 8, 1, "selective")
    toml = tmp_path / "lora.toml"
    p = llmtk("estimate", "--model", "llama3-70b", "--lora-rank", "16", "--gpus", "16xH100",
              "--solve", "layout", "--emit-config", str(toml), in_process=True)
    assert p.returncode == 0, p.stderr
    assert {"tp = 8", "lora-rank = 16"} <= set(toml.read_text().splitlines())
    p = llmtk("train", "--config", str(toml), "--dry-run", "--nproc-per-node", "8",
              "--nnodes", "2", in_process=True)
    assert p.returncode == 0, p.stderr


def test_no_pipeline_layout_with_fewer_micro_batches_than_stages():
    """train's 1F1B needs a micro-batch per stage: with 2 sequences per step on 16 GPUs
    the solver offered pp 4 and pp 8 layouts of 1 or 2 micro-batches, which
    --emit-config then refused and `llmtk train` would refuse."""
    r = solve("--model", "llama3-70b", "--gpus", "16xH100", "--global-batch", "2")
    rows = [r["solve"]["chosen"], *r["solve"]["alternatives"]]
    assert all(x["micro_batches"] >= x["pp"] for x in rows)


def test_a_size_without_a_shape_cannot_be_laid_out():
    p = llmtk("estimate", "--params", "7e9", "--gpus", "8xH100", "--solve", "layout",
              in_process=True)
    assert p.returncode == 2
    assert p.stderr.decode() == ("llmtk: error: --solve: layout needs the model's shape "
                                 "(--model or --layers/--d-model/--heads), not only --params\n")


def test_a_pipeline_whose_stages_share_a_node_still_sends_across_nodes():
    """16 GPUs, pp 8 x tp 2: a stage is 2 GPUs, four stages per node, and the send from
    stage 3 to stage 4 crosses from one node to the other; every micro-batch waits for
    the slowest boundary, so the sends run at the network's speed."""
    t = step_time(SPEC, Candidate(1, 2, 8, 0, 1, "selective"), **COST)
    act = 1 * SPEC.seq_len * SPEC.d_model * 2 / 2  # the rank's 1/tp of a (b, s, h) tensor
    m = t["micro_batches"]
    assert t["pp_s"] == pytest.approx(2 * m * act / (hardware.INTER_NODE * 0.8)
                                      + 2 * m * 20e-6)


def test_a_steps_gradient_reduction_hides_only_behind_the_last_backward():
    """llmtk train syncs gradients once per step, in the last micro-step's backward (DDP's
    buckets, FSDP's reduce-scatter), so only that backward can hide it, not the whole
    step's compute; under a pipeline torch reduces after the last micro-batch: exposed."""
    # dp 16 across two nodes, 4 micro-steps: an 8B fp32 all-reduce over the network
    t = step_time(SPEC, Candidate(16, 1, 1, 0, 1, "selective"), **COST)
    last_backward = t["compute_s"] / t["micro_batches"] * 2 / 3
    assert t["dp_comm_s"] < t["compute_s"]  # the old model hid all of it
    assert t["dp_exposed_s"] == pytest.approx(t["dp_comm_s"] - last_backward)
    # one link carries it all: the traffic the compute hides is at most the compute
    big = step_time(SPEC, Candidate(16, 1, 1, 3, 4, "selective"), **{**COST, "params": 80e9})
    assert big["dp_exposed_s"] == pytest.approx(big["dp_comm_s"] - big["compute_s"])
    p = step_time(SPEC, Candidate(2, 1, 8, 3, 1, "selective"), **COST)
    gathers = p["dp_comm_s"] - p["dp_reduce_s"]
    assert p["dp_exposed_s"] == pytest.approx(p["dp_reduce_s"] + max(0.0, gathers
                                                                      - p["compute_s"]))


def test_a_given_recompute_is_honoured():
    """--recompute full limits the search to full-recompute layouts; none is refused (in
    llmtk train it is selective: SDPA never stores the attention scores)."""
    r = solve("--model", "llama2-7b", "--gpus", "8xH100", "--global-batch", "64",
              "--recompute", "full")
    assert {a["recompute"] for a in [r["solve"]["chosen"], *r["solve"]["alternatives"]]} \
        == {"full"}
    p = llmtk("estimate", *SMALL, "--gpus", "8xH100", "--solve", "layout", "--recompute",
              "none", in_process=True)
    assert p.returncode == 2
    assert p.stderr.decode().startswith("llmtk: error: --recompute: none is selective in "
                                        "llmtk train")


def test_the_run_says_where_the_solved_global_batch_is_from():
    # the solver fills the request's global batch in; the run's table must not read it as
    # given (its pipeline-bubble line asks for --global-batch when it was not)
    r = solve("--model", "llama3-8b", "--gpus", "16xH100")
    assert r["run"]["global_batch_from"] == r["solve"]["global_batch_from"] == (
        "one sequence per GPU (default)")
    r = solve("--model", "llama3-8b", "--gpus", "16xH100", "--global-batch", "64")
    assert r["run"]["global_batch_from"] == "--global-batch"
