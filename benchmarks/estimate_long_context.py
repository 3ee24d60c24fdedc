"""The long-context plans of docs/train.md ("Planning a long-context run"), reproduced.

1. llama3-8b at 128K context on 64 H100s (Llama 3's 16M tokens per step: 128 sequences;
   ~800B tokens): what `llmtk estimate --solve layout` answers, and the layouts it
   weighed, each priced with the layout given.
2. llama3-405b at 128K on 16,384 H100s: the answer next to Llama 3's published 128K layout
   ("The Llama 3 Herd of Models", Table 4: TP 8, CP 16, PP 16, DP 8; 380 TFLOPs/GPU).

No GPU and no measurement: every number is the cost model's (docs/estimate.md). In-process,
a second or two.

Reproduce:  PYTHONPATH=. .venv/bin/python benchmarks/estimate_long_context.py
"""

from __future__ import annotations

from llmtk.compute.models import Dims
from llmtk.estimate.plan import Request, estimate

SEQ = 131072
EIGHT_B = dict(model="llama3-8b", dims=Dims(seq_len=SEQ), tokens=800e9, gpus="64xH100",
               global_batch=128)
# (dp, tp, pp, cp, recompute): the alternatives the docs table shows
EIGHT_B_LAYOUTS = [(4, 2, 1, 8, "selective"), (2, 8, 1, 4, "selective"),
                   (8, 8, 1, 1, "selective"), (8, 8, 1, 1, "full"), (64, 1, 1, 1, "full"),
                   (8, 1, 1, 8, "full"), (1, 8, 1, 8, "selective")]
BIG = dict(model="llama3-405b", dims=Dims(seq_len=SEQ), tokens=800e9, gpus="16384xH100",
           global_batch=128)
LLAMA3_128K = (8, 8, 16, 16, "full")  # Table 4's TP 8, CP 16, PP 16, DP 8 (full: see docs)


def priced(base: dict, dp: int, tp: int, pp: int, cp: int, recompute: str) -> dict:
    r = estimate(Request(**base, dp=dp, tp=tp, pp=pp, cp=cp, zero=3, recompute=recompute,
                         sequence_parallel=tp > 1))
    step, run = r["step"], r["run"]
    mfu = r["flops"]["total_causal"] / (step["step_s"] * run["steps"] * run["gpus"]
                                        * run["peak_flops_per_gpu"])
    return {"text": step["text"], "gb": r["memory"]["llmtk_train_total"],
            "capacity": r["memory"]["capacity"], "step_s": step["step_s"], "mfu": mfu,
            "cp_s": step["cp_s"], "tp_s": step["tp_s"]}


def line(p: dict) -> str:
    gb = "n/a" if p["gb"] is None else f"{p['gb'] / 1e9:6.1f}"
    fits = "" if p["gb"] is None or p["gb"] <= p["capacity"] else " (does not fit)"
    return (f"  {p['text']:<72} {gb} GB{fits:<15} step {p['step_s']:7.2f} s "
            f"(tp {p['tp_s']:5.2f}, cp {p['cp_s']:5.2f})  MFU {p['mfu']:.1%}")


def solved(base: dict) -> dict:
    r = estimate(Request(**base, solve="layout"))
    return r


def main() -> None:
    r = solved(EIGHT_B)
    s = r["solve"]
    print(f"llama3-8b, seq {SEQ}, 64 x H100, global batch 128: --solve layout answers "
          f"{s['value']} ({s['chosen']['step_s']:.2f} s, "
          f"{s['chosen']['memory_bytes'] / 1e9:.1f} GB, effective MFU "
          f"{s['mfu_effective']:.1%}; {s['fit']} of {s['searched']} layouts fit; "
          f"{r['time']['days']:.1f} days for 800B tokens)")
    for layout in EIGHT_B_LAYOUTS:
        print(line(priced(EIGHT_B, *layout)))
    r = solved(BIG)
    s = r["solve"]
    print(f"\nllama3-405b, seq {SEQ}, 16384 x H100, global batch 128: --solve layout answers "
          f"{s['value']} ({s['chosen']['step_s']:.2f} s, "
          f"{s['chosen']['memory_bytes'] / 1e9:.1f} GB, effective MFU {s['mfu_effective']:.1%})")
    print("Llama 3's 128K layout (Table 4) priced by the same model:")
    print(line(priced(BIG, *LLAMA3_128K)))
    print(line(priced(BIG, *LLAMA3_128K[:4], "selective")))


if __name__ == "__main__":
    main()
