"""Exact small-sample statistics for paired success/failure outcomes (no scipy needed).

An experiment here evaluates a dozen to a few hundred games per arm, so the
tests must be exact rather than asymptotic: McNemar's test on discordant pairs
and the sign test are both a two-sided binomial test with p = 1/2, computed
from binomial coefficients.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054
"""Standard normal quantile for a two-sided 95% interval."""


def binomial_two_sided(wins: int, losses: int) -> float:
    """Exact two-sided p of ``wins`` vs ``losses`` under "either is equally likely" (ties are left out).

    ``p = min(1, 2 · P[X ≤ min(wins, losses)])`` with ``X ~ Bin(wins + losses, 1/2)``: McNemar's exact test
    when the counts are discordant pairs, the sign test when they are per-game differences. No discordant
    pair at all gives p = 1.
    """
    if wins < 0 or losses < 0:
        raise ValueError(f"counts must be >= 0, got {wins} and {losses}")
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1))
    return min(1.0, 2 * tail / 2 ** n)


def adjusted_p_values(ps: list[float], method: str) -> list[float]:
    """Family-wise adjusted p-values, in the order given: a verdict compares each with the same ``alpha``.

    ``bonferroni``: ``min(1, m · p)``. ``holm`` (Holm 1979): sort the m p-values, multiply the i-th smallest
    (from 0) by ``m - i``, and carry the running maximum so the adjusted values keep the p-values' order; it
    rejects everything Bonferroni rejects and sometimes more, under the same guarantee. ``none``: unchanged.
    """
    m = len(ps)
    if method == "none":
        return list(ps)
    if method == "bonferroni":
        return [min(1.0, m * p) for p in ps]
    if method != "holm":
        raise ValueError(f"unknown correction {method!r} (none, bonferroni, holm)")
    adjusted, running = [1.0] * m, 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda j: ps[j])):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        adjusted[i] = running
    return adjusted


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of a success proportion (in [0, 1]); ``None`` without observations.

    Unlike the normal approximation it stays inside [0, 1] and does not collapse to a point at 0% or 100%,
    which is where small agents on a dozen games often are. ``successes`` may be fractional (a mean over
    seeds times the number of games).
    """
    if n <= 0:
        return None
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)
