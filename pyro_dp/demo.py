r"""The main demo: private Bayesian logistic regression next to the non-private posterior.

Data are synthetic (built in, no download): ``N`` rows with features scaled into the unit
ball. The private run is the card's line, ``MCMC(DPPenalty(model, epsilon=ε), ...)`` with
nothing else given: the default path spends a fixed share of the budget on a private start,
the clips, the coordinates' scales and the posterior's metric, then samples with the penalty
test on Taylor residuals around the start (``docs/tuning.md``), and picks the eager or the
compiled path from the run's predicted cost. The non-private reference is Pyro's NUTS. (Until
2026-11-29 the demo hand-set a guided walk with ``llr_clip=1``; on its own data the default
path was closer to NUTS, 0.09-0.10 sd against 0.5, without a warning.)

Run it with ``pyro-dp demo`` (or ``python -m pyro_dp demo``).
"""
from __future__ import annotations

import textwrap
import time
import warnings
from typing import Optional

import torch
from pyro.infer import MCMC, NUTS

from .models.examples import logistic_model, make_logistic_data, normal_mean_model  # noqa: F401 (re-exported)

__all__ = ["normal_mean_model", "logistic_model", "make_logistic_data", "run_demo"]


def run_demo(
    n: int = 50000,
    epsilon: float = 4.0,
    delta: float = 1e-5,
    num_samples: int = 2000,
    warmup_steps: int = 1000,
    seed: int = 0,
    device: Optional[str] = None,
    reference: bool = True,
    out=print,
) -> dict:
    """Run DPPenalty's default path (``DPPenalty(model, epsilon=..., delta=...)``) and NUTS.

    Returns a dict with the DP and reference posterior means/sds, the ε spent and the run's
    :func:`~pyro_dp.privacy_report` (``"privacy_report"``), whose paragraph it prints last.
    """
    from . import DPPenalty, get_epsilon, privacy_report

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    X, y, w_true = make_logistic_data(n, seed=seed, device=device)
    iters = num_samples + warmup_steps
    out(f"pyro_dp demo: private Bayesian logistic regression, N={n} rows, d={X.shape[1]}, device={device}")
    out(f"budget: epsilon={epsilon}, delta={delta}, {iters} iterations (warmup included)")
    # the card's line: the budget and nothing else (the run length is read from MCMC; the eager or
    # compiled path is chosen from the run's predicted cost, docs/performance.md)
    kernel = DPPenalty(logistic_model, epsilon=epsilon, delta=delta, seed=seed)
    t0 = time.perf_counter()
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True)
    mcmc.run(X, y)
    t_dp = time.perf_counter() - t0
    w_dp = mcmc.get_samples()["w"]
    eps = get_epsilon(mcmc, delta)
    diag = mcmc.diagnostics()
    result = {
        "dp_mean": w_dp.mean(0),
        "dp_sd": w_dp.std(0),
        "epsilon": eps,
        "noise_multiplier": kernel.noise_multiplier,
        "acceptance": diag["acceptance rate"]["chain 0"],
        "seconds": t_dp,
    }
    ref_mean = ref_sd = None
    if reference:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = MCMC(NUTS(logistic_model), num_samples=200, warmup_steps=100, disable_progbar=True)
            ref.run(X, y)
        w_ref = ref.get_samples()["w"]
        ref_mean, ref_sd = w_ref.mean(0), w_ref.std(0)
        result.update(ref_mean=ref_mean, ref_sd=ref_sd, ref_seconds=time.perf_counter() - t0)
    out("")
    out(f"{'coef':>6} {'true':>7} {'DP mean':>9} {'DP sd':>7}" + (f" {'NUTS mean':>10} {'NUTS sd':>8}" if reference else ""))
    for j in range(X.shape[1]):
        line = f"{'w[%d]' % j:>6} {float(w_true[j]):7.3f} {float(result['dp_mean'][j]):9.3f} {float(result['dp_sd'][j]):7.3f}"
        if reference:
            line += f" {float(ref_mean[j]):10.3f} {float(ref_sd[j]):8.3f}"
        out(line)
    out("")
    out(
        f"DPPenalty: noise multiplier {kernel.noise_multiplier:.2f}, acceptance "
        f"{result['acceptance']:.2f}, {t_dp:.1f} s"
    )
    out(f"privacy spent: epsilon = {eps:.4f} at delta = {delta} (tight Gaussian accountant, all chains)")
    report = result["privacy_report"] = privacy_report(mcmc, delta=delta)
    out("")
    out("The privacy statement to publish with the samples (pyro_dp.privacy_report(mcmc); export the samples with "
        "pyro_dp.to_arviz(mcmc), which holds no data):")
    out(textwrap.fill(str(report), 100))
    return result
