"""What the checkpoint manifest costs: xxh64 of every file read back after it is written
(llmtk.train.checkpoint.files.write_manifest), against writing the same files (torch.save and
fsync, the checkpointer's write_file) — the peer is the save itself.

    nice python benchmarks/checkpoint_manifest.py [--mb 400] [--dir /tmp]

Writes a model-like state dict of MB megabytes (model.pt) and an optimizer-like one of
twice that (optim.pt, AdamW's two moments) into a temporary directory, five times, and
prints the median wall and CPU seconds of the save and of the manifest, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    import torch

    from llmtk.train.checkpoint import files as C

    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=400)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    n = args.mb * 1_000_000 // 4 // 16
    model = {f"w{i}": torch.randn(n) for i in range(16)}
    optim = {f"w{i}.{m}": torch.randn(n) for i in range(16) for m in ("exp_avg", "exp_avg_sq")}
    saves, manifests = [], []
    for _ in range(args.repeats):
        d = tempfile.mkdtemp(dir=args.dir)
        try:
            saves.append(timed(lambda d=d: (C.save_torch(model, os.path.join(d, "model.pt")),
                                            C.save_torch(optim, os.path.join(d, "optim.pt")))))
            manifests.append(timed(lambda d=d: C.write_manifest(d)))
        finally:
            shutil.rmtree(d)
    total = 3 * args.mb
    sw, sc = (statistics.median(x[i] for x in saves) for i in (0, 1))
    mw, mc = (statistics.median(x[i] for x in manifests) for i in (0, 1))
    print(f"{total} MB checkpoint, median of {args.repeats}: save (torch.save + fsync) "
          f"{sw:.3f} s wall / {sc:.3f} s CPU; manifest (xxh64 read-back) {mw:.3f} s wall / "
          f"{mc:.3f} s CPU ({total / 1000 / mw:.1f} GB/s); manifest/save wall "
          f"{mw / sw:.1%}, CPU {mc / sc:.1%}")


if __name__ == "__main__":
    main()
