"""Loss spikes, graded by what they did to the run (see `detect_spikes`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import median

from llmtk.curves.common import Finding, resolution, rolling_stats
from llmtk.curves.common import finite as _finite
from llmtk.curves.common import fmt as _fmt
from llmtk.curves.common import window as _window
from llmtk.curves.logs import Run

SPIKE_SIGMAS = 6.0  # robust z-score for a loss spike
SPIKE_MIN_REL = 0.05  # ... and at least 5% above the local median
SPIKE_SETTLE = 3  # steps skipped after a spike before measuring the level it left behind
SPIKE_HARM_SIGMAS = 2.0  # lasting harm: the settled level is 2 robust sigmas ...
SPIKE_HARM_REL = 0.02  # ... and 2% above the level just before the spike
SPIKE_GROWTH_MIN = 4  # at least 4 spikes in the last third, 3x as many as in the middle
SPIKE_SCORE_WARN = 0.01  # OLMo 2 spike score above 1% of steps
SPIKE_GRAD_GROWTH = 2.0  # grad norm median doubles between the 2nd and the last quarter
SPIKE_LOOK_RATIO = 2.5  # a recovered spike to 2.5x the running loss: look at its batch


@dataclass
class Spike:
    start: int  # index of the first flagged point
    end: int  # index of the last flagged point of this group
    centre: float  # median of the window before the spike
    sigma: float  # robust standard deviation of that window
    peak: float
    recovered: bool | None  # back near the pre-spike level within the next window; None:
    # too few rows after it to tell (a spike on the last rows of the log)
    lasting: float  # level after the spike minus the pre-spike level (> 0: still higher)


def find_spikes(ys: list[float], res: float = 0.0) -> list[Spike]:
    """Points more than SPIKE_SIGMAS robust sigmas and SPIKE_MIN_REL above the median of
    the preceding window, grouped when at most 3 points apart. `res` is the resolution the
    values were logged with (`common.resolution`): a robust sigma is never less than one
    unit of it, so a loss rounded to 0.0001 that reads 0.0002 after 0.0001 is no spike."""
    n = len(ys)
    w = _window(n)
    if n < w + 3:
        return []
    flagged: list[tuple[int, float, float]] = []
    for i, centre, sigma in zip(range(w, n), *rolling_stats(ys, w), strict=True):
        sigma = max(sigma, 1e-3 * abs(centre), res)
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
        recovered: bool | None = any(y <= centre + 3 * sigma + 0.02 * abs(centre)
                                     for y in after)
        if not recovered and len(after) < SPIKE_SETTLE:
            recovered = None
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


def spike_score(ys: list[float], res: float = 0.0) -> float:
    """OLMo 2's spike score: the share of steps at least 7 standard deviations above the
    rolling average of the previous (up to) 1000 steps. Robust statistics (median, MAD)
    stand in for mean and standard deviation, so one spike does not hide the next.

    detect_spikes and overview both ask it of the same loss: the answer is kept for the
    last few series (its 1000-row rolling medians take seconds on a 100k-row log)."""
    return _spike_score(tuple(ys), res)


@lru_cache(maxsize=4)
def _spike_score(ys: tuple[float, ...], res: float) -> float:
    w = min(1000, max(20, len(ys) // 10))
    if len(ys) <= w:
        return 0.0
    hits = sum(y > c + 7 * max(sg, 1e-6 * abs(c), res)
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


def _grad_jump(run: Run, step: float) -> str:
    """', with the gradient norm 40x its median before' when a grad norm is logged at the
    spike's step, else ''."""
    gx, gs = _finite(*run.series("grad_norm"))
    before = [g for x, g in zip(gx, gs, strict=True) if x < step][-50:]
    at = [g for x, g in zip(gx, gs, strict=True) if x == step]
    if not at or len(before) < 5 or median(before) <= 0:
        return ""
    return f", with the gradient norm {at[0] / median(before):.0f}x its median before"


def _large_spike(run: Run, xs: list[float], ys: list[float], s: Spike) -> Finding:
    """A spike that recovered but reached SPIKE_LOOK_RATIO times the running loss: one batch
    made the model that much worse, so that batch deserves a look (real runs' one-batch jumps
    are +5-60%; garbage, duplicated or mis-tokenised documents give several times the loss)."""
    back = next((i for i in range(s.end + 1, len(ys))
                 if ys[i] <= s.centre + 3 * s.sigma + 0.02 * abs(s.centre)), None)
    within = f" within {xs[back] - xs[s.start]:.0f} steps" if back is not None else ""
    step = xs[s.start]
    return Finding(
        "spike", "warning", step,
        f"loss spike at step {step:.0f}: {_fmt(s.centre)} -> {_fmt(s.peak)} "
        f"({s.peak / s.centre:.1f}x the running loss{_grad_jump(run, step)}); it recovered"
        f"{within}, but a jump this large comes from the data of that step: look at its batch "
        f"(llmtk train batch RUN --step {step:.0f})",
        SPIKE_CAUSES, SPIKE_FIXES, end_step=xs[s.end])


def detect_spikes(run: Run) -> list[Finding]:
    """Loss spikes, with a severity from what they did to the run.

    error:   a spike the loss never came back from (it stays at the new level);
    warning: lasting harm: the level after the spike stays above the level before it,
             spikes that grow in frequency or size over the run, a high spike score,
             or spikes together with a growing gradient norm;
             a spike that recovered but reached SPIKE_LOOK_RATIO times the running loss
             (its batch deserves a look);
    info:    spikes that recover within a few steps and leave the trend where it was
             (noisy batches: every real run has some), reported once, aggregated.
    """
    xs, ys = _finite(*run.series(run.loss_key))
    res = resolution(ys)
    spikes = find_spikes(ys, res)
    if not spikes:
        return []
    findings = []
    for s in spikes:
        if s.recovered is False:
            findings.append(Finding(
                "spike", "error", xs[s.start],
                f"loss spike at {_spike_text(xs, ys, s)}, not recovered: the loss stays at "
                "the new level", SPIKE_CAUSES, SPIKE_FIXES, end_step=xs[s.end]))
        elif s.recovered is None:
            findings.append(Finding(
                "spike", "warning", xs[s.start],
                f"loss spike at {_spike_text(xs, ys, s)}, on the last {len(ys) - s.start} "
                "logged row(s): too few rows after it to tell whether it recovers",
                SPIKE_CAUSES, SPIKE_FIXES, end_step=xs[s.end]))
    benign = [s for s in spikes if s.recovered]
    harmed = [s for s in benign
              if s.lasting > max(SPIKE_HARM_SIGMAS * s.sigma, SPIKE_HARM_REL * abs(s.centre))]
    large = [s for s in benign if s not in harmed and s.centre > 0
             and s.peak >= SPIKE_LOOK_RATIO * s.centre]
    for s in large:
        findings.append(_large_spike(run, xs, ys, s))
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
    score = spike_score(ys, res)
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
               + {True: "recovered", False: "not recovered", None: "at the end of the log"}[
                   s.recovered]
               + f", settled {s.lasting / abs(s.centre) * 100:+.1f}% from the level before"
               for s in spikes]
    if reasons:
        findings.append(Finding("spikes", "warning", xs[spikes[0].start],
                                summary + "; " + "; ".join(reasons) + f"; steps {shown}",
                                ["recurring spikes point to a systematic cause (learning rate, "
                                 "data order, precision) rather than one bad batch",
                                 *SPIKE_CAUSES[1:]], SPIKE_FIXES, details=details,
                                steps=[xs[s.start] for s in spikes]))
    elif len(benign) > len(harmed) + len(large):
        findings.append(Finding("spikes", "info", xs[spikes[0].start],
                                summary + f", all recovered at once (steps {shown})",
                                SPIKE_CAUSES, SPIKE_FIXES,
                                details=details, steps=[xs[s.start] for s in spikes]))
    return findings
