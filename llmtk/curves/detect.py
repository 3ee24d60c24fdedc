"""Finding problems in a training curve, and saying what usually causes them.

Each detector looks at one run and returns `Finding`s with the step where the
problem starts, the numbers that show it, likely causes and fixes. They are
deliberately simple and robust (rolling medians and MADs, an EMA trend) so a
user can check a finding by eye on the plot.

Thresholds are module constants, calibrated on real public logs and synthetic
curves (benchmarks/diagnose_calibration.py, docs/diagnose.md): divergence means
the trend has given back more than half of the progress made, and so on, each
stated where it is used. Spikes have their own module, `spikes.py`.
"""

from __future__ import annotations

import math
from statistics import median

from llmtk.curves.common import Finding, ema, resolution, rolling_stats
from llmtk.curves.common import finite as _finite
from llmtk.curves.common import fmt as _fmt
from llmtk.curves.common import window as _window
from llmtk.curves.logs import Run
from llmtk.curves.ranks import RANK_DETECTORS
from llmtk.curves.routing import detect_collapsed_routing
from llmtk.curves.spikes import (
    SPIKE_HARM_REL,
    SPIKE_HARM_SIGMAS,
    detect_spikes,
    find_spikes,
    spike_score,
)
from llmtk.evaluate.compare import LOWER_IS_BETTER

__all__ = ["Finding", "diagnose", "ema", "find_spikes", "overview", "spike_score"]

GRAD_SPIKE_FACTOR = 10.0  # grad norm 10x its local median
PLATEAU_REL = 0.005  # < 0.5% improvement over the last third of the run
NO_LEARNING_REL = 0.02  # < 2% improvement over the whole run
REBOUND_REL = 0.03  # trend ends 3% above its best
DIVERGE_GIVEBACK = 0.5  # trend gives back half of the progress made
NOISE_REL = 0.08  # residual noise above 8% of the loss level
OVERFIT_REL = 0.02  # validation loss 2% above its best
FROM_START_SHARE = 0.05  # a log "starts with the run" if its first step is in the first 5%
RESUME_JUMP_REL = 0.10  # loss 10% higher right after a resume than before it
NOISE_UNITS = 10  # oscillation must also exceed 10 units of the logged resolution
MIN_ROWS = 5  # the fewest rows judged for divergence and a constant loss (NaN: any number)
SHORT_ROWS = 10  # below this, divergence is judged by SHORT_DIVERGE_RATIO, not a trend
SHORT_DIVERGE_RATIO = 1.5  # a short log's second half at 1.5x its first half's best
RISE_SIGMAS = 3.0  # below TREND_ROWS, a rise must stand 3 standard errors above the noise
REPEAT_ROWS = 4  # the same 4 losses in a row again later: the weights did not change
TREND_ROWS = 30  # the fewest rows for the trend-based plateau, no-learning and noise rules
FINAL_ROWS = 10  # the report's final loss: the median of the last 10 rows
GRAD_EFFECT_ROWS = 100  # rows of loss compared before and after a grad-norm spike


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


DIVERGE_CAUSES = ["learning rate too high once warmup ends",
                  "numerical instability (fp16, missing gradient clipping)",
                  "a data-order problem: the stream switched to a very different source"]
DIVERGE_FIXES = ["restart from a checkpoint before this step with a lower peak learning rate",
                 "enable gradient clipping and bf16; check the data mix around this step"]


def _trend(ys: list[float]) -> list[float]:
    return ema(ys, span=max(5, len(ys) // 20))


def _median3(ys: list[float]) -> list[float]:
    """The running median of 3: one wild batch (a loss of 1e5 between losses of 5) moves it
    not at all, where it would drag an EMA trend into a 'divergence' for many rows."""
    return [median(ys[max(0, i - 1):i + 2]) for i in range(len(ys))]


def detect_divergence_and_rebound(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    n = len(ys)
    if n < MIN_ROWS:
        return []
    if n < SHORT_ROWS:
        return _short_divergence(xs, ys)
    if n < TREND_ROWS:
        return _short_rise(xs, ys)
    trend = _trend(_median3(ys))
    i_min = min(range(n), key=trend.__getitem__)
    best, start, end = trend[i_min], trend[0], trend[-1]
    if i_min >= n - 3:
        return []
    progress = max(start - best, 1e-12)
    rise = end - best
    tail = trend[int(n * 0.9):]
    sustained = all(t > best + rise / 2 for t in tail)
    if rise > REBOUND_REL * abs(best) and (rise >= DIVERGE_GIVEBACK * progress or sustained):
        return [_rise_finding(xs[i_min], best, rise, progress,
                              f"trend {_fmt(best)} -> {_fmt(end)}")]
    return []


REBOUND_CAUSES = ["learning rate too high for this phase (e.g. after warmup or a restart)",
                  "the data distribution changed (new source, repeated epoch)",
                  "optimizer state lost on resume"]
REBOUND_FIXES = ["lower the learning rate or decay it sooner",
                 "check the mix and data position at this step"]


def _rise_finding(step: float, best: float, rise: float, progress: float,
                  numbers: str) -> Finding:
    """Divergence when the rise gives back DIVERGE_GIVEBACK of the progress made since the
    start, else a rebound."""
    if rise < DIVERGE_GIVEBACK * progress:
        return Finding(
            "rebound", "warning", step,
            f"the loss rebounds after step {step:.0f}: {numbers} "
            f"(+{rise / abs(best) * 100:.1f}%) and stays up",
            causes=REBOUND_CAUSES, fixes=REBOUND_FIXES)
    given = (f"giving back {rise / progress * 100:.0f}% of the progress made"
             if progress > rise / 10 else "never better than at the start of the log")
    return Finding(
        "divergence", "error", step,
        f"the loss diverges after step {step:.0f}: {numbers} "
        f"(+{rise / abs(best) * 100:.1f}%), {given}",
        causes=DIVERGE_CAUSES, fixes=DIVERGE_FIXES)


def row_noise(ys: list[float]) -> float:
    """The standard deviation of one row's loss around its neighbours: 1.4826 MAD of the
    row-to-row differences over sqrt(2) (a slow trend moves the differences little)."""
    diffs = [b - a for a, b in zip(ys, ys[1:], strict=False)]
    return 1.4826 * median(abs(d) for d in diffs) / math.sqrt(2) if diffs else 0.0


def short_rise_margin(n: int, sigma: float) -> float:
    """The smallest rise a log of n (< TREND_ROWS) rows with row noise sigma can show: its
    last third's median against the best running median of 3 before it, RISE_SIGMAS standard
    errors of their difference."""
    return RISE_SIGMAS * sigma * math.sqrt(1 / max(3, n // 3) + 1 / 3)


def _short_rise(xs: list[float], ys: list[float]) -> list[Finding]:
    """SHORT_ROWS to TREND_ROWS rows: too few for a trend (the EMA spans 5 rows, and 'stays up'
    would rest on the last one or two), so a rise is judged against the noise the log itself
    shows: the median of its last third must exceed the lowest running median of 3 before it
    by short_rise_margin and by REBOUND_REL. A fine-tune whose rows move by +-15% ends 9%
    above its best by chance; a loss that climbs 12% while its rows move by 2% does not."""
    n = len(ys)
    k = max(3, n // 3)
    level = _median3(ys)[:n - k]
    i_best = min(range(len(level)), key=level.__getitem__)
    best, late = level[i_best], median(ys[-k:])
    rise = late - best
    if rise <= max(short_rise_margin(n, row_noise(ys)), REBOUND_REL * abs(best)):
        return []
    progress = max(level[0] - best, 0.0)
    return [_rise_finding(xs[i_best], best, rise, progress,
                          f"{_fmt(best)} (its lowest median of 3 rows) -> {_fmt(late)} "
                          f"(the median of its last {k} rows)")]


# a constant loss and a repeated sequence of losses say the same: the weights do not change
NOT_UPDATED_CAUSES = ["learning rate zero (warmup or schedule misconfigured)",
                      "no parameter receives gradients (all frozen, or the loss is detached)",
                      "the optimizer step never runs, or is skipped every time "
                      "(fp16 loss scale overflow)"]
NOT_UPDATED_FIXES = ["print lr and the grad norm at the first steps",
                     "check requires_grad on the trainable parameters (LoRA adapters "
                     "attached?) and that optimizer.step() is called"]


def detect_constant(run: Run) -> list[Finding]:
    """The same loss at every logged step: nothing is learned (a frozen model, a detached
    loss, an lr of zero). Judged from MIN_ROWS rows on, wherever the log starts: even a
    finished run's loss moves with its batches. Exactly the same: a loss printed with few
    digits can sit within one unit of its last digit for a while on a healthy run."""
    xs, ys = _finite(*run.series(run.loss_key))
    if len(ys) < MIN_ROWS:
        return _constant_val(run)
    if max(ys) != min(ys):
        return _repeated(xs, ys) or _constant_val(run)
    return [Finding(
        "no_learning", "error", xs[0],
        f"the loss is {_fmt(ys[0])} at every one of the {len(ys)} logged steps "
        f"({xs[0]:.0f}-{xs[-1]:.0f}): the model is not being updated",
        causes=NOT_UPDATED_CAUSES, fixes=NOT_UPDATED_FIXES,
    )]


def _constant_val(run: Run) -> list[Finding]:
    """The validation loss exactly the same at MIN_ROWS or more evaluations while the training
    loss moves: the model's outputs on held-out data do not change (a collapsed output, such
    as a triplet loss sitting at its margin, or a validation pass that never sees new weights)."""
    if run.loss_key == "val_loss":
        return []  # the curve itself: judged above
    vx, vy = _finite(*run.series("val_loss"))
    if len(vy) < MIN_ROWS or max(vy) != min(vy):
        return []
    return [Finding(
        "no_learning", "error", vx[0],
        f"the validation loss is {_fmt(vy[0])} at every one of the {len(vy)} evaluations "
        f"({vx[0]:.0f}-{vx[-1]:.0f}) while the training loss moves: the model's outputs on "
        "validation data do not change",
        causes=["a collapsed output: the model predicts the same thing for every input (a "
                "triplet or margin loss sitting at its margin, a classifier on one class)",
                "validation runs on a copy of the model that never receives the new weights"],
        fixes=["print a few validation predictions: are they all the same?",
               "check that validation uses the trained model (and model.eval() only)"],
    )]


def _short_divergence(xs: list[float], ys: list[float]) -> list[Finding]:
    """A log of MIN_ROWS to SHORT_ROWS rows has no trend to speak of, and one bad batch is a
    large share of it: divergence needs the median of its second half at least
    SHORT_DIVERGE_RATIO times the lowest loss of its first half, and above it by more than
    RISE_SIGMAS standard errors of the log's row-to-row noise."""
    half = len(ys) // 2
    best, late = min(ys[:half]), median(ys[half:])
    if best <= 0 or late < SHORT_DIVERGE_RATIO * best:
        return []
    # and above the log's own noise, as for longer short logs: one row at its best against
    # the median of the second half (per-batch losses of +-40% double by chance)
    if late - best <= RISE_SIGMAS * row_noise(ys) * math.sqrt(1 + 1 / (len(ys) - half)):
        return []
    i_best = ys.index(best)
    return [Finding(
        "divergence", "error", xs[i_best],
        f"the loss diverges after step {xs[i_best]:.0f}: {_fmt(best)} -> a median of "
        f"{_fmt(late)} over the last {len(ys) - half} of {len(ys)} logged steps",
        causes=DIVERGE_CAUSES, fixes=DIVERGE_FIXES,
    )]


def _repeated(xs: list[float], ys: list[float]) -> list[Finding]:
    """A sequence of REPEAT_ROWS different losses that comes back exactly later: the same
    batches gave the same losses, so the weights did not change in between (a frozen model
    fed the same data order each epoch). Needs values logged to 1e-3 of their size or finer,
    so that a repeat is not chance."""
    if resolution(ys) > 1e-3 * median(abs(y) for y in ys):
        return []
    seen: dict[tuple, int] = {}
    for i in range(len(ys) - REPEAT_ROWS + 1):
        key = tuple(ys[i:i + REPEAT_ROWS])
        if len(set(key)) < 3:
            continue
        j = seen.setdefault(key, i)
        # the same steps again are a log written twice or a replay after a resume, not this
        if i - j >= REPEAT_ROWS and xs[i] != xs[j]:
            return [Finding(
                "no_learning", "error", xs[j],
                f"the losses of steps {xs[j]:.0f}-{xs[j + REPEAT_ROWS - 1]:.0f} "
                f"({', '.join(_fmt(y) for y in key)}) repeat exactly at steps "
                f"{xs[i]:.0f}-{xs[i + REPEAT_ROWS - 1]:.0f}: the same batches gave the same "
                "losses, so the weights did not change in between",
                causes=NOT_UPDATED_CAUSES, fixes=NOT_UPDATED_FIXES,
            )]
    return []


def detect_plateau(run: Run) -> list[Finding]:
    xs, ys = _finite(*run.series(run.loss_key))
    n = len(ys)
    if n < TREND_ROWS or max(ys) == min(ys):
        return []  # too short for a trend; a constant loss is detect_constant's
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
    if n < TREND_ROWS:
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
    # a loss only a few dozen units of its last logged digit above zero (0.004 at 4 decimals)
    # has a large relative noise from the digits it lacks: below NOISE_UNITS units the log
    # cannot tell oscillation from rounding
    res = resolution(ys)
    absolute = 1.4826 * median(abs(y - t) for y, t in zip(ys[half:], trend, strict=True))
    if absolute <= NOISE_UNITS * res:
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
        pairs = sorted(zip(*run.series(run.loss_key), strict=True))  # by step, for bisect
        lx, ly = [p[0] for p in pairs], [p[1] for p in pairs]
        res = resolution(ly)
        effects = [_loss_effect(lx, ly, res, xs[i]) for i, _ in hits]
        harmed = [(h, e) for h, e in zip(hits, effects, strict=True) if e[0] is not False]
        i = harmed[0][0][0] if harmed else hits[0][0]  # the step the finding points at
        text = (f"{len(hits)} gradient-norm spike(s) over {GRAD_SPIKE_FACTOR:.0f}x the local "
                f"median, first at step {xs[hits[0][0]]:.0f} "
                f"({_fmt(hits[0][1])} -> {_fmt(gs[hits[0][0]])})")
        details = [f"step {xs[j]:.0f}: {_fmt(c)} -> {_fmt(gs[j])}; {e[1]}"
                   for (j, c), e in zip(hits, effects, strict=True)]
        if harmed:
            (j, _), (_, why) = harmed[0]
            summary = f"{text}; at step {xs[j]:.0f} {why}"
            severity = "warning"
        else:
            summary = f"{text}; the loss was no higher after any of them ({effects[0][1]})"
            severity = "info"
        findings.append(Finding(
            "grad_explosion", severity, xs[i], summary,
            causes=["a batch with extreme activations; learning rate too high",
                    "no or too loose gradient clipping"],
            fixes=["clip gradients (max norm 1.0 is the usual choice)",
                   "lower the learning rate; look at the data of these steps"],
            details=details,
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


def _loss_effect(lx: list[float], ly: list[float], res: float,
                 step: float) -> tuple[bool | None, str]:
    """Did the loss (ly at the sorted steps lx, logged at resolution res) get worse after a
    grad-norm spike at `step`? (True/False, or None when the log cannot tell: no loss, or
    too few rows on a side), with the numbers.

    The median of up to GRAD_EFFECT_ROWS loss rows after the step against as many before it:
    clipping and Adam's normalisation absorb most such spikes, and a spike the loss never
    noticed needs no action. Worse means above the level before by 2 robust sigmas of that
    window, 2% and one unit of the logged resolution."""
    from bisect import bisect_left, bisect_right

    if not ly:
        return None, "no loss logged to judge its effect"
    k = max(MIN_ROWS, min(GRAD_EFFECT_ROWS, len(ly) // 10))
    lo, hi = bisect_left(lx, step), bisect_right(lx, step)
    before, after = ly[max(0, lo - k):lo], ly[hi:hi + k]
    if any(not math.isfinite(y) for y in after):
        return True, "the loss went non-finite after it"
    before = [y for y in before if math.isfinite(y)]
    if len(before) < MIN_ROWS or len(after) < MIN_ROWS:
        return None, f"too few loss rows around it to judge its effect ({len(after)} after)"
    b, a = median(before), median(after)
    sigma = 1.4826 * median(abs(y - b) for y in before)
    margin = max(SPIKE_HARM_SIGMAS * sigma, SPIKE_HARM_REL * abs(b), res)
    numbers = f"loss median {_fmt(b)} in the {len(before)} rows before, {_fmt(a)} after"
    if a - b > margin:
        return True, f"the loss rose: {numbers}"
    return False, numbers


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


LAYER_JUMP = 10.0  # a layer's norm 10x its median in the earlier per-layer rows


def detect_layer_grads(run: Run) -> list[Finding]:
    """Where a non-finite or spike step started, from `train --grad-stats per-layer` rows:
    the first layer (in model order, input first) whose gradient norm is not finite, else
    the first whose norm is LAYER_JUMP times its median in the earlier rows (else the one
    that grew most). Info: the nan and spike findings carry the severity; this names the
    layer to look at."""
    from llmtk.io.metrics import decode_value

    stats = [e for e in run.events if e.get("event") == "grad_stats"]
    marked = next((e for e in stats if e.get("why") in ("nan", "spike")), None)
    if marked is None:
        return []
    layers = {k[len("grad_norm/"):]: decode_value(v) for k, v in marked.items()
              if k.startswith("grad_norm/")}
    step, why = marked.get("step", 0), marked["why"]
    bad = [name for name, v in layers.items() if not (isinstance(v, int | float)
                                                         and math.isfinite(v))]
    head = f"per-layer gradient norms at step {step:.0f} ({why} step)"
    if bad:
        summary = (f"{head}: first non-finite in {bad[0]} ({len(bad)} of {len(layers)} "
                   f"layers non-finite: {', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''})")
    else:
        earlier = [e for e in stats if e.get("step", 0) < step]
        ratios = {}
        for name, v in layers.items():
            before = [decode_value(e.get(f"grad_norm/{name}")) for e in earlier]
            before = [b for b in before if isinstance(b, int | float) and math.isfinite(b)]
            if before and median(before) > 0:
                ratios[name] = v / median(before)
        jumped = [name for name, r in ratios.items() if r >= LAYER_JUMP]
        if jumped:
            summary = (f"{head}: jumped first in {jumped[0]} ({ratios[jumped[0]]:.0f}x its "
                       f"median in the {len(earlier)} earlier per-layer rows)")
        elif ratios:
            top = max(ratios, key=ratios.__getitem__)
            summary = f"{head}: grew most in {top} ({ratios[top]:.1f}x its earlier median)"
        else:
            top = max(layers, key=layers.__getitem__)
            summary = (f"{head}: largest in {top} ({_fmt(layers[top])}; no earlier per-layer "
                       "rows to compare with: --grad-stats-every N gives them)")
    return [Finding(
        "layer_grads", "info", step, summary,
        causes=["the named layer is where the instability enters: attention logits, a norm "
                "or an embedding row fed extreme values"],
        fixes=["look at that layer's weights and activations on this step's batch",
               "QK-norm, a lower lr for that parameter group, or z-loss for the logits"],
    )]


EVAL_DROP = 0.02  # an accuracy 2 points below its best (perplexity: 2% above)


def detect_eval_regression(run: Run) -> list[Finding]:
    """A task metric (`eval` rows) getting worse since its best evaluation, with the
    training loss at the same steps, so "loss improves, the task degrades" is plain."""
    names = sorted({k for row in run.rows for k in row if k.startswith("eval/")})
    tx, ty = _finite(*run.series("loss"))
    findings = []
    for name in names:
        xs, ys = _finite(*run.series(name))
        if len(ys) < 2:
            continue
        lower = name.rsplit("/", 1)[-1] in LOWER_IS_BETTER
        i_best = (min if lower else max)(range(len(ys)), key=ys.__getitem__)
        best, last = ys[i_best], ys[-1]
        worse = last > best * (1 + EVAL_DROP) if lower else last < best - EVAL_DROP
        if not worse:
            continue
        loss_then = next((y for x, y in zip(tx, ty, strict=True) if x >= xs[i_best]), None)
        detail = ""
        if loss_then is not None and ty and ty[-1] < loss_then:
            detail = f" while the training loss fell {_fmt(loss_then)} -> {_fmt(ty[-1])}"
        findings.append(Finding(
            "eval_regression", "warning", xs[i_best],
            f"{name[5:]} got worse since its best at step {xs[i_best]:.0f} "
            f"({_fmt(best)} -> {_fmt(last)} at step {xs[-1]:.0f}){detail}",
            causes=["over-fitting the fine-tuning data or forgetting (catastrophic forgetting "
                    "of what the base model knew)", "a data mix that drifted from the task"],
            fixes=["read the flipped items in OUT/eval/STEP/TASK.bad.jsonl",
                   "keep the checkpoint of the best evaluation; lower the learning rate, fewer "
                   "epochs, or mix some pre-training data back in"],
            end_step=xs[-1],
        ))
    return findings


def detect_rollbacks(run: Run) -> list[Finding]:
    """`llmtk train --on-spike rollback` events: the spike its rows no longer show (they were
    redone), with the data it skipped. Info: the trainer handled it."""
    found = [e for e in run.events if e.get("event") == "rollback"
             and isinstance(e.get("from_step"), int | float)]
    if not found:
        return []
    shown = ", ".join(f"{e['from_step']:.0f} (back to {e.get('to_step', 0):.0f})"
                      for e in found[:8]) + (" ..." if len(found) > 8 else "")
    return [Finding(
        "rollback", "info", found[0]["from_step"],
        f"{len(found)} loss spike(s) rolled back by --on-spike rollback, at step(s) {shown}; "
        "their batches were skipped",
        causes=["a bad batch (garbage, repeated or extreme documents) or a learning rate at "
                "the edge of stability"],
        fixes=["read the skipped documents; if they are garbage, filter the data (llmtk "
               "clean) before the next run"],
        steps=[e["from_step"] for e in found])]


def detect_checkpoint_failed(run: Run) -> list[Finding]:
    """`llmtk train` events of checkpoints that could not be written (`checkpoint_failed`:
    a full disk, no permission) or that did not read back whole (`checkpoint_verified`
    with ok false, --verify-every): the run can only resume from an older one."""
    failed = [e for e in run.events if e.get("event") == "checkpoint_failed"]
    unsound = [e for e in run.events
               if e.get("event") == "checkpoint_verified" and e.get("ok") is False]
    findings = []
    if failed:
        e = failed[-1]
        full = e.get("error") in ("ENOSPC", "EDQUOT")
        free = e.get("free_bytes")
        free_text = "" if not isinstance(free, int | float) else f", {free / 1e9:.2f} GB free"
        findings.append(Finding(
            "checkpoint_failed", "error", failed[0].get("step", 0),
            f"{len(failed)} checkpoint(s) could not be written, the last at step "
            f"{e.get('step')}: {e.get('path')} ({e.get('error') or 'error'}{free_text})",
            causes=["the disk or quota holding the run directory is full" if full else
                    "the run directory (or its checkpoints/ folder) is not writable by "
                    "the run" if e.get("error") in ("EACCES", "EPERM", "EROFS") else
                    e.get("message") or "the write failed"],
            fixes=["free space (or raise the quota) where OUT/checkpoints lives, or lower "
                   "--keep-checkpoints; a checkpoint needs about 16 bytes per parameter"
                   if full else "fix the permissions of OUT/checkpoints (or the mount)",
                   "then rerun the same command: it resumes from the last complete "
                   "checkpoint (the failed one left nothing behind)"],
            details=[str(x.get("message") or x.get("path")) for x in failed],
            steps=[x.get("step", 0) for x in failed]))
    if unsound:
        findings.append(Finding(
            "checkpoint_failed", "error", unsound[0].get("step", 0),
            f"{len(unsound)} checkpoint(s) did not read back whole right after they were "
            f"written (--verify-every), the first at step {unsound[0].get('step')}: "
            f"{unsound[0].get('problem')}",
            causes=["storage that corrupts or loses writes (a failing disk, a network file "
                    "system without close-to-open consistency)"],
            fixes=["check the storage; `llmtk train verify RUN` proves the newest "
                   "checkpoint before you rely on it (a resume skips a corrupt one)"],
            steps=[x.get("step", 0) for x in unsound]))
    return findings


DETECTORS = (detect_nan, detect_spikes, detect_divergence_and_rebound, detect_constant,
             detect_plateau,
             detect_noise, detect_grad_explosions, detect_overfitting, detect_resume_jumps,
             detect_eval_regression, detect_layer_grads, detect_rollbacks,
             detect_checkpoint_failed, detect_collapsed_routing)
DETECTORS += RANK_DETECTORS  # the ranks of a multi-process run (curves/ranks.py)


def diagnose(run: Run) -> list[Finding]:
    findings = [f for detector in DETECTORS for f in detector(run)]
    order = {"error": 0, "warning": 1, "info": 2}
    trace(run, findings)
    return sorted(findings, key=lambda f: (order[f.severity], f.step))


TRACED = ("spike", "spikes", "nan", "rollback")  # findings whose batch may be the cause
TRACED_STEPS = 8  # commands per finding at most


def trace(run: Run, findings: list[Finding]) -> None:
    """For an llmtk run (metrics.jsonl beside its config.json), give each spike or NaN
    finding the `llmtk train batch` command that prints the documents of its step(s)."""
    import os

    if run.format != Run.format or not os.path.isfile(run.path):
        return
    directory = os.path.dirname(run.path) or "."
    if not os.path.exists(os.path.join(directory, "config.json")):
        return
    import shlex

    for f in findings:
        if f.kind == "rollback":  # its step was redone on later data: the skipped data
            f.commands = [f"llmtk train batch {shlex.quote(directory)} --skipped"]
        elif f.kind in TRACED:
            # the message's placeholder (`llmtk train batch RUN --step N`) becomes this run
            here = f"train batch {shlex.quote(directory)} "
            f.summary = f.summary.replace("train batch RUN ", here)
            steps = sorted({int(s) for s in (f.steps or [f.step])})[:TRACED_STEPS]
            f.commands = [f"llmtk train batch {shlex.quote(directory)} --step {s}"
                          for s in steps]


def _short_note(ys: list[float]) -> str:
    """What a log of fewer than TREND_ROWS rows was judged for, and how large a rise it can
    show at all (its own row noise decides)."""
    n = len(ys)
    note = (f"a short log ({n} rows) is judged for what its length shows: NaN at any "
            f"length, a constant loss from {MIN_ROWS} rows, spikes from 8, a plateau or "
            f"oscillation from {TREND_ROWS}; ")
    if n < MIN_ROWS:
        return note + f"a rising loss from {MIN_ROWS}"
    if n < SHORT_ROWS:
        return note + (f"a rising loss only when the second half's median is "
                       f"{SHORT_DIVERGE_RATIO}x the first half's lowest and above it by "
                       f"{RISE_SIGMAS:.0f} standard errors of this log's row-to-row noise")
    margin = short_rise_margin(n, row_noise(ys))
    level = abs(median(ys))
    return note + (f"a rising loss (divergence, rebound) only when the median of the last "
                   f"{max(3, n // 3)} rows is above the lowest before by more than "
                   f"{_fmt(margin)} ({margin / level * 100:.0f}% of the loss: "
                   f"{RISE_SIGMAS:.0f} standard errors of this log's row-to-row noise)"
                   if level > 0 else "")


def overview(run: Run) -> dict:
    """Headline numbers of a run for the report."""
    xs, ys = _finite(*run.series(run.loss_key))
    out: dict = {"run": run.name, "path": run.path, "format": run.format, "rows": len(run.rows),
                 "curve": run.loss_key}
    notes = list(run.notes)
    if len(ys) < TREND_ROWS:  # say what a short log could and could not be judged for
        notes.append(_short_note(ys))
    if notes:
        out["notes"] = notes
    if ys:
        tail = ys[-min(FINAL_ROWS, len(ys)):]
        # final_loss is the median of the last rows (one noisy batch does not decide it);
        # last_loss is the last logged value, shown beside it
        res = resolution(ys)
        out.update(first_step=xs[0], last_step=xs[-1], first_loss=ys[0], last_loss=ys[-1],
                   final_loss=median(tail), final_rows=len(tail), best_loss=min(ys),
                   spike_score=round(spike_score(ys, res), 6))
        if res:
            out["resolution"] = res
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
