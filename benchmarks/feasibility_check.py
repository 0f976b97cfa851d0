""":func:`pyro_dp.feasibility`'s predicted effective sample size against short runs of the
default path (DPPenalty, whitened by default), four chains per cell on four data sets drawn like
the built-in profiles' (features uniform in the unit ball, coefficients evenly spaced in
[−1, 1], intercept 0.3): the ESS in the slowest direction of the draws (Pyro's estimator), mean
over chains, against the whitened prediction and the unwhitened one (``whiten=False``).

    python benchmarks/feasibility_check.py        # five cells, about 80 s on one thread

Measured 2026-11-27 (docs/choosing.md): measured / whitened prediction 0.78–1.40 in every cell;
measured / unwhitened prediction 1.9–3.0.
"""
import time
import warnings

import torch
from pyro.infer import MCMC
from pyro.ops.stats import effective_sample_size

import pyro_dp
from pyro_dp.default_path.forecast import feasibility
from pyro_dp.models.default_suite import linear_model, logistic_model, unit_ball

CELLS = (("logistic", 5000, 1, 8.0), ("logistic", 5000, 1, 4.0), ("logistic", 5000, 1, 16.0),
         ("logistic", 10_000, 5, 8.0), ("linear", 5000, 1, 64.0))


def profile_data(model, n, d, g):
    """Rows drawn like :func:`pyro_dp.models.profiles.synthetic_scores`' (residual sd 1)."""
    X = unit_ball(n, d, g)
    mean = 0.3 + X @ torch.linspace(-1.0, 1.0, d, dtype=torch.float64)
    if model == "logistic":
        return X, (torch.rand(n, generator=g, dtype=torch.float64) < torch.sigmoid(mean)).double()
    return X, mean + torch.randn(n, generator=g, dtype=torch.float64)


def slowest_ess(samples):
    """ESS of the draws projected on their largest-variance direction (σ on the log scale: the
    unconstrained coordinates the forecast speaks of)."""
    cols = [(v.log() if k == "sigma" else v).reshape(v.shape[0], -1) for k, v in sorted(samples.items())]
    z = torch.cat(cols, dim=1)
    slowest = z @ torch.linalg.eigh(torch.cov(z.T)).eigenvectors[:, -1]
    return float(effective_sample_size(slowest[None, :, None], 0, 1))


def cell(model, n, d, eps, chains=4, num_samples=1000, warmup_steps=500):
    kw = dict(num_rows=n, epsilon=eps, dim=d, num_samples=num_samples, warmup_steps=warmup_steps)
    white, plain = feasibility(model, **kw), feasibility(model, whiten=False, **kw)
    measured = []
    for c in range(chains):
        X, y = profile_data(model, n, d, torch.Generator().manual_seed(100 + c))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the seeded noise's warning and the chain's ESS warnings
            m = MCMC(pyro_dp.DPPenalty(logistic_model if model == "logistic" else linear_model, epsilon=eps, seed=c,
                                       noise_seed=c), num_samples=num_samples, warmup_steps=warmup_steps,
                     disable_progbar=True)
            m.run(X, y)
        measured.append(slowest_ess(m.get_samples()))
    mean = sum(measured) / len(measured)
    return white.ess, plain.ess, mean, measured


def main():
    torch.set_num_threads(1)
    print(f"{'cell':34s} {'whitened':>9s} {'plain':>7s} {'measured':>9s} {'meas/white':>10s} {'meas/plain':>10s}  chains")
    for model, n, d, eps in CELLS:
        t = time.time()
        white, plain, mean, measured = cell(model, n, d, eps)
        print(f"{model} d={d} N={n} eps={eps:<5g}{'':6s} {white:9.1f} {plain:7.1f} {mean:9.1f} {mean / white:10.2f} "
              f"{mean / plain:10.2f}  {[round(x, 1) for x in measured]} ({time.time() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
