"""Finding problems in a training curve, and saying what usually causes them.

Each detector looks at one run and returns `Finding`s with the step where the
problem starts, the numbers that show it, likely causes and fixes. They are
deliberately simple and robust (rolling medians and MADs, an EMA trend) so a
user can check a finding by eye on the plot.

Thresholds are module constants, chosen on synthetic curves (see the tests)
and on llmtk's own runs: a spike is a point more than SPIKE_SIGMAS robust
standard deviations *and* SPIKE_MIN_REL above the median of the preceding
window; divergence means the trend has given back more than half of the
progress made; and so on, each stated where it is used.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from statistics import median

from llmtk.curves.logs import Run

SPIKE_SIGMAS = 6.0  # robust z-score for a loss spike
SPIKE_MIN_REL = 0.05  # ... and at least 5% above the local median
GRAD_SPIKE_FACTOR = 10.0  # grad norm 10x its local median
PLATEAU_REL = 0.005  # < 0.5% improvement over the last third of the run
NO_LEARNING_REL = 0.02  # < 2% improvement over the whole run
REBOUND_REL = 0.03  # trend ends 3% above its best
DIVERGE_GIVEBACK = 0.5  # trend gives back half of the progress made
NOISE_REL = 0.08  # residual noise above 8% of the loss level
OVERFIT_REL = 0.02  # validation loss 2% above its best
FROM_START_SHARE = 0.05  # a log "starts with the run" if its first step is in the first 5%
RESUME_JUMP_REL = 0.10  # loss 10% higher right after a resume than before it
SPIKE_SETTLE = 3  # steps skipped after a spike before measuring the level it left behind
SPIKE_HARM_SIGMAS = 2.0  # lasting harm: the settled level is 2 robust sigmas ...
SPIKE_HARM_REL = 0.02  # ... and 2% above the level just before the spike
SPIKE_GROWTH_MIN = 4  # at least 4 spikes in the last third, 3x as many as in the middle
SPIKE_SCORE_WARN = 0.01  # OLMo 2 spike score above 1% of steps
SPIKE_GRAD_GROWTH = 2.0  # grad norm median doubles between the 2nd and the last quarter


@dataclass
class Finding:
    kind: str
    severity: str  # "error" | "warning" | "info"
    step: float
    summary: str
    causes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    end_step: float | None = None
    details: list[str] = field(default_factory=list)  # one line per event, for --verbose

    def as_dict(self) -> dict:
        return asdict(self)


# -- small numeric helpers --------------------------------------------------------------


def _finite(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def ema(ys: list[float], span: int) -> list[float]:
    """Exponential moving average, debiased at the start (like TensorBoard's smoothing)."""
    alpha = 2.0 / (span + 1.0)
    out, avg, weight = [], 0.0, 0.0
    for y in ys:
        avg = (1 - alpha) * avg + alpha * y
        weight = (1 - alpha) * weight + alpha
        out.append(avg / weight)
    return out


def rolling_stats(ys: list[float], w: int) -> tuple[list[float], list[float]]:
    """(median, robust sigma = 1.4826 MAD) of each window ys[i-w:i], for i = w .. n-1.

    numpy over sliding windows, a block of rows at a time (memory stays ~w x 4096 floats):
    a 100k-step log with 1000-step windows takes about a second, not minutes.
    """
    import numpy as np

    arr = np.asarray(ys, dtype=np.float64)
    views = np.lib.stride_tricks.sliding_window_view(arr, w)[:-1]  # (n - w, w)
    centres, sigmas = [], []
    for lo in range(0, len(views), 4096):
        block = views[lo:lo + 4096]
        c = np.median(block, axis=1)
        centres.append(c)
        sigmas.append(1.4826 * np.median(np.abs(block - c[:, None]), axis=1))
    if not centres:
        return [], []
    return np.concatenate(centres).tolist(), np.concatenate(sigmas).tolist()


def _window(n: int) -> int:
    return max(5, min(50, n // 10))


def _fmt(v: float) -> str:
    return f"{v:.4g}"


# -- detectors ---------------------------------------------------------------------------


def detect_nan(run: Run) -> list[Finding]:
    xs, ys = run.series(run.loss_key)
    bad = [x for x, y in zip(xs, ys, strict=True) if not math.isfinite(y)]
    gx, gs = run.series("grad_norm")
    grad_steps = [x for x, g in zip(gx, gs, strict=True) if not math.isfinite(g)]
    bad_grads = len(grad_steps)
    events = [e for e in run.events if e.get("event") in ("nan", "skip")]
    # Megatron-LM counts the iterations it skipped for NaN/Inf gradients per log interval
    trainer_skips = [(x, int(n)) for x, n in zip(*run.series("nan_iterations"), strict=True)
                     if n > 0]
    events += [{"step": x, "event": "skip"} for x, _ in trainer_skips]
    if not bad and not events and not bad_grads:
        return []
    ended_bad = bool(ys) and not math.isfinite(ys[-1])
    first = min([*bad, *grad_steps, *(float(e.get("step", math.inf)) for e in events)])
    params = sorted({p for e in events for p in (e.get("bad_params") or [])})
    parts = []
    if bad:
        parts.append(f"{len(bad)} logged step(s) with a non-finite loss")
    if bad_grads:
        parts.append(f"{bad_grads} with a non-finite grad norm")
    if events:
        parts.append(f"{len(events)} skipped step(s)")
    summary = f"non-finite values from step {first:.0f}: " + ", ".join(parts)
    if ended_bad:
        summary += "; the run ends with a non-finite loss"
    if params:
        shown = ", ".join(params[:5]) + (" ..." if len(params) > 5 else "")
        summary += f"; first bad gradients in {shown}"
    # a grad norm that is non-finite at the end of the log: no update is being applied
    grads_ended_bad = bool(gs) and not math.isfinite(gs[-1])
    return [Finding(
        "nan", "error" if ended_bad or bad or grads_ended_bad else "warning", first, summary,
        causes=["learning rate too high for the batch size or model width",
                "fp16 overflow (no loss scaling) or an unstable op in low precision",
                "a bad batch (empty or extreme documents, out-of-range token ids)"],
        fixes=["lower the learning rate or lengthen warmup; clip gradients (e.g. 1.0)",
               "train in bf16 rather than fp16",
               "resume from the last good checkpoint and skip the batches at this step "
               "(llmtk train --on-spike rollback)"],
    )]


@dataclass
class Spike:
    start: int  # index of the first flagged point
    end: int  # index of the last flagged point of this group
    centre: float  # median of the window before the spike
    sigma: float  # robust standard deviation of that window
    peak: float
    recovered: bool  # back near the pre-spike level within the next window
    lasting: float  # level after the spike minus the pre-spike level (> 0: still higher)


def find_spikes(ys: list[float]) -> list[Spike]:
    """Points more than SPIKE_SIGMAS robust sigmas and SPIKE_MIN_REL above the median of
    the preceding window, grouped when at most 3 points apart."""
    n = len(ys)
    w = _window(n)
    if n < w + 3:
        return []
    flagged: list[tuple[int, float, float]] = []
    for i, centre, sigma in zip(range(w, n), *rolling_stats(ys, w), strict=True):
        sigma = max(sigma, 1e-3 * abs(centre))
        if ys[i] > centre + max(SPIKE_SIGMAS * sigma, SPIKE_MIN_REL * abs(centre)):
            flagged.append((i, centre, sigma))
    groups: list[list[tuple[int, float, float]]] = []
    for hit in flagged:
        if groups and hit[0] - groups[-1][-1][0] <= 3:
            groups[-1].append(hit)
        else:
            groups.append([hit])
    spikes = []
    for group in groups:
        (start, centre, sigma), last = group[0], group[-1][0]
        after = ys[last + 1: last + 1 + max(5, w)]
        recovered = any(y <= centre + 3 * sigma + 0.02 * abs(centre) for y in after)
        # the level once the spike has passed (skip a few settling steps, then a window)
        # against the level just before it. The loss was usually still falling, so this
        # under-states harm; extrapolating the fall instead was too noisy (false alarms on
        # healthy runs in the calibration set).
        settled = ys[last + 1 + SPIKE_SETTLE: last + 1 + SPIKE_SETTLE + w]
        before = ys[start - max(5, w // 2):start]
        lasting = median(settled) - median(before) if len(settled) >= 5 else 0.0
        spikes.append(Spike(start, last, centre, sigma, max(ys[i] for i, _, _ in group),
                            recovered, lasting))
    return spikes


def spike_score(ys: list[float]) -> float:
    """OLMo 2's spike score: the share of steps at least 7 standard deviations above the
    rolling average of the previous (up to) 1000 steps. Robust statistics (median, MAD)
    stand in for mean and standard deviation, so one spike does not hide the next."""
    w = min(1000, max(20, len(ys) // 10))
    if len(ys) <= w:
        return 0.0
    hits = sum(y > c + 7 * max(sg, 1e-6 * abs(c))
               for y, c, sg in zip(ys[w:], *rolling_stats(ys, w), strict=True))
    return hits / (len(ys) - w)


SPIKE_CAUSES = ["a batch of unusual data (duplicated, garbled or very long documents)",
                "learning rate too high; Adam's second-moment estimate lagging "
                "(beta2 too high) after a run of small gradients",
                "attention-logit growth in deep models"]
SPIKE_FIXES = ["inspect the batches at this step; skip them on resume "
               "(PaLM: rewind ~100 steps and skip ~200-500 batches)",
               "lower the peak learning rate or use beta2=0.95; keep gradient clipping",
               "QK-norm or z-loss for very large models"]


def _spike_text(xs: list[float], ys: list[float], s: Spike) -> str:
    return (f"step {xs[s.start]:.0f}: {_fmt(s.centre)} -> {_fmt(s.peak)} "
            f"(+{(s.peak - s.centre) / abs(s.centre) * 100:.0f}%)")


def _grad_growth(run: Run) -> float | None:
    """Median grad norm of the last quarter over that of the second quarter (the first
    quarter holds the large norms of initialisation and warmup); None if not logged."""
    _, gs = _finite(*run.series("grad_norm"))
    q = len(gs) // 4
    if q < 5:
        return None
    early = median(gs[q:2 * q])
    return median(gs[-q:]) / early if early > 0 else None


def detect_spikes(run: Run) -> list[Finding]:
    """Loss spikes, with a severity from what they did to the run.

    error:   a spike the loss never came back from (it stays at the new level);
    warning: lasting harm: the level after the spike stays above the level before it,
             spikes that grow in frequency or size over the run, a high spike score,
             or spikes together with a growing gradient norm;
    info:    spikes that recover within a few steps and leave the trend where it was
             (noisy batches: every real run has some), reported once, aggregated.
    """
    xs, ys = _finite(*run.series(run.loss_key))
    spikes = find_spikes(ys)
    if not spikes:
        return []
    findings = []
    for s in spikes:
        if not s.recovered:
            findings.append(Finding(
                "spike", "error", xs[s.start],
                f"loss spike at {_spike_text(xs, ys, s)}, not recovered: the loss stays at "
                "the new level", SPIKE_CAUSES, SPIKE_FIXES, end_step=xs[s.end]))
    benign = [s for s in spikes if s.recovered]
    harmed = [s for s in benign
              if s.lasting > max(SPIKE_HARM_SIGMAS * s.sigma, SPIKE_HARM_REL * abs(s.centre))]
    for s in harmed:
        findings.append(Finding(
            "spike", "warning", xs[s.start],
            f"loss spike at {_spike_text(xs, ys, s)}; it recovered, but the loss settled "
            f"{s.lasting / abs(s.centre) * 100:.1f}% above its level before the spike",
            SPIKE_CAUSES, SPIKE_FIXES, end_step=xs[s.end]))
    reasons = []
    # growth: the first third is left out (spikes hide in the fast early descent), the
    # rest is cut in two halves
    third = len(ys) // 3
    middle = third + (len(ys) - third) // 2
    early = [s for s in spikes if third <= s.start < middle]
    late = [s for s in spikes if s.start >= middle]
    if len(late) >= SPIKE_GROWTH_MIN and len(late) >= 3 * max(len(early), 1):
        reasons.append(f"more frequent late in the run ({len(early)} in the middle, "
                       f"{len(late)} in the last third)")
    elif early and len(late) >= 2:
        small, big = (median((x.peak - x.centre) / abs(x.centre) for x in ss)
                      for ss in (early, late))
        if big > 2 * small:
            reasons.append(f"growing: median +{small * 100:.0f}% early, +{big * 100:.0f}% late")
    score = spike_score(ys)
    if score > SPIKE_SCORE_WARN:
        reasons.append(f"spike score {score * 100:.2f}% of steps (warning above "
                       f"{SPIKE_SCORE_WARN * 100:.1f}%)")
    growth = _grad_growth(run)
    if growth is not None and growth > SPIKE_GRAD_GROWTH and len(spikes) >= 2:
        reasons.append(f"with the gradient norm growing {growth:.1f}x over the run")
    shown = ", ".join(f"{xs[s.start]:.0f}" for s in spikes[:8]) + (" ..." if len(spikes) > 8
                                                                  else "")
    largest = max(spikes, key=lambda s: (s.peak - s.centre) / abs(s.centre))
    size = (largest.peak - largest.centre) / abs(largest.centre) * 100
    summary = f"{len(spikes)} loss spike(s), largest +{size:.0f}% at step {xs[largest.start]:.0f}"
    details = [f"{_spike_text(xs, ys, s)}, "
               + ("recovered" if s.recovered else "not recovered")
               + f", settled {s.lasting / abs(s.centre) * 100:+.1f}% from the level before"
               for s in spikes]
    if reasons:
        findings.append(Finding("spikes", "warning", xs[spikes[0].start],
                                summary + "; " + "; ".join(reasons) + f"; steps {shown}",
                                ["recurring spikes point to a systematic cause (learning rate, "
                                 "data order, precision) rather than one bad batch",
                                 *SPIKE_CAUSES[1:]], SPIKE_FIXES, details=details))
    elif len(benign) > len(harmed):
        findings.append(Finding("spikes", "info", xs[spikes[0].start],
                                summary + f", all recovered at once (steps {shown})",
                                SPIKE_CAUSES, SPIKE_FIXES,
                                details=details))
    return findings


def _trend(ys: list[float]) -> list[float]:
    return ema(ys, span=max(5, len(ys) // 20))


def detect_divergence_and_rebound(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    n = len(ys)
    if n < 10:
        return []
    trend = _trend(ys)
    i_min = min(range(n), key=trend.__getitem__)
    best, start, end = trend[i_min], trend[0], trend[-1]
    if i_min >= n - 3:
        return []
    progress = max(start - best, 1e-12)
    rise = end - best
    tail = trend[int(n * 0.9):]
    sustained = all(t > best + rise / 2 for t in tail)
    if rise >= DIVERGE_GIVEBACK * progress and rise > REBOUND_REL * abs(best):
        return [Finding(
            "divergence", "error", xs[i_min],
            f"the loss diverges after step {xs[i_min]:.0f}: trend {_fmt(best)} -> {_fmt(end)}, "
            f"giving back {rise / progress * 100:.0f}% of the progress made",
            causes=["learning rate too high once warmup ends",
                    "numerical instability (fp16, missing gradient clipping)",
                    "a data-order problem: the stream switched to a very different source"],
            fixes=["restart from a checkpoint before this step with a lower peak learning rate",
                   "enable gradient clipping and bf16; check the data mix around this step"],
        )]
    if rise > REBOUND_REL * abs(best) and sustained:
        return [Finding(
            "rebound", "warning", xs[i_min],
            f"the loss rebounds after step {xs[i_min]:.0f}: trend {_fmt(best)} -> {_fmt(end)} "
            f"(+{rise / abs(best) * 100:.1f}%) and stays up",
            causes=["learning rate too high for this phase (e.g. after warmup or a restart)",
                    "the data distribution changed (new source, repeated epoch)",
                    "optimizer state lost on resume"],
            fixes=["lower the learning rate or decay it sooner",
                   "check the mix and data position at this step"],
        )]
    return []


def detect_plateau(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    n = len(ys)
    if n < 30:
        return []
    trend = _trend(ys)
    overall = (trend[0] - min(trend)) / max(abs(trend[0]), 1e-12)
    # "never learned" only means something when the log starts with the run: a log that
    # starts mid-run (a resumed run, an excerpt) is flat because the easy progress is done
    from_start = xs[0] <= max(10.0, FROM_START_SHARE * xs[-1])
    if overall < NO_LEARNING_REL and from_start:
        return [Finding(
            "no_learning", "error", xs[0],
            f"the loss barely moves over the whole run: {_fmt(trend[0])} -> {_fmt(trend[-1])} "
            f"({overall * 100:.1f}% improvement in {n} logged steps)",
            causes=["learning rate far too low (or zero: check warmup and schedule)",
                    "gradients not reaching the weights (frozen parameters, detached loss)",
                    "targets not aligned with inputs, or data that is random/unlearnable"],
            fixes=["check lr in the log; run a short lr range test",
                   "overfit one small batch first: the loss must go to ~0"],
        )]
    third = n * 2 // 3
    window_gain = (trend[third] - trend[-1]) / max(abs(trend[third]), 1e-12)
    if window_gain >= PLATEAU_REL:
        return []
    if trend[-1] - min(trend) > PLATEAU_REL * abs(min(trend)):
        return []  # rising, not flat: divergence and rebound speak for that
    lrs = run.series("lr")[1]
    if lrs and max(lrs) > 0 and lrs[-1] < 0.1 * max(lrs):
        return []  # the schedule has decayed: flattening is expected at the end
    known_lr = bool(lrs) and max(lrs) > 0
    j = third
    while j > 0 and (trend[j - 1] - trend[-1]) / max(abs(trend[j - 1]), 1e-12) < PLATEAU_REL:
        j -= 1
    # without a logged learning rate a flat stretch may be the end of a decayed schedule:
    # say so, but do not warn
    return [Finding(
        "plateau", "warning" if known_lr else "info", xs[j],
        f"the loss has plateaued since step {xs[j]:.0f} at about {_fmt(trend[-1])} "
        f"(< {PLATEAU_REL * 100:.1f}% better over the last {n - j} logged steps) "
        + ("while the learning rate is still high" if known_lr else
           "(no learning rate in the log to tell a plateau from a finished schedule)"),
        causes=["learning rate too high to settle into a lower loss, or too low to make progress",
                "model capacity or data exhausted (small model, repeated data)"],
        fixes=["decay the learning rate (cosine/WSD cool-down) and watch the loss drop",
               "more or fresher data; a larger model if the token budget allows"],
    )]


def detect_noise(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    n = len(ys)
    if n < 30:
        return []
    # a centred rolling median as the trend: an EMA lags a steady rise or fall, and that
    # lag would read as noise
    k = max(2, _window(n) // 2)
    half = n // 2
    trend = [median(ys[max(0, i - k):i + k + 1]) for i in range(half, n)]
    residual = [abs(y - t) / max(abs(t), 1e-12) for y, t in zip(ys[half:], trend, strict=True)]
    noise = 1.4826 * median(residual)
    if noise < NOISE_REL:
        return []
    diffs = [b - a for a, b in zip(ys[half:], ys[half + 1:], strict=False)]
    flips = sum(1 for a, b in zip(diffs, diffs[1:], strict=False) if a * b < 0)
    rate = flips / max(len(diffs) - 1, 1)
    return [Finding(
        "oscillation", "warning", xs[half],
        f"the loss oscillates by about {noise * 100:.0f}% around its trend in the second half "
        f"of the run (direction changes at {rate * 100:.0f}% of steps)",
        causes=["learning rate too high", "batch too small (noisy gradients)",
                "very uneven batches (document lengths or sources not shuffled)"],
        fixes=["lower the learning rate or raise the batch (gradient accumulation)",
               "shuffle or mix sources more evenly"],
    )]


def detect_grad_explosions(run: Run) -> list[Finding]:
    xs, gs = _finite(*run.series("grad_norm"))
    n = len(gs)
    w = _window(n)
    if n < w + 3:
        return []
    hits = [(i, centre) for i, centre in zip(range(w, n), rolling_stats(gs, w)[0], strict=True)
            if centre > 0 and gs[i] > GRAD_SPIKE_FACTOR * centre]
    findings = []
    if hits:
        i, centre = hits[0]
        findings.append(Finding(
            "grad_explosion", "warning", xs[i],
            f"{len(hits)} gradient-norm spike(s) over {GRAD_SPIKE_FACTOR:.0f}x the local median, "
            f"first at step {xs[i]:.0f} ({_fmt(centre)} -> {_fmt(gs[i])})",
            causes=["a batch with extreme activations; learning rate too high",
                    "no or too loose gradient clipping"],
            fixes=["clip gradients (max norm 1.0 is the usual choice)",
                   "lower the learning rate; look at the data of these steps"],
        ))
    q = n // 4
    if q >= 5:
        early, late = median(gs[q:2 * q]), median(gs[-q:])
        if early > 0 and late > GRAD_SPIKE_FACTOR * early:
            findings.append(Finding(
                "grad_growth", "warning", xs[-q],
                f"the gradient norm keeps growing: median {_fmt(early)} early, {_fmt(late)} late",
                causes=["training heading towards instability (often precedes divergence)"],
                fixes=["lower the learning rate; add weight decay; check clipping"],
            ))
    return findings


def detect_overfitting(run: Run) -> list[Finding]:
    vx, vy = _finite(*run.series("val_loss"))
    if len(vy) < 3:
        return []
    i_best = min(range(len(vy)), key=vy.__getitem__)
    best, last = vy[i_best], vy[-1]
    after = vy[i_best + 1:]
    if len(after) < 2 or last <= best * (1 + OVERFIT_REL) or not all(v > best for v in after):
        return []
    tx, ty = _finite(*run.series("loss"))
    train_at_best = next((y for x, y in zip(tx, ty, strict=True) if x >= vx[i_best]), None)
    train_now = ty[-1] if ty else None
    detail = ""
    if train_at_best is not None and train_now is not None:
        if train_now >= train_at_best:
            return []  # both went up: that is divergence, not overfitting
        detail = f" while the training loss fell {_fmt(train_at_best)} -> {_fmt(train_now)}"
    return [Finding(
        "overfitting", "warning", vx[i_best],
        f"validation loss is up {(last / best - 1) * 100:.1f}% since its best at step "
        f"{vx[i_best]:.0f} ({_fmt(best)} -> {_fmt(last)}){detail}",
        causes=["too many epochs over too little data (repeated tokens)",
                "validation data from a different distribution than training data"],
        fixes=["stop at (or keep) the checkpoint of the best validation loss",
               "more unique data, deduplication, or fewer epochs; more weight decay or dropout"],
    )]


def detect_resume_jumps(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    findings = []
    for event in run.events:
        if event.get("event") != "resume" or not isinstance(event.get("step"), int | float):
            continue
        s = event["step"]
        before = [y for x, y in zip(xs, ys, strict=True) if x <= s][-5:]
        after = [y for x, y in zip(xs, ys, strict=True) if x > s][:5]
        if len(before) >= 2 and after and median(after) > median(before) * (1 + RESUME_JUMP_REL):
            findings.append(Finding(
                "resume_jump", "warning", s,
                f"the loss jumped after the resume at step {s:.0f}: "
                f"{_fmt(median(before))} -> {_fmt(median(after))}",
                causes=["optimizer state, learning-rate schedule or data position "
                        "not restored from the checkpoint"],
                fixes=["resume from a full checkpoint (model + optimizer + scheduler + data "
                       "position), as llmtk train does by itself"],
            ))
    return findings


DETECTORS = (detect_nan, detect_spikes, detect_divergence_and_rebound, detect_plateau,
             detect_noise, detect_grad_explosions, detect_overfitting, detect_resume_jumps)


def diagnose(run: Run) -> list[Finding]:
    findings = [f for detector in DETECTORS for f in detector(run)]
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.step))


def overview(run: Run) -> dict:
    """Headline numbers of a run for the report."""
    xs, ys = _finite(*run.series(run.loss_key))
    out: dict = {"run": run.name, "path": run.path, "format": run.format, "rows": len(run.rows),
                 "curve": run.loss_key}
    if run.notes:
        out["notes"] = list(run.notes)
    if ys:
        tail = ys[-min(10, len(ys)):]
        out.update(first_step=xs[0], last_step=xs[-1], first_loss=ys[0], last_loss=ys[-1],
                   final_loss=median(tail), best_loss=min(ys),
                   spike_score=round(spike_score(ys), 6))
    vx, vy = _finite(*run.series("val_loss"))
    if vy:
        out.update(best_val_loss=min(vy), last_val_loss=vy[-1])
        tx, ty = _finite(*run.series("loss"))
        near = [y for x, y in zip(tx, ty, strict=True) if abs(x - vx[-1]) <= max(5, _window(
            len(ty)))]
        if near:  # validation minus training loss at the last evaluation
            out["val_gap"] = vy[-1] - median(near)
    _, tokens = run.series("tokens")
    if tokens:
        out["tokens"] = tokens[-1]
    _, times = _finite(*run.series("time"))
    if len(times) >= 2:
        out["hours"] = (times[-1] - times[0]) / 3600
    return out
