"""Whether `llmtk train` runs a layout: its own rules, asked, never copied.

`--solve layout` and `--emit-config` accept or refuse a (dp, tp, pp, cp, ep, ZeRO) layout of
a model with the trainer's torch-free checks: `plan_layout` (the mesh's arithmetic: the
degrees divide the world, ep divides dp_shard x cp) and `check_model` (the model splits
evenly: heads, widths, vocabulary and sequence over tp; experts over ep; MoE under tp or
pp; pipeline stages). So what the estimate recommends is what the trainer accepts, and a
rule the trainer gains or drops (context or expert parallelism built) changes the search
without an edit here. This is the one module of llmtk.estimate that imports llmtk.train
(pyproject's import-linter exception says so).
"""

from __future__ import annotations

from llmtk.errors import ConfigError


def parallel_spec(*, dp: int, tp: int, pp: int, cp: int, ep: int, zero: int):
    """The `llmtk train` parallel section that runs this layout: FSDP2 over every data-
    parallel rank for ZeRO 3; ZeRO 0 as DDP (no mesh) or, on a tp/pp/cp mesh, replicas
    (dp_replicate) each whole on its mesh. Mirrors emit.train_config's keys."""
    from llmtk.train.layout.mesh import ParallelSpec

    if zero == 3:
        return ParallelSpec(parallel="fsdp", tp=tp, pp=pp, dp_replicate=1, dp_shard=dp,
                            cp=cp, ep=ep)
    if tp * pp * cp * ep == 1:
        return ParallelSpec(parallel="ddp")
    return ParallelSpec(parallel="fsdp", tp=tp, pp=pp, dp_replicate=dp, dp_shard=1, cp=cp,
                        ep=ep)


def refusal(spec, *, dp: int, tp: int, pp: int, cp: int = 1, ep: int = 1,
            zero: int = 3) -> ConfigError | None:
    """The ConfigError llmtk train raises for this layout of ModelSpec `spec` (a trainable,
    Llama-style shape), or None when it plans it."""
    from llmtk.train.layout.mesh import check_model, plan_layout
    from llmtk.train.model.config import config_from_spec

    world = dp * tp * pp * cp
    try:
        _, layout = plan_layout(world, parallel_spec(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep,
                                                     zero=zero))
        check_model(layout, config_from_spec(spec))
    except ConfigError as e:
        return e
    return None


def runs(spec, **layout) -> bool:
    """Whether llmtk train plans this layout of `spec` (refusal is None)."""
    return refusal(spec, **layout) is None
