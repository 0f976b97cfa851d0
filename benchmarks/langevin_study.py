r"""Is the noise-limited regime the accept test's? Full-batch DP Langevin on the suite's GLMs (#40).

A study, not a private run: the chain's centre and coordinates come from the **non-private** NUTS
posterior (an oracle, as ``benchmarks/whitening.py``'s ``oracle`` mode), so it measures what the
algorithm could deliver with a perfect private start and metric, not what a private run delivers.

The question. At ε = 2 and N = 5·10⁴ the default paths of DPPenalty and DPHMC are noise-limited
(``docs/results.md``, default suite: smallest sd ratios 0.29-0.56, effective sample size 2-6):
the penalty test's noise grows with the move, so the accepted move shrinks as the run grows and the
effective sample size stays at about :math:`\mu^2 N / (c\, b^2)` whatever the run length. A
sampler without an accept test has no such limit. The unadjusted Langevin algorithm (ULA) with the
full data's clipped gradient sum,

.. math:: u' = u + \tfrac{\eta}{2}\big(\textstyle\sum_i \mathrm{clip}_C(\nabla_u \ell_i) + \nabla_u \log p
          + \xi\big) + \zeta,\qquad \xi \sim \mathcal N(0, s^2 I),\ \zeta \sim \mathcal N(0, (\eta - \eta^2 s^2/4) I),

releases one Gaussian mechanism per iteration (sensitivity :math:`2C` under substitution, noise sd
:math:`s`). With :math:`T` iterations Gaussian-DP composition (Dong, Roth & Su 2022, Cor. 3.3)
gives :math:`\mu = 2C\sqrt T / s`, and :math:`\mu` is set from (ε, δ) by their Cor. 2.13. The
release's noise, :math:`\tfrac{\eta}{2}s`, is part of Langevin's :math:`\sqrt\eta` diffusion
("privacy for free", Wang, Fienberg & Smola 2015) as long as :math:`\eta \le 4/s^2`; the
study takes the largest such step, capped at 0.3 in whitened units. The cap bounds ULA's
discretisation bias to a variance factor :math:`1/(1-\eta/4) \le 1.08` on a standard Gaussian.
The data-free :math:`\zeta` tops the noise up to exactly :math:`\sqrt\eta`. The clip :math:`C` is
the ``Q`` quantile of the whitened per-example gradient norms at the centre. There is no accept
test, so clipping biases the chain, and a low quantile shows it.

Measured (2026-11-27, ``docs/tuning.md``, "Without an accept test"): worst |mean error| in NUTS
sds, the range of sd ratios against NUTS, the smallest effective sample size (Pyro's).

Run: ``python benchmarks/langevin_study.py EPS MODEL DATA_SEED [ETA] [Q]``: MODEL is ``linear``,
``logistic`` or ``poisson`` (the default suite's, N = 5·10⁴), ETA ``0`` (default) for the rule
above, Q the clip quantile (default 0.999). ``ETA`` = ``card`` runs instead the private default
path built from this study, the card's line ``MCMC(DPSGLD(model, epsilon=EPS), num_samples=1000,
warmup_steps=500)``, and reports the same numbers and its warnings. One thread, 20-60 s a run;
the NUTS reference is cached in ``langevin_study_nuts.json`` in the working directory.
"""
import json
import math
import os
import sys

import torch
from scipy import optimize, stats
from pyro.ops.stats import effective_sample_size

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import default_suite as ds  # noqa: E402
import pyro_dp  # noqa: E402

POSITIVE = {"sigma"}  # the suite GLMs' positive sites: unconstrained coordinate log(sigma)
T, WARMUP, ETA_CAP, DELTA = 1500, 500, 0.3, 1e-5


def gdp_mu(eps: float, delta: float) -> float:
    """The μ of μ-GDP that is exactly (ε, δ)-DP (Dong, Roth & Su 2022, Cor. 2.13)."""
    f = lambda mu: stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2) - delta
    return optimize.brentq(f, 1e-4, 50.0)


def reference(name, dseed):
    """The suite model's data (seed ``dseed``) and NUTS's posterior summary of it."""
    sm = ds.get_suite_model(name)
    args = sm.data(seed=dseed)
    return sm, args, ds.nuts_reference(name, args, num_samples=1000, warmup_steps=500, seed=0,
                                       cache="langevin_study_nuts.json", n=f"{sm.n}-dseed{dseed}")


def card(eps, name, dseed):
    """The private default path, ``MCMC(DPSGLD(model, epsilon=eps), num_samples=1000, warmup_steps=500)``."""
    import warnings
    from pyro.infer import MCMC

    sm, args, ref = reference(name, dseed)
    k = pyro_dp.DPSGLD(sm.model, epsilon=eps)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = MCMC(k, num_samples=1000, warmup_steps=500, disable_progbar=True)
        mcmc.run(*args)
    coords = ds.compare(mcmc.get_samples(), ref)
    ess = min(float(effective_sample_size(v.reshape(1, v.shape[0], -1), chain_dim=0, sample_dim=1).min())
              for v in mcmc.get_samples().values())
    warned = [str(w.message)[:120] for w in caught if issubclass(w.category, pyro_dp.SamplingWarning)]
    err = max(c["mean_err"] for c in coords.values())
    ratios = [c["sd_ratio"] for c in coords.values()]
    print(f"{name:8s} eps={eps:g} data seed {dseed}: card's line | worst |dmean|/sd {err:.2f}, sd ratios "
          f"{min(ratios):.2f}-{max(ratios):.2f}, eps spent {k.get_epsilon(DELTA):.3f}, step {k.step_size:.3g}, "
          f"clip {k.grad_clip:.3g}, smallest ESS {ess:.0f}, warned {len(warned)}: {warned}")


def main(eps, name, dseed, eta=0.0, quantile=0.999):
    sm, args, ref = reference(name, dseed)
    lik = pyro_dp.PrivateLikelihood(sm.model, args, seed=0)
    names = lik.coordinate_names()
    mean, sd = ref["mean"], ref["sd"]
    # the oracle's centre and diagonal scales in unconstrained coordinates (delta method for log sigma)
    z0 = torch.tensor([math.log(mean[n]) if n in POSITIVE else mean[n] for n in names], dtype=torch.float64)
    W = torch.tensor([sd[n] / mean[n] if n in POSITIVE else sd[n] for n in names], dtype=torch.float64)
    mu = gdp_mu(eps, DELTA)
    C = float(torch.quantile((lik.per_example_grad(z0)[1] * W).norm(dim=1), quantile))
    s = 2 * C * math.sqrt(T) / mu
    if eta <= 0:
        eta = min(ETA_CAP, 4 / s ** 2)
    if eta * s ** 2 / 4 > 1 + 1e-12:
        sys.exit(f"eta={eta} puts more release noise in a step than Langevin's diffusion (eta <= {4 / s ** 2:.3g})")
    gen = torch.Generator().manual_seed(1000 + dseed)
    u, draws = torch.zeros(len(names), dtype=torch.float64), []
    for _ in range(T):
        z = z0 + W * u
        g = lik.per_example_grad(z)[1] * W
        clipped = (g * torch.clamp(C / g.norm(dim=1, keepdim=True), max=1.0)).sum(0)
        released = clipped + s * torch.randn(len(names), generator=gen, dtype=torch.float64)
        top_up = math.sqrt(max(eta - eta ** 2 * s ** 2 / 4, 0.0)) * torch.randn(len(names), generator=gen, dtype=torch.float64)
        u = u + eta / 2 * (released + lik.grad_log_prior(z) * W) + top_up
        draws.append(z0 + W * u)
    x = torch.stack(draws[WARMUP:])
    cons = {n: (x[:, j].exp() if n in POSITIVE else x[:, j]) for j, n in enumerate(names)}
    err = max(abs(float(cons[n].mean()) - mean[n]) / sd[n] for n in names)
    ratios = [float(cons[n].std()) / sd[n] for n in names]
    ess = float(effective_sample_size(x[None], chain_dim=0, sample_dim=1).min())
    print(f"{name:8s} eps={eps:g} data seed {dseed}: eta={eta:.3f} C={C:.4g} s={s:.4g} | worst |dmean|/sd "
          f"{err:.2f}, sd ratios {min(ratios):.2f}-{max(ratios):.2f}, smallest ESS {ess:.0f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    a = sys.argv[1:]
    if len(a) < 3:
        sys.exit(__doc__.split("Run: ")[1])
    if len(a) > 3 and a[3] == "card":
        card(float(a[0]), a[1], int(a[2]))
    else:
        main(float(a[0]), a[1], int(a[2]), float(a[3]) if len(a) > 3 else 0.0, float(a[4]) if len(a) > 4 else 0.999)
