"""The objective as a function of the mixture weights: three regressions, judged by
leave-one-out, and the mixture the chosen one predicts best.

- `LogLinear`: L(w) = c + k * exp(t . w), the law Data Mixing Laws (Ye et al. 2024) fits
  per validation domain. Given t, c and k are a linear least-squares fit; t is found by
  Levenberg-Marquardt on what is left (variable projection), from several starts.
- `Quadratic`: ridge regression on the weights and their pairwise products, the ridge
  strength chosen by its closed-form leave-one-out error: smooth, and sound with few trials.
- `Boosted`: RegMix's regression (Liu et al. 2024), LightGBM gradient-boosted trees on the
  weights, with RegMix's settings where they apply and cross-validation for the rest (its
  docstring). Optional (`pip install 'llmtk[mix]'`): without LightGBM the other two are
  fitted and the search says so.

Each validation set gets a model of its own and the objective is their weighted sum (as
Data Mixing Laws combines its per-domain laws, and RegMix fits one regressor per domain).
`choose` refits each model K times with one trial left out, predicts that trial's
objective, and keeps the model with the lower held-out squared error; the held-out
predictions also give the rank correlation (Spearman) reported with the proposal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# |t_i| bound. Over the simplex the exponential term then varies at most e^5 (~150x) per
# source, ample for loss curves (Data Mixing Laws' fitted t are of order 1), while a law
# fitted without a corner trial cannot extrapolate to absurd losses there: with 50, one
# held-out prediction of a 12-trial search (benchmarks/mix_search.py --steps 120) was 1e8.
T_LIMIT = 5.0


class LogLinear:
    name = "log-linear"

    def fit(self, W: np.ndarray, y: np.ndarray) -> LogLinear:
        n = W.shape[1]
        rng = np.random.default_rng(0)
        slope = np.linalg.lstsq(np.c_[np.ones(len(y)), W], y, rcond=None)[0][1:]
        slope = slope - slope.mean()
        direction = slope / (np.linalg.norm(slope) or 1.0)
        starts = [s * direction for s in (-4.0, -1.0, 1.0, 4.0)]
        starts += [rng.normal(0, 2, n) for _ in range(4)]
        best = None
        for t0 in starts:
            t, cost = self._solve(W, y, t0)
            if best is None or cost < best[1]:
                best = (t, cost)
        self.t = best[0]
        self.c, self.k = self._linear(W, y, self.t)[0]
        return self

    def predict(self, W: np.ndarray) -> np.ndarray:
        return self.c + self.k * np.exp(W @ self.t)

    @staticmethod
    def _linear(W, y, t):
        X = np.c_[np.ones(len(y)), np.exp(W @ t)]
        coef = np.linalg.lstsq(X, y, rcond=None)[0]
        return coef, y - X @ coef

    def _solve(self, W, y, t):
        """Levenberg-Marquardt on t of the residual left by the best c, k (numerical
        Jacobian: a handful of sources, tens of trials)."""
        t = np.clip(t, -T_LIMIT, T_LIMIT)
        r = self._linear(W, y, t)[1]
        cost, damping = float(r @ r), 1e-2
        for _ in range(200):
            J = np.empty((len(y), len(t)))
            for i in range(len(t)):
                step = np.zeros_like(t)
                step[i] = 1e-6
                J[:, i] = (self._linear(W, y, t + step)[1] - r) / 1e-6
            A, g = J.T @ J, J.T @ r
            delta = np.linalg.solve(A + damping * (np.diag(np.diag(A)) + 1e-12 * np.eye(len(t))),
                                    -g)
            new = np.clip(t + delta, -T_LIMIT, T_LIMIT)
            new -= new.mean()  # t + a*1 only rescales k (the weights sum to 1): keep a = 0
            r_new = self._linear(W, y, new)[1]
            c_new = float(r_new @ r_new)
            if c_new < cost:
                done = cost - c_new < 1e-12 * max(cost, 1e-30)
                t, r, cost, damping = new, r_new, c_new, max(damping / 3, 1e-9)
                if done:
                    break
            else:
                damping *= 4
                if damping > 1e9:
                    break
        return t, cost


class Quadratic:
    name = "quadratic"
    LAMBDAS = 10.0 ** np.arange(-6, 3)

    @staticmethod
    def _features(W):
        n = W.shape[1]
        pairs = [W[:, i] * W[:, j] for i in range(n) for j in range(i, n)]
        return np.c_[W, np.array(pairs).T]

    def fit(self, W: np.ndarray, y: np.ndarray) -> Quadratic:
        F = self._features(W)
        self.mean, self.scale = F.mean(axis=0), F.std(axis=0) + 1e-12
        X = (F - self.mean) / self.scale
        yc = y - y.mean()
        best = None
        for lam in self.LAMBDAS:  # leave-one-out error of ridge in closed form
            H = X @ np.linalg.solve(X.T @ X + lam * np.eye(X.shape[1]), X.T)
            H += 1.0 / len(y)  # the intercept
            loo = (yc - (H - 1.0 / len(y)) @ yc) / np.maximum(1 - np.diag(H), 1e-9)
            if best is None or float(loo @ loo) < best[0]:
                best = (float(loo @ loo), lam)
        self.lam = best[1]
        self.beta = np.linalg.solve(X.T @ X + self.lam * np.eye(X.shape[1]), X.T @ yc)
        self.intercept = float(y.mean())
        return self

    def predict(self, W: np.ndarray) -> np.ndarray:
        X = (self._features(W) - self.mean) / self.scale
        return self.intercept + X @ self.beta


class Boosted:
    """RegMix's gradient-boosted regression (Liu et al. 2024; sail-sg/regmix,
    regression_fitting/regression.ipynb): LightGBM, gbdt, L2 regression, learning rate
    0.01, at most 1,000 trees, early stopping after 3 rounds without improvement, seed 42.

    RegMix fits 512 trials (and stops early on a held-out set); a CPU search runs 16-64.
    LightGBM's default leaf (at least 20 rows) then allows hardly a split, and a separate
    held-out set for early stopping would take trials from the fit. So the smallest leaf
    (2, 4 or 8 trials) and the number of trees are chosen by 5-fold cross-validation on
    the trials given, with RegMix's early stopping on the folds' mean error; every other
    setting is RegMix's.
    One thread and LightGBM's deterministic mode: the same trials give the same trees.
    The prediction is piecewise constant in the weights (`piecewise`): `minimise` searches
    it over many sampled mixtures, as RegMix does, not by local steps."""

    name = "lightgbm"
    piecewise = True
    LEAF_SIZES = (2, 4, 8)
    FOLDS = 5
    MIN_TRIALS = 10  # fewer cannot be split into folds that leave anything to learn from
    PARAMS = {"objective": "regression", "boosting_type": "gbdt", "learning_rate": 1e-2,
              "seed": 42, "verbosity": -1, "num_threads": 1, "deterministic": True,
              "force_col_wise": True, "metric": "l2"}
    DATASET = {"min_data_in_bin": 1, "verbosity": -1}  # bins as fine as the trials allow

    def fit(self, W: np.ndarray, y: np.ndarray) -> Boosted:
        import lightgbm as lgb

        folds = min(self.FOLDS, len(y))
        best = None
        for leaf in self.LEAF_SIZES:
            if leaf * 2 > len(y) * (folds - 1) / folds:
                break  # no split is possible in a fold's trials
            params = {**self.PARAMS, "min_data_in_leaf": leaf}
            result = lgb.cv(params, lgb.Dataset(W, y, params=self.DATASET),
                            num_boost_round=1000, nfold=folds, stratified=False,
                            shuffle=True, seed=0,
                            callbacks=[lgb.early_stopping(3, verbose=False)])
            errors = result["valid l2-mean"]
            if best is None or errors[-1] < best[0]:
                best = (errors[-1], params, len(errors))
        if best is None:  # too few trials for any leaf size: one leaf, the mean
            best = (0.0, {**self.PARAMS, "min_data_in_leaf": len(y)}, 1)
        _, self.params, self.rounds = best
        self.booster = lgb.train(self.params, lgb.Dataset(W, y, params=self.DATASET),
                                 num_boost_round=self.rounds)
        return self

    def predict(self, W: np.ndarray) -> np.ndarray:
        return self.booster.predict(W)


def models(trials: int) -> tuple[tuple, str | None]:
    """The models to fit to this many trials, and why one is left out (or None)."""
    try:
        import lightgbm  # noqa: F401
    except ImportError:
        return (LogLinear, Quadratic), ("LightGBM is not installed (pip install "
                                        "'llmtk[mix]'): RegMix's regression is not fitted")
    except OSError as e:  # its OpenMP runtime is missing (macOS without libomp)
        return (LogLinear, Quadratic), f"LightGBM cannot load ({e}): not fitted"
    if trials < Boosted.MIN_TRIALS:
        return (LogLinear, Quadratic), (f"{trials} trials: too few for RegMix's regression "
                                        f"(at least {Boosted.MIN_TRIALS}); not fitted")
    return (LogLinear, Quadratic, Boosted), None


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Rank correlation (ties get their average rank); nan when a side is constant."""
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    for value in np.unique(x):  # ties: their mean rank
        tied = x == value
        ranks[tied] = ranks[tied].mean()
    return ranks


class PerSet:
    """One model per validation set, the objective their weighted sum: Data Mixing Laws
    fits a law per domain, and a sum of laws can have its optimum inside the simplex
    (one law of the summed loss is monotone along t and always ends at a corner)."""

    def __init__(self, cls, weights: np.ndarray):
        self.cls, self.weights, self.name = cls, weights, cls.name
        self.piecewise = getattr(cls, "piecewise", False)

    def fit(self, W: np.ndarray, Y: np.ndarray) -> PerSet:
        self.models = [self.cls().fit(W, Y[:, j]) for j in range(Y.shape[1])]
        return self

    def predict(self, W: np.ndarray) -> np.ndarray:
        return sum(w * m.predict(W) for w, m in zip(self.weights, self.models, strict=True))


@dataclass
class Fit:
    model: PerSet                 # the chosen model, fitted on every trial
    held_out: np.ndarray          # each trial's objective predicted without that trial
    scores: dict                  # model name -> {"loo_rmse", "spearman"}

    @property
    def name(self) -> str:
        return self.model.name


def choose(W: np.ndarray, Y: np.ndarray, weights: np.ndarray,
           candidates: tuple = (LogLinear, Quadratic)) -> Fit:
    """W (trials, sources) the mixtures, Y (trials, sets) their validation losses, weights
    (sets,) the objective's. Each candidate model's leave-one-out predictions of the
    objective; keep the one with the lower error."""
    y = Y @ weights
    scores, held = {}, {}
    for cls in candidates:
        pred = np.array([PerSet(cls, weights).fit(np.delete(W, i, 0), np.delete(Y, i, 0))
                         .predict(W[i:i + 1])[0] for i in range(len(y))])
        held[cls.name] = pred
        scores[cls.name] = {"loo_rmse": float(np.sqrt(np.mean((pred - y) ** 2))),
                            "spearman": spearman(pred, y)}
    best = min(candidates, key=lambda c: scores[c.name]["loo_rmse"])
    return Fit(PerSet(best, weights).fit(W, Y), held[best.name], scores)


def minimise(model, lo: np.ndarray, hi: np.ndarray, seed: int,
             natural: np.ndarray | None = None) -> np.ndarray:
    """The weights with the lowest predicted objective within the bounds. A smooth model:
    the best of dense random draws over the feasible simplex, refined by shrinking random
    steps. A piecewise-constant one (the boosted trees): RegMix's search, below."""
    from llmtk.mix.simplex import project

    rng = np.random.default_rng(seed)
    n = len(lo)
    if getattr(model, "piecewise", False):
        return _minimise_sampled(model, lo, hi, rng,
                                 np.full(n, 1 / n) if natural is None else natural)
    points = project(rng.dirichlet(np.ones(n), 20000), lo, hi)
    points = np.r_[points, project(np.eye(n), lo, hi)]  # the corners' nearest points
    values = model.predict(points)
    starts = points[np.argsort(values)[:8]]
    best_w, best_v = starts[0], float(model.predict(starts[:1])[0])
    for w in starts:
        v = float(model.predict(w[None])[0])
        for sigma in np.geomspace(0.1, 1e-4, 30):
            trial = project(w[None] + rng.normal(0, sigma, (32, n)), lo, hi)
            tv = model.predict(trial)
            i = int(np.argmin(tv))
            if tv[i] < v:
                w, v = trial[i], float(tv[i])
        if v < best_v:
            best_w, best_v = w, v
    return best_w


SIMULATED = 100_000  # RegMix's simulated mixtures (regression.ipynb) ...
TOP = 128            # ... and how many of the best it averages


def _minimise_sampled(model, lo, hi, rng, natural) -> np.ndarray:
    """RegMix's search of a piecewise-constant model: predict 100,000 mixtures drawn
    around the natural shares (plus uniform draws, so that no part of the feasible simplex
    is out of reach) and average the 128 best. The average lies within the bounds (they
    bound a convex set); it is kept when its own prediction is among those 128 best, as a
    minimum should be, else the single best mixture is."""
    from llmtk.mix.simplex import draws, project

    n = len(lo)
    points = np.r_[draws(natural, lo, hi, SIMULATED // 2, rng),
                   project(rng.dirichlet(np.ones(n), SIMULATED // 2), lo, hi)]
    values = model.predict(points)
    order = np.argsort(values, kind="stable")
    mean = points[order[:TOP]].mean(axis=0)
    if float(model.predict(mean[None])[0]) <= values[order[TOP - 1]]:
        return mean
    return points[order[0]]
