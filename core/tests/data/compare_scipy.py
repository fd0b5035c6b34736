"""Generates compare_scipy.json: the reference values core/tests/core_it/compare_scipy.rs
holds rankpulse_core::compare to.

    python3 core/tests/data/compare_scipy.py > core/tests/data/compare_scipy.json

Independent computation: scipy.stats.ttest_ind(candidate, baseline,
equal_var=False) for Welch's difference, standard error, degrees of freedom
and two-sided p-value; scipy.stats.binomtest(wins, wins + losses, 0.5) for
the sign test; scipy.stats.norm.ppf for the lists-needed formula
n = ceil((z(1 - alpha/2) + z(power))^2 * (s_c^2 + s_b^2) / effect^2), with
s^2 the sample variances (ddof = 1). Seeded: the output is reproducible.
"""
import json
import sys

import numpy as np
import scipy
from scipy import stats

rng = np.random.default_rng(20261125)


def arm(n, shape):
    if shape == "beta":
        a, b = rng.uniform(0.3, 5.0, size=2)
        v = rng.beta(a, b, size=n)
    elif shape == "binary":
        v = (rng.uniform(size=n) < rng.uniform(0.02, 0.98)).astype(float)
    else:  # a metric with many exact zeros, like nDCG of lists without clicks
        v = np.where(rng.uniform(size=n) < 0.6, 0.0, rng.beta(2.0, 2.0, size=n))
    # Six decimals: the values are exactly what the JSON carries.
    return [round(float(x), 6) for x in v]


welch = []
sizes = [2, 3, 5, 10, 31, 100, 400, 2000]
for i in range(48):
    nc, nb = int(rng.choice(sizes)), int(rng.choice(sizes))
    shape = ["beta", "binary", "zeros"][i % 3]
    c, b = arm(nc, shape), arm(nb, shape)
    if i % 4 == 0:  # a real difference, so small p-values are covered too
        c = [min(1.0, round(x * 0.8, 6)) for x in c]
    if np.var(c) == 0 and np.var(b) == 0:
        continue
    r = stats.ttest_ind(c, b, equal_var=False)
    vc, vb = np.var(c, ddof=1), np.var(b, ddof=1)
    se = float(np.sqrt(vc / nc + vb / nb))
    df = float((vc / nc + vb / nb) ** 2 / ((vc / nc) ** 2 / (nc - 1) + (vb / nb) ** 2 / (nb - 1)))
    alpha, power, effect = [(0.05, 0.8, 0.01), (0.01, 0.9, 0.02), (0.1, 0.5, 0.05)][i % 3]
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    needed = float(np.ceil(z * z * (vc + vb) / effect**2))
    welch.append(
        {
            "candidate": c,
            "baseline": b,
            "difference": float(np.mean(c) - np.mean(b)),
            "stderr": se,
            "degrees_of_freedom": df,
            "p_value": float(r.pvalue),
            "alpha": alpha,
            "power": power,
            "effect": effect,
            "lists_needed": needed,
        }
    )

sign = []
for wins, losses in [(0, 1), (1, 1), (3, 0), (8, 2), (20, 31), (60, 40), (515, 485), (5200, 4800),
                     (49_700, 50_300), (100_000, 99_000), (3, 30), (250_000, 251_800)]:
    sign.append({"wins": wins, "losses": losses,
                 "p_value": float(stats.binomtest(wins, wins + losses, 0.5).pvalue)})

json.dump({"generator": f"scipy {scipy.__version__}, numpy {np.__version__}", "welch": welch, "sign": sign},
          sys.stdout, indent=None, separators=(",", ":"))
sys.stdout.write("\n")
