"""How offline-run-*/run-*.wandb was made (wandb 0.31.0, `pip install wandb`, no account):

    WANDB_SILENT=true python make_offline_run.py   # then keep only the run-*.wandb file

200 steps of train/loss (NaN at step 150), train/lr, train/grad_norm, tokens, and eval/loss
every 50 steps. Not run by the tests: they read the file it wrote.
"""
import math

import wandb

run = wandb.init(mode="offline", project="llmtk-test", dir="/tmp/wbtest", config={"lr": 1e-3},
                 settings=wandb.Settings(x_disable_stats=True, x_disable_meta=True, console="off",
                                         save_code=False, disable_git=True))
for s in range(200):
    row = {"train/loss": 3 + 4 * math.exp(-s / 40), "train/lr": 1e-3, "train/grad_norm": 0.5,
           "tokens": s * 1024}
    if s == 150:
        row["train/loss"] = float("nan")
    if s % 50 == 49:
        row["eval/loss"] = 3.2 + 4 * math.exp(-s / 40)
    run.log(row, step=s)
run.finish()
