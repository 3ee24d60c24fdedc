"""Parallel layouts and their application to the model: the device mesh and its checks
(`mesh.py`), the run plan resolved once (`plan.py`), the one order that builds the model
for it (`parallelize.py`) with tensor parallelism (`tensor_parallel.py`) and pipeline
stages (`pipeline.py`), what each rank holds (`dryrun.py`, `--dry-run`) and the whole
model gathered for sampling and task evaluation (`whole.py`).

Below the trainer: nothing here imports the loop or its components (the import-linter
contract in pyproject.toml).
"""
