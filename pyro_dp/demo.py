r"""The main demo: private Bayesian logistic regression next to the non-private posterior.

Data are synthetic (built in, no download): ``N`` rows with features scaled into the unit
ball, so every per-example log-likelihood is 1-Lipschitz in the coefficients,
:math:`|\ell_i(\theta') - \ell_i(\theta)| \le \|x_i\|\,\|\theta'-\theta\| \le \|\theta'-\theta\|`
(Yıldırım & Ermiş 2019, logistic regression example): with ``llr_clip=1`` clipping never
binds and DPPenalty targets the exact posterior. The non-private reference is Pyro's NUTS.

Run it with ``pyro-dp demo`` (or ``python -m pyro_dp demo``).
"""
from __future__ import annotations

import textwrap
import time
import warnings
from typing import Optional

import torch
from pyro.infer import MCMC, NUTS
from pyro.infer.autoguide.initialization import init_to_mean

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
    """Run DPPenalty (OCU + guided walk, calibrated to ``(epsilon, delta)``) and NUTS.

    Returns a dict with the DP and reference posterior means/sds, the ε spent and the run's
    :func:`~pyro_dp.privacy_report` (``"privacy_report"``), whose paragraph it prints last.
    """
    from . import DPPenalty, get_epsilon, privacy_report

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    X, y, w_true = make_logistic_data(n, seed=seed, device=device)
    iters = num_samples + warmup_steps
    out(f"pyro_dp demo: private Bayesian logistic regression, N={n} rows, d={X.shape[1]}, device={device}")
    out(f"budget: epsilon={epsilon}, delta={delta}, {iters} iterations (warmup included)")
    kernel = DPPenalty(
        logistic_model,
        proposal_scale=0.05,
        llr_clip=1.0,  # the log-likelihood is 1-Lipschitz here: nothing is clipped
        guided_walk=True,
        adapt_proposal=True,  # free: uses only the (released) accept decisions
        init_strategy=init_to_mean,  # data-free start: the prior mean
        epsilon=epsilon,
        delta=delta,
        num_iterations=iters,
        seed=seed,
        jit_compile=True,  # the compiled per-example path (docs/performance.md): same chain, faster
    )
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
