"""The placement table (llmtk/compute/placement.py) is what tensor parallelism applies:
every parameter apply_tp places, LoRA adapters included, is split along the dimension
the table names (or whole where it names none), and the dry run counts one tp rank's
elements from the same table. One process: a tp mesh of size 1 keeps the placements."""

import pytest
import torch

from llmtk.compute.placement import tp_dim, tp_elements
from llmtk.train.model.gpt import GPT, ModelConfig
from llmtk.train.model.lora import add_lora

CFG = ModelConfig(vocab_size=257, n_layer=2, d_model=32, n_head=4, n_kv_head=2, seq_len=16)


@pytest.mark.parametrize("tied", [True, False])
def test_apply_tp_places_every_parameter_where_the_table_says(tmp_path, tied):
    from dataclasses import replace

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard

    from llmtk.train.layout.tensor_parallel import apply_tp

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        with torch.device("meta"):
            model = GPT(replace(CFG, tie_embeddings=tied))
        add_lora(model, 2, targets="q,k,v,o,gate,up,down")
        apply_tp(model, init_device_mesh("cpu", (1,), mesh_dim_names=("tp",)))
        seen = set()
        for name, p in model.named_parameters():
            dim = tp_dim(name)
            assert p.placements == ((Replicate(),) if dim is None else (Shard(dim),)), name
            seen.add(dim)
        assert seen == {None, 0, 1}  # whole, column- and row-wise splits all occur
    finally:
        dist.destroy_process_group()


def test_one_tp_rank_holds_the_split_share_of_each_parameter():
    model = GPT(CFG)
    add_lora(model, 4)
    held = {name: tp_elements(name, p.numel(), 4) for name, p in model.named_parameters()}
    assert held["layers.0.attn_norm.weight"] == CFG.d_model  # norms whole
    assert held["tok_emb.weight"] == model.tok_emb.weight.numel() / 4
    # column-wise base: A whole, B split; row-wise base: A split, B whole
    assert held["layers.1.attn.wqkv.lora_A.q"] == 4 * CFG.d_model
    assert held["layers.1.attn.wqkv.lora_B.k"] == model.layers["1"].attn.wqkv.lora_B["k"] \
        .numel() / 4
    assert held["layers.1.mlp.w2.lora_A.down"] == 4 * CFG.hidden / 4
    assert held["layers.1.mlp.w2.lora_B.down"] == CFG.d_model * 4
