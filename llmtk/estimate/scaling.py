"""Chinchilla: compute-optimal tokens and the parametric loss L(N, D) = E + A/N^α + B/D^β.

Two published fits of Hoffmann et al. 2022's approach 3:
- "hoffmann": the constants printed in the Chinchilla paper (eq. 10):
  E = 1.69, A = 406.4, B = 410.7, α = 0.34, β = 0.28.
- "besiroglu" (default): Besiroglu et al. 2024, "Chinchilla Scaling: A replication
  attempt" (arXiv 2404.10102), refit on data read off Hoffmann's plots:
  E = 1.8172, A = 482.01, B = 2085.43, α = 0.3478, β = 0.3658. Its compute-optimal
  tokens per parameter (~20) agree with Hoffmann's approaches 1 and 2; the printed
  Hoffmann constants do not (their optimum drifts far from 20 at large compute).
Losses are nats per token on Chinchilla's MassiveText with its tokenizer: compare
runs with each other, not with another corpus's loss.
"""

from __future__ import annotations

from dataclasses import dataclass

TOKENS_PER_PARAM = 20.0  # Hoffmann et al. 2022: Chinchilla 70B on 1.4T tokens


@dataclass(frozen=True)
class Fit:
    name: str
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    source: str

    def loss(self, n_params: float, tokens: float) -> float:
        return self.E + self.A / n_params**self.alpha + self.B / tokens**self.beta

    def compute_optimal(self, flops: float) -> tuple[float, float]:
        """(N, D) minimising L under C = 6ND (Hoffmann eq. 4): N = G (C/6)^(β/(α+β))."""
        a, b = self.alpha, self.beta
        g = (a * self.A / (b * self.B)) ** (1.0 / (a + b))
        n = g * (flops / 6.0) ** (b / (a + b))
        return n, flops / 6.0 / n


FITS = {
    "besiroglu": Fit("besiroglu", 1.8172, 482.01, 2085.43, 0.3478, 0.3658,
                     "Besiroglu et al. 2024, arXiv 2404.10102, Table 1"),
    "hoffmann": Fit("hoffmann", 1.69, 406.4, 410.7, 0.34, 0.28,
                    "Hoffmann et al. 2022, arXiv 2203.15556, eq. 10"),
}


def chinchilla_tokens(n_params: float) -> float:
    return TOKENS_PER_PARAM * n_params
