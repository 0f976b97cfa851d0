r"""Yıldırım & Ermiş 2019/2020, Theorem 1, shown empirically on a small example (issue #41).

Theorem 1: if one row changes the log-likelihood ratio of a move by at most :math:`c\,n^{-\alpha}`
(Assumption A1), the penalty algorithm run for

.. math:: k(n) = \lfloor k_0\, n^{2\alpha} / \log n \rfloor

iterations with a noise variance :math:`\sigma^2` on the log ratio that **does not grow with n**
is :math:`(\epsilon_{n,k(n)}, \delta_{n,k(n)})`-DP with :math:`\epsilon = O(1)` (eq. 3) and
:math:`\delta = o(1/n)` (eq. 4, for :math:`\beta > 1`).

The example: :math:`y_i \sim \mathcal N(\theta, 1)`, prior :math:`\mathcal N(0, 10^2)`, data drawn
from :math:`\mathcal N(0.5, 1)`, conjugate exact posterior. ``DPPenalty`` with a random-walk
proposal of scale :math:`1.5/\sqrt n` (the posterior's scale) clips each row's ratio to
:math:`\pm b\,|\theta'-\theta|` with :math:`b = 4`, so one row changes a move's ratio by at most
:math:`2b|\theta'-\theta| \propto n^{-1/2}`: A1 with :math:`\alpha = 1/2`. For n = 10³, 10⁴, 10⁵ the
kernel is given the theorem's k(n) (with :math:`k_0 = 1`) and the budget :math:`\epsilon = 4`,
:math:`\delta = n^{-\beta}` with :math:`\beta = 1.1`, and **calibrates its own noise** with the
library's accountant (exact Gaussian composition, thesis Thm 6). What the theorem predicts,
and the run measures:

* the calibrated noise on the log ratio of a typical move, ``sigma_typical`` = noise
  multiplier × 2b × proposal scale, stays constant in n (the theorem's fixed σ);
* so the acceptance rate and the accuracy against the exact posterior (mean error in
  posterior standard deviations, sd ratio) do not degrade as n grows, while k(n) grows as
  n / log n;
* the theorem's own bound (3) at that noise, ``epsilon_thm1`` (with :math:`c/\sigma =
  \sqrt n / \text{nm}`), is also constant in n but looser than the ledger's ε = 4 (it uses
  advanced composition).

``python benchmarks/yildirim_thm1.py --out DIR`` (about 1–3 CPU-minutes with one thread) writes
``DIR/yildirim_thm1.csv`` (one row per n and repeat) and ``yildirim_thm1.png``;
``--quick`` runs n = 10³ only.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

B_CLIP = 4.0
STEP = 1.5
PRIOR_SD = 10.0
EPSILON = 4.0
BETA = 1.1
K0 = 1.0
THETA_STAR = 0.5  # the simulation's true θ: a public start, as the thesis starts near θ*
COLUMNS = ["n", "repeat", "k", "delta", "noise_multiplier", "sigma_typical", "epsilon_ledger", "epsilon_thm1",
           "acceptance", "mean_error_sd", "sd_ratio", "seconds"]


def k_of_n(n: int, k0: float = K0, alpha: float = 0.5) -> int:
    """Theorem 1's iteration count :math:`\\lfloor k_0 n^{2\\alpha} / \\log n \\rfloor`.

    >>> k_of_n(1000), k_of_n(10_000), k_of_n(100_000)
    (144, 1085, 8685)
    """
    return int(math.floor(k0 * n ** (2 * alpha) / math.log(n)))


def epsilon_thm1(c_over_sigma: float, k0: float = K0, alpha: float = 0.5, beta: float = BETA) -> float:
    """The right-hand side of Theorem 1's eq. (3)."""
    bp = 2 * alpha + beta
    return 2 * math.sqrt(k0 * bp * beta) * c_over_sigma + 4 * k0 * c_over_sigma ** 2 * bp


def data(n: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return THETA_STAR + torch.randn(n, generator=g, dtype=torch.float64)


def model(y):
    import pyro
    import pyro.distributions as dist

    theta = pyro.sample("theta", dist.Normal(0.0, PRIOR_SD))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("obs", dist.Normal(theta, 1.0), obs=y)


def exact_posterior(y):
    prec = 1.0 / PRIOR_SD ** 2 + y.shape[0]
    return float(y.sum()) / prec, prec ** -0.5


def run_cell(n: int, repeat: int) -> dict:
    import pyro
    import torch
    from pyro.infer import MCMC
    from pyro.infer.autoguide.initialization import init_to_value

    import pyro_dp
    from pyro_dp import DPPenalty

    y = data(n)
    k = k_of_n(n)
    delta = n ** -BETA
    kern = DPPenalty(model, STEP / math.sqrt(n), llr_clip=B_CLIP, epsilon=EPSILON, delta=delta, num_iterations=k,
                     seed=repeat, init_strategy=init_to_value(values={"theta": torch.tensor(THETA_STAR, dtype=torch.float64)}),
                     jit_compile=True)
    t0 = time.perf_counter()
    pyro.set_rng_seed(repeat)
    mcmc = MCMC(kern, num_samples=k, warmup_steps=0, disable_progbar=True)
    mcmc.run(y)
    secs = time.perf_counter() - t0
    th = mcmc.get_samples()["theta"].double()
    keep = th[k // 2:]
    m, s = exact_posterior(y)
    nm = float(kern.noise_multiplier)
    moves = float((th[1:] != th[:-1]).double().mean())
    return {"n": n, "repeat": repeat, "k": k, "delta": delta, "noise_multiplier": nm,
            "sigma_typical": nm * 2 * B_CLIP * STEP / math.sqrt(n),
            "epsilon_ledger": float(pyro_dp.get_epsilon(mcmc, delta)),
            "epsilon_thm1": epsilon_thm1(math.sqrt(n) / nm), "acceptance": moves,
            "mean_error_sd": abs(float(keep.mean()) - m) / s, "sd_ratio": float(keep.std()) / s, "seconds": secs}


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from experiments.grid import dodge, legend_below, series_style

    ns = sorted({int(r["n"]) for r in rows})

    def mean(col, n):
        v = [float(r[col]) for r in rows if int(r["n"]) == n]
        return sum(v) / len(v)

    def se(col, n):
        v = [float(r[col]) for r in rows if int(r["n"]) == n]
        m = sum(v) / len(v)
        return (sum((x - m) ** 2 for x in v) / max(len(v) - 1, 1) / len(v)) ** 0.5

    fig, axes = plt.subplots(1, 4, figsize=(18, 5.2))
    ax = axes[0]
    ax.plot(ns, [k_of_n(n) for n in ns], label="k(n) = ⌊n / log n⌋ (Thm 1, k₀ = 1, α = ½)", **series_style(0))
    ax.plot(ns, [k_of_n(ns[0]) * n / ns[0] for n in ns], color="0.5", ls=":", label="∝ n (for comparison)")
    ax.set(xscale="log", yscale="log", xlabel="n (rows)", ylabel="iterations k(n) (count)",
           title=f"iterations run: Thm 1's k(n)\n(budget ε = {EPSILON:g}, δ = n^(−{BETA:g}))")
    ax = axes[1]
    ax.errorbar(ns, [mean("sigma_typical", n) for n in ns], yerr=[se("sigma_typical", n) for n in ns], capsize=2,
                label="calibrated noise sd on a typical move's log ratio", **series_style(1))
    ax.set(xscale="log", xlabel="n (rows)", ylabel="noise sd (nats)", ylim=(0, None),
           title="the noise the accountant calibrates\nfor k(n) iterations does not grow with n")
    ax = axes[2]
    for i, (col, lab) in enumerate((("epsilon_ledger", "ε spent, the kernel's ledger (exact composition)"),
                                    ("epsilon_thm1", "ε bound of Thm 1 eq. (3) at the same noise"))):
        ax.errorbar(ns, [mean(col, n) for n in ns], yerr=[se(col, n) for n in ns], capsize=2, label=lab,
                    **series_style(i + 2))
    ax.set(xscale="log", yscale="log", xlabel="n (rows)", ylabel="ε (unitless)",
           title="ε stays O(1): exact ledger vs the\ntheorem's advanced-composition bound")
    ax = axes[3]
    for i, (col, lab) in enumerate((("acceptance", "acceptance rate (0–1)"),
                                    ("mean_error_sd", "|mean − exact mean| / exact sd"),
                                    ("sd_ratio", "sample sd / exact sd"))):
        ax.errorbar(dodge(ns, i, 3, width=0.1), [mean(col, n) for n in ns], yerr=[se(col, n) for n in ns],
                    capsize=2, label=lab, **series_style(i + 4))
    ax.axhline(1.0, color="k", ls=":", lw=1, label="exact posterior (sd ratio 1)")
    ax.set(xscale="log", xlabel="n (rows)", ylabel="value (unitless)",
           title="chain quality after k(n) iterations\n(second half kept)")
    for ax in axes:
        ax.grid(alpha=0.3)
    reps = len({r["repeat"] for r in rows})
    fig.suptitle(f"Yıldırım & Ermiş Theorem 1, empirically: DP penalty on a Gaussian mean, mean ± s.e. over "
                 f"{reps} repeats")
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - 1.0 / fig.get_figheight())
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results")
    ap.add_argument("--quick", action="store_true", help="n = 10³ only, 2 repeats")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--plot-only", metavar="CSV", help="redraw the figure from a CSV of an earlier run")
    a = ap.parse_args(argv)
    if a.plot_only:
        with open(a.plot_only, newline="") as fh:
            plot(list(csv.DictReader(fh)), os.path.join(a.out, "yildirim_thm1.png"))
        return 0
    import torch

    torch.set_num_threads(1)
    ns = [1000] if a.quick else [1000, 10_000, 100_000]
    reps = 2 if a.quick else a.repeats
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for n in ns:
        for r in range(reps):
            row = run_cell(n, r)
            rows.append(row)
            print(" ".join(f"{c}={row[c]:.4g}" if isinstance(row[c], float) else f"{c}={row[c]}" for c in COLUMNS),
                  flush=True)
    path = os.path.join(a.out, "yildirim_thm1.csv")
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        w.writerows({c: repr(v) if isinstance(v, float) else v for c, v in row.items()} for row in rows)
    plot(rows, os.path.join(a.out, "yildirim_thm1.png"))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
