"""Synthetic training curves with known problems (and healthy ones that must stay quiet).

Shared by tests/test_diagnose.py and benchmarks/diagnose_calibration.py. Each case is
rows of llmtk's metrics.jsonl plus the finding kind `diagnose` must raise at warning
or error level (None: a healthy run, which must raise nothing above info).
"""

import math
import random


def curve(steps=600, noise=0.01, seed=0, floor=2.0, scale=4.0, tau=120.0):
    rng = random.Random(seed)
    return [floor + scale * math.exp(-s / tau) + rng.gauss(0, noise) for s in range(steps)]


def rows_of(losses, extra=None, events=(), lr=3e-4):
    rows = []
    for s, loss in enumerate(losses):
        row = {"step": s, "loss": loss, "lr": lr, "grad_norm": 1.0, "tokens": s * 1024}
        row.update((extra or {}).get(s, {}))
        rows.append(row)
    rows.extend(events)
    rows.sort(key=lambda r: r["step"])
    return rows


def healthy():
    return rows_of(curve())


def healthy_noisy_with_blips(seed=3):
    """Like the real GPT-2-scale logs: 2% batch noise and a one-batch jump every ~300
    steps that is gone the next step, a cosine schedule, a little grad-norm noise."""
    rng = random.Random(seed)
    n = 3000
    losses = curve(n, noise=0.06, seed=seed, floor=3.3, scale=7.0, tau=300.0)
    for s in range(150, n, 300):
        losses[s + rng.randrange(50)] += rng.uniform(0.3, 0.6)
    extra = {s: {"lr": 6e-4 * 0.5 * (1 + math.cos(math.pi * s / n)),
                 "grad_norm": 0.8 + 0.2 * rng.random()} for s in range(n)}
    return rows_of(losses, extra=extra)


def nan():
    losses = curve()
    losses[400:] = [math.nan] * 200
    return rows_of(losses, events=[{"step": 400, "event": "nan",
                                    "bad_params": ["blocks.3.attn.wq.weight"]}])


def spike_not_recovering():
    losses = curve()
    losses[350:] = [v + 1.5 for v in losses[350:]]
    return rows_of(losses)


def spike_with_lasting_harm():
    losses = curve()
    losses[350] += 1.5
    losses[351] += 0.8
    losses[352:] = [v + 0.15 for v in losses[352:]]  # recovers, but ~7% above its trend
    return rows_of(losses)


def divergence():
    base = curve()
    return rows_of(base[:400] + [base[399] + 0.02 * i for i in range(200)])


def plateau():
    return rows_of(curve(tau=30.0))  # learns fast, then flat for most of the run


def oscillation():
    return rows_of([v * (1.25 if s % 2 else 0.8) for s, v in enumerate(curve())])


def overfitting():
    extra = {}
    for s in range(0, 600, 50):
        extra[s] = {"val_loss": 2.3 + 4 * math.exp(-s / 120) + (0.004 * (s - 250) if s > 250
                                                                  else 0)}
    return rows_of(curve(), extra=extra)


def grad_explosion(harm=0.15):
    """A grad-norm spike at step 420 after which the loss climbs by `harm` over 10 steps and
    stays up (harm=0: the loss never notices it, as most real ones)."""
    extra = {s: {"grad_norm": 1.0 + 0.01 * (s % 7)} for s in range(600)}
    extra[420] = {"grad_norm": 80.0}
    losses = curve()
    losses[421:] = [v + harm * min(1.0, (i + 1) / 10) for i, v in enumerate(losses[421:])]
    return rows_of(losses, extra=extra)


def resume_jump():
    losses = curve()
    losses[301:320] = [v + 0.8 for v in losses[301:320]]
    return rows_of(losses, events=[{"step": 300, "event": "resume"}])


def growing_spikes():
    """Spikes that recover, but come more and more often: an unstable run."""
    losses = curve(1200)
    for s in (900, 960, 1010, 1050, 1090, 1130, 1170):
        losses[s] += 1.2
    return rows_of(losses)


def large_recovered_spike():
    """One batch takes the loss to 4.7x its running value with a 40x gradient-norm spike,
    and the loss is back within 20 steps (the excess halves at each step): nothing lasting,
    and too brief for the spike score, but that batch deserves a look."""
    n = 2000
    extra = {s: {"grad_norm": 1.0 + 0.01 * (s % 7)} for s in range(n)}
    extra[1200] = {"grad_norm": 40.0}
    losses = curve(n, tau=400.0)
    jump = 3.7 * losses[1200]
    for i in range(20):
        losses[1200 + i] += jump * 0.5 ** i
    return rows_of(losses, extra=extra)


CASES = {
    "healthy": (healthy, None),
    "healthy, noisy with one-batch jumps": (healthy_noisy_with_blips, None),
    "nan": (nan, "nan"),
    "spike that does not recover": (spike_not_recovering, "spike"),
    "spike with lasting harm": (spike_with_lasting_harm, "spike"),
    "spikes growing in frequency": (growing_spikes, "spikes"),
    "divergence": (divergence, "divergence"),
    "plateau": (plateau, "plateau"),
    "oscillation": (oscillation, "oscillation"),
    "overfitting": (overfitting, "overfitting"),
    "grad explosion": (grad_explosion, "grad_explosion"),
    "resume jump": (resume_jump, "resume_jump"),
    "large spike that recovers": (large_recovered_spike, "spike"),
}
