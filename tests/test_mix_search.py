"""`llmtk mix search`: sampled mixtures, proxy trainings as real `llmtk train` processes,
the fit and the proposal. Three real sources of different kinds (the standard library's
docstrings, its source code, and Unicode character names); the target validation set is
more Unicode names, from code points none of the sources holds, so the right answer is
known: the names source gets the largest weight."""

import json
import os
import shutil
import sys
import tomllib

import numpy as np
import pytest

from benchmarks.mix_search import code, docstrings, names
from llmtk.mix.fit import (
    Boosted,
    LogLinear,
    PerSet,
    Quadratic,
    choose,
    minimise,
    models,
    spearman,
)
from llmtk.mix.simplex import project, sample
from tests.test_cluster import _fake_sbatch
from tests.util import env, llmtk, popen_module

PROXY = """\
layers = 2
d_model = 32
heads = 2
seq_len = 64
batch_size = 8
steps = 20
warmup = 2
lr = 3e-3
log_every = 10
eval_batches = 4
seed = 0
threads = 1
"""
TRIALS = 6


def _dataset(root, name, texts):
    path = root / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = root / "tok" / name
    llmtk("train", "tokenize", str(path), "-o", str(out), "-q", in_process=True, check=True)
    return str(out)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixsearch")
    sources = {
        "prose": _dataset(root, "prose", docstrings(["json", "csv", "argparse", "logging"])),
        "code": _dataset(root, "code", code(["json.decoder", "csv", "argparse", "textwrap"])),
        "names": _dataset(root, "names", names(0x100, 0x2000)),
    }
    target = _dataset(root, "target", names(0x2100, 0x3100))  # held-out code points
    proxy = root / "proxy.toml"
    proxy.write_text(PROXY)
    return root, sources, target, str(proxy)


def _search(corpus, out, *extra, **environ):
    root, sources, target, proxy = corpus
    return llmtk("mix", "search", *(f"{n}={p}" for n, p in sources.items()), "--val", target,
                 "--trials", str(TRIALS), "--config", proxy, "--out", str(out), "--jobs", "2",
                 *extra, real=True, **environ)


@pytest.fixture(scope="module")
def searched(corpus):
    out = corpus[0] / "search"
    result = _search(corpus, out)
    assert result.returncode == 0, result.stderr.decode()
    return out, result


def _rows(out):
    return [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]


@pytest.mark.integration
@pytest.mark.slow
def test_proposal_gives_the_target_source_the_largest_weight(searched, corpus):
    out, result = searched
    proposal = tomllib.loads((out / "proposal.toml").read_text())
    weights = {}
    for entry in proposal["data"]:
        name, _, rest = entry.partition("=")
        path, _, w = rest.rpartition(":")
        assert path == corpus[1][name]
        weights[name] = float(w)
    assert set(weights) == set(corpus[1])
    assert max(weights, key=weights.get) == "names"
    assert abs(sum(weights.values()) - 1) < 1e-3
    rows = _rows(out)
    assert [r["trial"] for r in rows] == list(range(TRIALS))
    for r in rows:
        assert set(r["weights"]) == set(corpus[1]) and r["val_loss"] == r["objective"]
        assert r["val_loss"] == r["val/target/loss"]
    # the trials differ: the names-heavy ones score best on the names target
    best = min(rows, key=lambda r: r["val_loss"])
    assert max(best["weights"], key=best["weights"].get) == "names"
    assert (out / "search.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"Spearman" in result.stderr and b"proposal" in result.stderr
    assert b"6 trials: too few for RegMix's regression" in result.stderr
    # the search's price: the proxy as `llmtk train` builds it (2 x 32, byte vocabulary)
    assert b"proxy: 45,216 parameters, 10,240 tokens; 6 trials" in result.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_rerun_redoes_only_the_trial_whose_results_are_gone(searched, tmp_path, corpus):
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    before = _rows(out)
    kept = os.stat(out / "trials" / "00000" / "metrics.jsonl").st_mtime_ns
    shutil.rmtree(out / "trials" / "00003")  # as if killed before it finished
    result = _search(corpus, out)
    assert result.returncode == 0, result.stderr.decode()
    assert f"1 of {TRIALS} trial(s) to run".encode() in result.stderr
    assert os.stat(out / "trials" / "00000" / "metrics.jsonl").st_mtime_ns == kept
    after = _rows(out)
    # the redone trial trains as it did the first time: same seed, same data order
    assert after[3]["val_loss"] == pytest.approx(before[3]["val_loss"], rel=1e-6)
    assert [r["weights"] for r in after] == [r["weights"] for r in before]
    # the rows read back from trial.json keep the first run's bytes
    assert (out / "trials.jsonl").read_bytes() == (searched[0] / "trials.jsonl").read_bytes()


@pytest.mark.integration
@pytest.mark.slow
def test_a_search_stopped_half_way_finishes_only_the_rest_with_the_same_results(
        searched, tmp_path, corpus):
    import signal
    import time

    root, sources, target, proxy = corpus
    out = tmp_path / "search"
    search = popen_module("llmtk", [
        "mix", "search", *(f"{n}={p}" for n, p in sources.items()), "--val", target,
        "--trials", str(TRIALS), "--config", proxy, "--out", str(out), "--jobs", "1"], env())
    while not (out / "trials" / "00002" / "metrics.jsonl").exists():  # trial 2 under way
        assert search.poll() is None, "the search ended before it was stopped"
        time.sleep(0.05)
    search.send_signal(signal.SIGTERM)  # it stops its running trial (which checkpoints)
    assert search.wait() == 128 + signal.SIGTERM
    assert not (out / "trials.jsonl").exists()
    result = _search(corpus, out)
    assert result.returncode == 0, result.stderr.decode()
    left = int(result.stderr.split(b" of 6 trial(s) to run")[0].split()[-1])
    assert 1 <= left <= TRIALS - 2  # trials 0 and 1 were done
    # the trial stopped half-way resumes from its checkpoint, bit for bit
    assert (out / "trials.jsonl").read_bytes() == (searched[0] / "trials.jsonl").read_bytes()
    for log in (out / "trials").glob("*/metrics.jsonl"):  # usually trial 2: stopped, resumed
        events = [json.loads(x).get("event") for x in log.read_text().splitlines()]
        if "preempt" in events:
            assert "resume" in events[events.index("preempt"):], log


@pytest.mark.integration
@pytest.mark.slow
def test_trials_run_as_a_slurm_array_with_the_results_of_local_runs(searched, tmp_path, corpus):
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    before = _rows(out)
    for k in (1, 4):
        shutil.rmtree(out / "trials" / f"0000{k}")
    environ = _fake_sbatch(tmp_path, base={})  # the stand-in sbatch runs the array here
    result = _search(corpus, out, "--executor", "slurm", PATH=environ["PATH"],
                     SBATCH_LOG=environ["SBATCH_LOG"])
    assert result.returncode == 0, result.stderr.decode()
    assert b"sbatch --wait --array=1,4 --cpus-per-task=1" in result.stderr
    script = out / "trials" / "array.sbatch"
    assert (tmp_path / "log").read_text().split() == [str(script.resolve())]
    after = _rows(out)
    for k in (1, 4):
        assert after[k]["val_loss"] == pytest.approx(before[k]["val_loss"], rel=1e-6)
    assert (out / "proposal.toml").read_text() == (searched[0] / "proposal.toml").read_text()


@pytest.mark.integration
@pytest.mark.slow
def test_trials_run_as_ray_tasks_with_the_results_of_local_runs(searched, tmp_path, corpus):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'llmtk[ray]')")
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    before = _rows(out)
    for k in (2, 5):
        shutil.rmtree(out / "trials" / f"0000{k}")
    result = _search(corpus, out, "--executor", "ray")  # a local Ray instance, 2 CPUs
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert b"2 of 6 trial(s) to run" in result.stderr
    after = _rows(out)
    for k in (2, 5):
        assert after[k]["val_loss"] == pytest.approx(before[k]["val_loss"], rel=1e-6)
    assert (out / "proposal.toml").read_text() == (searched[0] / "proposal.toml").read_text()


@pytest.mark.integration
@pytest.mark.slow
def test_verify_trains_the_proposal_and_its_neighbours_once(searched, tmp_path, corpus):
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    result = _search(corpus, out, "--verify", "2")
    assert result.returncode == 0, result.stderr.decode()
    assert b"0 of 6 trial(s) to run" not in result.stderr  # nothing to say: all done
    assert b"2 of 2 verify run(s) to run" in result.stderr
    rows = [json.loads(x) for x in (out / "verify.jsonl").read_text().splitlines()]
    proposal = {e.split("=")[0]: float(e.rsplit(":", 1)[1])
                for e in tomllib.loads((out / "proposal.toml").read_text())["data"]}
    assert [r["proposal"] for r in rows] == [True, False]
    assert rows[0]["weights"] == proposal and rows[1]["weights"] != proposal
    for r in rows:  # measured by a real proxy run, beside the fit's prediction
        assert r["val_loss"] > 0 and r["predicted"] > 0 and r["val_loss"] != r["predicted"]
    again = _search(corpus, out, "--verify", "2")
    assert again.returncode == 0 and b"verify run(s) to run" not in again.stderr
    assert [json.loads(x) for x in (out / "verify.jsonl").read_text().splitlines()] == rows


@pytest.mark.integration
@pytest.mark.slow
def test_a_failed_trial_is_reported_and_left_out(searched, tmp_path, corpus):
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    broken = out / "trials" / "00004"
    shutil.rmtree(broken)
    broken.mkdir()
    (broken / "checkpoints").write_text("")  # train cannot make its checkpoint folder: fails
    result = _search(corpus, out)
    assert result.returncode == 0, result.stderr.decode()
    assert b"trial 4 left out" in result.stderr
    assert [r["trial"] for r in _rows(out)] == [0, 1, 2, 3, 5]
    assert (out / "proposal.toml").exists()


@pytest.mark.integration
@pytest.mark.slow
def test_other_settings_in_the_same_folder_are_refused(searched, corpus, tmp_path):
    out = tmp_path / "search"
    shutil.copytree(searched[0], out)
    result = llmtk("mix", "search", *(f"{n}={p}" for n, p in corpus[1].items()), "--val",
                   corpus[2], "--trials", str(TRIALS + 1), "--config", corpus[3], "--out",
                   str(out), in_process=True)
    assert result.returncode == 2
    assert b"other trials" in result.stderr


def test_bad_usage_is_one_line(corpus, tmp_path):
    root, sources, target, proxy = corpus
    args = ["--val", target, "--config", proxy, "--out", str(tmp_path / "s")]
    one = llmtk("mix", "search", f"code={sources['code']}", *args, in_process=True)
    assert one.returncode == 2 and b"at least two sources" in one.stderr
    many = [f"{n}={p}" for n, p in sources.items()]
    tight = llmtk("mix", "search", *many, *args, "--max-epochs", "0.01", in_process=True)
    assert tight.returncode == 2 and b"no mixture fits" in tight.stderr
    low = llmtk("mix", "search", *many, *args, "--min-weight", "0.5", in_process=True)
    assert low.returncode == 2 and b"--min-weight: the lower bounds add up to 1.5" in low.stderr
    not_tokens = llmtk("mix", "search", *many[:2], f"x={root}", *args, in_process=True)
    assert not_tokens.returncode == 2 and b"not a token dataset" in not_tokens.stderr
    inside = llmtk("mix", "search", *many, *args[:-1], f"{sources['code']}/search",
                   in_process=True)
    assert inside.returncode == 2 and b"--out: " in inside.stderr and b"inside it" in inside.stderr
    assert not (tmp_path / "s").exists()


# -- the pieces, in this process ------------------------------------------------------------

def test_samples_are_seeded_spread_and_within_the_bounds():
    natural = np.array([0.6, 0.3, 0.1])
    lo, hi = np.array([0.05, 0.0, 0.02]), np.array([0.7, 1.0, 0.5])
    w = sample(natural, lo, hi, 12, seed=3)
    assert w.shape == (12, 3)
    assert np.allclose(w.sum(axis=1), 1) and (w >= lo - 1e-9).all() and (w <= hi + 1e-9).all()
    assert np.allclose(w[0], natural) and np.allclose(w[1], 1 / 3)
    assert np.array_equal(w, sample(natural, lo, hi, 12, seed=3))
    assert not np.array_equal(w, sample(natural, lo, hi, 12, seed=4))
    # spread: every source is somewhere near its upper bound in some trial
    assert (w.max(axis=0) > hi - 0.15).all()


def test_projection_is_the_nearest_point_within_the_bounds():
    lo, hi = np.array([0.1, 0.1, 0.1]), np.array([0.5, 1.0, 1.0])
    p = project(np.array([[0.9, 0.05, 0.05], [0.2, 0.3, 0.5]]), lo, hi)
    assert np.allclose(p[0], [0.5, 0.25, 0.25]) and np.allclose(p[1], [0.2, 0.3, 0.5])


def test_the_fit_recovers_a_log_linear_law_and_its_minimum():
    rng = np.random.default_rng(0)
    lo, hi = np.full(3, 0.02), np.ones(3)
    W = sample(np.array([0.3, 0.5, 0.2]), lo, hi, 10, seed=1)
    t = np.array([1.0, -2.0, 1.0])
    y = 3.0 + 0.5 * np.exp(W @ t) + rng.normal(0, 1e-3, len(W))
    law = LogLinear().fit(W, y)
    assert np.allclose(law.t - law.t.mean(), t - t.mean(), atol=0.1)
    fit = choose(W, y[:, None], np.ones(1))
    assert fit.name == "log-linear" and fit.scores["log-linear"]["spearman"] > 0.9
    best = minimise(fit.model, lo, hi, seed=0)
    assert np.argmax(best) == 1 and best[1] == pytest.approx(0.96, abs=1e-3)


def test_two_validation_sets_put_the_optimum_inside():
    """Each set's loss falls with its own source's weight; their mean is lowest between."""
    lo, hi = np.full(3, 0.02), np.ones(3)
    W = sample(np.array([0.3, 0.5, 0.2]), lo, hi, 12, seed=2)
    Y = np.c_[3 + np.exp(W @ np.array([-3.0, 0, 0])), 3 + np.exp(W @ np.array([0, 0, -3.0]))]
    fit = choose(W, Y, np.array([0.5, 0.5]))
    best = minimise(fit.model, lo, hi, seed=0)
    assert best[0] == pytest.approx(0.49, abs=0.02) and best[2] == pytest.approx(0.49, abs=0.02)


def test_boosted_trees_win_on_a_threshold_and_the_proposal_lies_past_it(capfd):
    """A loss that drops in steps (once source 0 has 30%, again when source 2 is under
    20%): no smooth law fits it, RegMix's trees do; the proposal is in the low region."""
    pytest.importorskip("lightgbm")
    lo, hi = np.full(3, 0.05), np.ones(3)
    natural = np.array([0.3, 0.5, 0.2])
    W = sample(natural, lo, hi, 14, seed=1)
    y = 3 + 0.4 * (W[:, 0] < 0.3) + 0.2 * (W[:, 2] > 0.2)
    candidates, left_out = models(len(W))
    assert Boosted in candidates and left_out is None
    fit = choose(W, y[:, None], np.ones(1), candidates)
    assert fit.name == "lightgbm"
    assert fit.scores["lightgbm"]["loo_rmse"] < min(fit.scores["log-linear"]["loo_rmse"],
                                                   fit.scores["quadratic"]["loo_rmse"])
    best = minimise(fit.model, lo, hi, seed=0, natural=natural)
    assert best[0] >= 0.3 and best[2] <= 0.2 and (best >= lo - 1e-9).all()
    assert best.sum() == pytest.approx(1)
    assert fit.model.predict(best[None])[0] == pytest.approx(y.min(), abs=0.05)
    again = PerSet(Boosted, np.ones(1)).fit(W, y[:, None])  # deterministic trees
    assert np.array_equal(again.predict(W), fit.model.predict(W))
    assert capfd.readouterr().out == ""  # LightGBM writes nothing on stdout


def test_without_lightgbm_the_smooth_models_are_fitted_and_the_search_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import fails
    candidates, left_out = models(24)
    assert candidates == (LogLinear, Quadratic)
    assert "pip install 'llmtk[mix]'" in left_out
    W = sample(np.array([0.3, 0.5, 0.2]), np.zeros(3), np.ones(3), 8, seed=1)
    fit = choose(W, (3 + np.exp(W @ np.array([1.0, -1, 0])))[:, None], np.ones(1), candidates)
    assert set(fit.scores) == {"log-linear", "quadratic"}


def test_too_few_trials_for_the_trees_are_fitted_by_the_smooth_models():
    candidates, left_out = models(Boosted.MIN_TRIALS - 1)
    assert Boosted not in candidates and "too few for RegMix's regression" in left_out


def test_spearman_ranks_with_ties():
    assert spearman(np.array([1.0, 2, 3, 4]), np.array([10.0, 20, 30, 40])) == 1.0
    assert spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == -1.0
    assert spearman(np.array([1.0, 1, 2]), np.array([1.0, 2, 3])) == pytest.approx(0.866, 1e-3)
