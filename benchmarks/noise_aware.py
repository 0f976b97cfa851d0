r"""Issue 62's one-release mode: how close is ``DPNoiseAware`` to NUTS on the real data?

Models (``pyro_dp.models.default_suite``), N = 10⁴ rows each, data seed = run seed:

* ``logistic5``: ``correlated_logistic_model``, logistic regression on d = 5 features with
  pairwise correlation 0.8 scaled into the unit ball;
* ``linear``: ``linear_model``, intercept + 3 coefficients and an unknown noise scale
  (:math:`\sigma\sim\mathrm{HalfNormal}(2)`, sampled through its log);
* ``mixture`` (the case it approximates poorly): the Welling–Teh two-component mixture of
  ``pyro_dp.models.mixture`` (:math:`\theta_1\sim\mathcal N(0,10)`, :math:`\theta_2\sim\mathcal N(0,1)`,
  :math:`x_i\sim\frac12\mathcal N(\theta_1,2)+\frac12\mathcal N(\theta_1+\theta_2,2)`, data at
  (0, 1)), untempered, written with ``dist.MixtureSameFamily`` as a user would; its posterior has
  two modes (the components swapped), and the reference is the exact grid posterior
  (``gmm_reference``), not NUTS (which, like this kernel, finds one mode).

For each run: ``MCMC(DPNoiseAware(model, epsilon=eps, delta=1e-5), warmup_steps=300,
num_samples=600)`` against Pyro's NUTS on the same data (500 warmup, 1 000 draws, seeded).
Per coordinate of the constrained sites: the mean error in NUTS sds, the sd ratio (DP / NUTS)
and whether the NUTS mean lies inside the DP run's central 90 % interval. The table gives, over
the runs' coordinates, the median and worst mean error, the range of sd ratios, the coverage,
and how many runs warned (``PoorApproximationWarning``). The privacy noise is from OS entropy:
repeated runs differ (use two seed sets for any verdict).

Run: ``python benchmarks/noise_aware.py [--seeds 0-9] [--eps 1,4] [--models logistic5,linear,mixture]``
(one thread; about 10 s per DP run and 10–30 s per NUTS reference).
"""
import argparse
import sys
import time
import warnings

import numpy as np
import pyro
import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_median

from pyro_dp.default_path.noise_aware import DPNoiseAware, PoorApproximationWarning
from pyro_dp.models.default_suite import (correlated_logistic_model, linear_model, make_correlated_logistic_data,
                                          make_linear_data)
import pyro.distributions as dist

from pyro_dp.models.mixture import GMM_LIK_VAR, GMM_PRIOR_VAR, gmm_reference, make_gmm_data

torch.set_num_threads(1)
N, DELTA = 10_000, 1e-5


def flat(samples):
    """``[draws, coordinates]`` of every site, in name order (constrained)."""
    return torch.cat([samples[k].reshape(samples[k].shape[0], -1) for k in sorted(samples)], 1).numpy()


def mixture_model(x):
    """The Welling–Teh mixture (``pyro_dp.models.mixture.gmm_model``'s posterior) as a user writes it."""
    scale = torch.tensor(GMM_PRIOR_VAR, dtype=x.dtype).sqrt()
    theta = pyro.sample("theta", dist.Normal(torch.zeros_like(scale), scale).to_event(1))
    locs = torch.stack([theta[0], theta[0] + theta[1]])
    weights = dist.Categorical(probs=torch.full((2,), 0.5, dtype=x.dtype))
    with pyro.plate("data", x.shape[0]):
        pyro.sample("x", dist.MixtureSameFamily(weights, dist.Normal(locs, GMM_LIK_VAR ** 0.5)), obs=x)


def data(name, seed):
    if name == "logistic5":
        return correlated_logistic_model, make_correlated_logistic_data(N, seed)
    if name == "linear":
        return linear_model, make_linear_data(N, seed)
    if name == "mixture":
        return mixture_model, (make_gmm_data(N, seed),)
    raise SystemExit(f"unknown model {name!r}")


def reference(name, model, args, seed):
    if name == "mixture":  # exact: the grid posterior (bimodal)
        return gmm_reference(args[0], 1.0, num_cells=400).sample(4000, seed=seed).numpy()
    pyro.set_rng_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc = MCMC(NUTS(model, init_strategy=init_to_median), num_samples=1000, warmup_steps=500,
                    disable_progbar=True)
        mcmc.run(*args)
    return flat(mcmc.get_samples())


def dp_run(model, args, eps, seed):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = DPNoiseAware(model, epsilon=eps, delta=DELTA, seed=seed)
        mcmc = MCMC(kernel, num_samples=600, warmup_steps=300, disable_progbar=True)
        mcmc.run(*args)
    warned = any(issubclass(w.category, PoorApproximationWarning) for w in caught)
    return flat(mcmc.get_samples()), warned, kernel.get_epsilon(DELTA)


def compare(dp, ref):
    m, s = ref.mean(0), ref.std(0)
    err = np.abs(dp.mean(0) - m) / s
    ratio = dp.std(0) / s
    lo, hi = np.quantile(dp, 0.05, axis=0), np.quantile(dp, 0.95, axis=0)
    return err, ratio, (lo <= m) & (m <= hi)


def parse_seeds(text):
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--eps", default="1,4")
    p.add_argument("--models", default="logistic5,linear,mixture")
    a = p.parse_args(argv)
    seeds, epss, models = parse_seeds(a.seeds), [float(e) for e in a.eps.split(",")], a.models.split(",")
    print(f"DPNoiseAware vs NUTS on the data, N = {N}, delta = {DELTA}, seeds {a.seeds}")
    print(f"{'model':10s} {'eps':>4s} {'runs':>4s} {'median err':>10s} {'worst err':>9s} {'sd ratio':>13s} "
          f"{'coverage90':>10s} {'warned':>6s} {'max eps':>8s}")
    for name in models:
        refs = {}
        for eps in epss:
            errs, ratios, covs, warned, spent, t0 = [], [], [], 0, 0.0, time.time()
            for seed in seeds:
                model, args = data(name, seed)
                if seed not in refs:
                    refs[seed] = reference(name, model, args, seed)
                dp, w, e = dp_run(model, args, eps, seed)
                err, ratio, cov = compare(dp, refs[seed])
                errs.append(err), ratios.append(ratio), covs.append(cov)
                warned += int(w)
                spent = max(spent, e)
            errs, ratios, covs = np.concatenate(errs), np.concatenate(ratios), np.concatenate(covs)
            print(f"{name:10s} {eps:4g} {len(seeds):4d} {np.median(errs):10.2f} {errs.max():9.2f} "
                  f"{ratios.min():6.2f}-{ratios.max():<6.2f} {covs.mean():10.0%} {warned:6d} {spent:8.4f}"
                  f"   ({time.time() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
