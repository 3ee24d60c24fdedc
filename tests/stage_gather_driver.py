"""Two pipeline stages gathered to rank 0, for tests/test_train_whole.py:
python -m torch.distributed.run --nproc-per-node=2 -m tests.stage_gather_driver OUT.json

Each rank holds one stage of the same GPT (seeded alike): rank 0 the embedding and layer
0, rank 1 layer 1, the norm and the (tied) head, under the names the whole model has.
Rank 0 gathers them with llmtk.train.whole.gather_state (Layout(pp=2)), builds the whole
model and writes how far its logits are from the unsplit model's."""

import json
import sys

import torch
import torch.distributed as tdist
from torch import nn

from llmtk.train.model import GPT, ModelConfig
from llmtk.train.parallel import Layout
from llmtk.train.whole import build_whole, gather_state

CFG = ModelConfig(vocab_size=257, n_layer=2, d_model=32, n_head=4, seq_len=16)


def main(out: str) -> None:
    tdist.init_process_group("gloo")
    rank = tdist.get_rank()
    host = tdist.new_group(backend="gloo")
    torch.manual_seed(0)
    whole = GPT(CFG)
    stage = GPT(CFG)
    stage.load_state_dict(whole.state_dict())
    stage.layers = nn.ModuleDict({str(rank): stage.layers[rank]})  # keys layers.<i>.
    if rank == 0:
        del stage.norm, stage.lm_head
    else:
        del stage.tok_emb
    state = gather_state(stage, Layout(pp=2), rank, host)
    if rank == 0:
        x = torch.randint(0, CFG.vocab_size, (2, 12))
        copy = build_whole(CFG, state, "cpu")
        diff = (copy(x)[0] - whole.eval()(x)[0]).abs().max().item()
        with open(out, "w") as f:
            json.dump({"keys": sorted(state), "max_diff": diff}, f)
    else:
        assert state is None
    tdist.barrier()
    tdist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
