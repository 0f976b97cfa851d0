r"""Räisä, Koskela & Honkela 2021 (DP-HMC paper) §4, Fig. 1: MMD and mean error against
:math:`\varepsilon` for DP-HMC, DP penalty, DP-SGLD and DP-SGNHT on a 2-d banana and a 10-d
correlated Gaussian, at the paper's design.

The paper (§4) runs **4 chains per run**, "started from separate points chosen randomly around
the posterior", **10 repeats**, pools the 4 chains (first halves discarded) and compares them
with an exact reference sample. The text prints neither the models' constants nor the
algorithms' settings; they are taken from the authors' code (``DPBayes/DP-HMC-experiments``,
commit ``ff8b828``: ``experiments.py``, ``banana_model.py``, ``gauss_model.py``,
``params/<algorithm>_<model>.py``, ``run_chain.py``, ``Snakefile``; read, not copied):

* **banana** (``"dphmc-banana-2d"``): thesis Thm 12's model with :math:`a = 20`, :math:`b = m = 0`,
  prior :math:`\sigma_0^2 = 1000`, likelihood variances :math:`(\sigma_1^2, \sigma_2^2) =
  (2000, 2500)` (the code's ``tau1 = 0.0005, tau2 = 0.0004``: 100× the thesis's flat banana),
  :math:`n = 10^5` rows drawn at :math:`\theta^* = (0, 3)`;
* **Gaussian** (``"dphmc-gauss-10d"``): :math:`x_j \sim \mathcal N(\theta, \Sigma)`,
  :math:`\Sigma = Q\,\mathrm{diag}(\lambda)\,Q^\top` with :math:`\lambda_i \sim \mathrm{Gamma}(0.5, 1)`
  and :math:`Q` from the QR decomposition of a :math:`U(0,1)^{10\times 10}` matrix, prior
  :math:`\mathcal N(0, 100^2 I)`, :math:`\theta^* = (0, 3, 0, \dots)`, :math:`n = 10^5`. The
  code draws :math:`\lambda, Q` with JAX's generator at key 43235667; we computed them once with
  JAX 0.10.2 in its 2021 (non-partitionable) threefry mode and store them below
  (:data:`GAUSS_EIGENVALUES`: 1.5·10⁻⁴ … 2.58, condition number 1.8·10⁴). That this equals the
  authors' draw assumes JAX's gamma sampler is unchanged since 2021 (not checkable here). The
  data rows are our own draw (the code's are JAX draws at another key); each row is whitened by
  the public :math:`L^{-1}` (:func:`whitened_gaussian_model`: the same ratios and gradients as
  the ``MultivariateNormal`` model, without a triangular solve per row);
* **starts**: :math:`\theta^* + s\,\mathcal N(0, I)` per chain, :math:`s` the mean of the
  posterior's coordinate standard deviations (``problem.py`` ``get_start_point``), which we
  compute from the model's constants at :math:`\theta^*` (data-free);
* **settings** (:data:`PARAMS`): DP-HMC (:math:`\tau_l, \tau_g, L, \eta`, clip bounds; step
  size times a low-discrepancy number in (0, 1) each iteration, our ``jitter=True``); DP penalty
  (:math:`\tau`, proposal sd, ratio clip; no OCU/GWMH); DP-SGLD and DP-SGNHT (batch 1000, clip,
  step; thermostat :math:`A`);
* **ε grid** ``[2, 4, 6, 8, 10, 12, 15]``, :math:`\delta = 0.1/n` (``Snakefile``,
  ``run_chain.py``); the shipped CSV holds all seven, 10 repeats each (ε = 2, 6, 15 run first;
  4, 8, 10, 12 appended by resuming the grid);
* **iteration counts**: DP-HMC and DP penalty run the most iterations ε allows at their fixed
  noise :math:`\tau\sqrt n` (tight Gaussian composition, Thm 3.3), **divided by the 4 chains**
  (``hmc.py``/``dp_penalty.py`` ``adp_iters``, then ``iters / chains``): the 4 chains together
  spend ε. Our kernels calibrate their noise to that count over 4 chains, which gives the
  paper's :math:`\tau\sqrt n` (or slightly less; DP-HMC releases :math:`kL+1` gradients, the
  paper's code :math:`k(L+1)`).

The SG-MCMC baselines are accounted under **substitution**, the same neighbouring relation as
DP-HMC and DP penalty (the kernels' default since issue #38; the paper's code uses the
substitute relation too, ``get_delta_S``), with the kernels' PLD accountant.

**Deviations** (each stated in ``docs/results.md``):

* DP-SGLD/DP-SGNHT run, as in the paper's code, as long as ε allows at their Langevin noise
  over the 4 chains (:func:`sg_iterations`; PLD, substitution: per chain from 1395 (Gaussian
  DP-SGLD, ε = 2) to 2.07·10⁶ (banana DP-SGLD, ε = 15)), but not each ε as its own run: one
  vectorised run per (problem, algorithm) of the longest length
  (:mod:`~experiments.sgld_chains`, the kernels' own step and draws), each ε scored on
  the prefix of its length (first half discarded, as :func:`~experiments._sampling.run_chain`),
  which is the chain a run of that length would give, but for its last ``t mod 1000``
  iterations, whose batches and normals a run of exactly ``t`` draws as a shorter block (the
  same laws, other values; the seeds are ``run_chain``'s and do not depend on ε). The MMD is on
  ``max_draws`` = 5000 pooled draws thinned evenly (the code thins to ~5000 draws); mean and
  variance errors on every kept draw. ``epsilon_ledger`` is each run's chains' ledgers cut at
  the prefix and composed (checked equal to the plan, within the target). No clipped fractions
  are reported for the SG rows (the runner's is over the whole run, not the prefix). Batches
  are Poisson with expected size 1000 (the code: 1000 without
  replacement). DP-SGLD is Welling & Teh's update with step :math:`2\eta/n` (the code's drift
  :math:`\eta/n` times the gradient, with noise variance :math:`\eta/n` instead of our
  :math:`2\eta/n`: its chain targets the posterior squared); DP-SGNHT's step is the code's
  :math:`\eta/n`;
* DP-HMC and DP penalty run without warm-up adaptation (the authors' hand-tuned values as they
  are), on the compiled path; no non-private clipped fractions are computed (a full-data pass
  per iteration; the paper's Fig. 1 does not show them);
* the MMD is our estimator (:func:`pyro_dp.evaluation.mmd`, median-heuristic bandwidth) on at
  most ``max_draws`` pooled draws thinned evenly; the code's is a biased V-statistic with a
  bandwidth from 500 random pairs;
* quick mode (``quick=True``, the tests) runs a small ``n`` with a fixed iteration count, noise
  calibrated to it, and its SG chains through the full run's path capped at
  ``sg_max_iterations`` (ledger ε below the target).
"""
from __future__ import annotations

import dataclasses
import math
import os
from functools import partial
from typing import Optional, Sequence

import pyro
import pyro.distributions as dist
import torch

from .grid import pick_device, plot_metric_vs_epsilon, quick_mode, run_grid

__all__ = ["PROBLEMS", "ALGORITHMS", "SG", "AUTHORS", "PARAMS", "COLUMNS", "PAPER_EPSILONS", "GAUSS_EIGENVALUES",
           "GAUSS_EIGENVECTORS", "settings", "paper_iterations", "sg_event", "sg_iterations", "banana_problem",
           "gauss_cov", "gauss10d_problem",
           "whitened_gaussian_model", "squared_problem", "sgnht_update_authors", "run_dphmc_fig1"]

PROBLEMS = ("dphmc-banana-2d", "dphmc-gauss-10d")
ALGORITHMS = ("dp_hmc", "dp_penalty", "dp_sgld", "dp_sgnht", "dp_sgld_authors", "dp_sgnht_authors")
#: the SG-MCMC baselines (run vectorised at the paper's lengths, :func:`run_dphmc_fig1`)
SG = ("dp_sgld", "dp_sgnht", "dp_sgld_authors", "dp_sgnht_authors")
#: the authors' updates (``sgld.py``) -> the textbook line whose settings (:data:`PARAMS`),
#: starts and seeds they share (common random numbers: the same batches, normals and momenta)
AUTHORS = {"dp_sgld_authors": "dp_sgld", "dp_sgnht_authors": "dp_sgnht"}
COLUMNS = ["n", "delta", "chains", "iterations", "mmd", "mean_error", "var_error", "acceptance", "clipped_fraction",
           "grad_clipped_fraction", "noise_multiplier", "epsilon_ledger", "epsilon_ok", "budget_exhausted"]

#: the paper's ε grid (``Snakefile``)
PAPER_EPSILONS = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 15.0)

#: problem -> algorithm -> the authors' settings (``params/<algorithm>_<model>.py``). DP-HMC:
#: ``tau_l``/``tau_g`` (noise multipliers :math:`\tau\sqrt n`), ``L``, ``eta`` (step, times a
#: low-discrepancy number each iteration: ``jitter``), clip bounds; DP penalty: ``tau``, ``prop``
#: (proposal sd), ``clip`` (ratio clip); SG: ``batch``, ``grad_clip``, the code's ``eta`` (its
#: step is ``eta / n``) and SGNHT's ``A``.
PARAMS = {
    "dphmc-banana-2d": {
        "dp_hmc": dict(tau_l=0.10, tau_g=0.55, L=25, eta=0.006, mass=1.0, r_clip=0.1, grad_clip=0.05, jitter=True),
        "dp_penalty": dict(tau=0.17, prop=0.06, clip=0.15),
        "dp_sgld": dict(batch=1000, grad_clip=0.2, eta=1.0),
        "dp_sgnht": dict(batch=1000, grad_clip=0.2, eta=100.0, A=50.0),
    },
    "dphmc-gauss-10d": {
        "dp_hmc": dict(tau_l=0.1, tau_g=0.25, L=12, eta=0.00015, mass=1.0, r_clip=6.0, grad_clip=10.0, jitter=True),
        "dp_penalty": dict(tau=0.05, prop=0.0007, clip=10.0),
        "dp_sgld": dict(batch=1000, grad_clip=15.0, eta=0.008),
        "dp_sgnht": dict(batch=1000, grad_clip=12.0, eta=0.2, A=30.0),
    },
}

#: :math:`\lambda` and :math:`Q` of the Gaussian's :math:`\Sigma = Q\,\mathrm{diag}(\lambda)Q^\top`
#: (``gauss_model.py`` ``GaussModel(10, 0.5)``; drawn with JAX at the authors' key, see above)
GAUSS_EIGENVALUES = (0.08668468331725883, 2.5786003627106417, 0.011191467869545838,
     0.014606037006363995, 0.00014540595416075703, 0.23288274904111386,
     0.9282273441869078, 1.0760730107762773, 0.00023884839918274488,
     0.048559926109419185)
GAUSS_EIGENVECTORS = (
    (-0.08556806972518904, -0.12572381699829868, 0.5888811377436429,
     0.08127587488691104, 0.34606054270439696, -0.3197589924694588,
     0.19789985112706548, 0.5479045192052084, -0.2452994807134809,
     -0.044109002393496424),
    (-0.4687222159678996, -0.2783666685175576, -0.03243957702785322,
     0.04960371699202955, -0.19450191647685514, 0.4813761655248292,
     -0.3419063188283358, 0.3894828623525985, 0.009124025051867157,
     -0.40132846923260423),
    (-0.38668209253273766, -0.4104203969739739, 0.07576727913500386,
     -0.08326705813372218, 0.3725529093486789, 0.2530477435222287,
     0.49893306153878436, -0.459424323627327, 0.07635378763701692,
     -0.02635019573354307),
    (-0.3210757335330657, -0.14839201772917243, -0.11504944964835503,
     -0.4554077734710997, -0.3668585622768465, -0.2804759661816729,
     0.002423393606789455, -0.09802969933159672, -0.636858059023432,
     0.16062911304021887),
    (-0.3389797747540254, -0.07249085443989493, -0.008523041426322236,
     0.13650689224944293, -0.4342982699376097, -0.5482344517208076,
     0.23247099389398834, 0.021089645751835723, 0.5434979086026749,
     -0.14858499360175806),
    (-0.2508152420440188, -0.2102514251585044, 0.11883602806739774,
     0.0745538789342646, 0.06150624598004803, 0.023006839825388495,
     -0.37057593403367595, 0.05991565781925387, 0.25020244316569473,
     0.8157056856918432),
    (-0.05684149494215308, -0.011694789566671936, 0.46805987822347145,
     0.011129878192400175, 0.09292858442451424, -0.23344631075921818,
     -0.5785264707168633, -0.531969509427611, -0.010520733656880214,
     -0.3106450202898938),
    (-0.356595526341552, 0.6458645712598754, 0.3537940882526136,
     0.27926875007950863, -0.25632013968217493, 0.28905784621196495,
     0.20338298869600596, -0.1311356871304939, -0.15739294284688,
     0.1412412654981627),
    (-0.39392734286648873, 0.22557265415111935, -0.5241515488965238,
     0.3936011262274716, 0.4644307322420961, -0.2900829979881894,
     -0.15163871591774714, -0.004656215910290695, -0.19503618632716105,
     -0.058158302946640136),
    (-0.23870331503048908, 0.4456669226549187, -0.0031347252529410896,
     -0.7206766905422736, 0.29427977141462913, -0.0064150584037257485,
     -0.06763535963459608, 0.1522456558341522, 0.32773960884465897,
     -0.05664567957296049),
)


def settings(quick: bool) -> dict:
    """Full mode: the paper's design (``n``, 4 chains, 10 repeats, its ε grid and iteration
    counts, the SG chains' included: :func:`sg_iterations`, ``sg_max_iterations=None``). Quick
    mode: a small smoke run with a fixed iteration count (noise calibrated to it) for DP-HMC and
    DP penalty, and the SG chains through the same path as the full run, capped at
    ``sg_max_iterations`` (at ``n = 2000`` their Langevin noise would allow ~10⁵ iterations)."""
    if quick:
        return dict(n=2000, epsilons=[6.0], repeats=1, chains=2, iterations=30, sg_max_iterations=40, ref_size=300,
                    max_draws=2000, exact_draws=60,
                    jit_compile=False, nonprivate_diagnostics=True)
    return dict(n=100_000, epsilons=list(PAPER_EPSILONS), repeats=10, chains=4, iterations=None,
                sg_max_iterations=None, ref_size=2000, max_draws=5000, exact_draws=1000,
                jit_compile=True, nonprivate_diagnostics=False)


def paper_iterations(algorithm: str, params: dict, *, epsilon: float, delta: float, n: int, chains: int = 4) -> int:
    r"""Iterations per chain of the paper's code for DP-HMC and DP penalty: the most iterations
    ε allows at the fixed noise :math:`\tau\sqrt n` for one chain (:func:`~experiments._sampling.thesis_iterations`,
    the same tight Gaussian composition as ``hmc.py``/``dp_penalty.py`` ``adp_iters``, with
    :math:`k(L+1)` gradient releases for DP-HMC), divided by the ``chains`` chains that share it
    (``int(iters / chains)``)."""
    from ._sampling import thesis_iterations

    return thesis_iterations(algorithm, params, epsilon=epsilon, delta=delta, n=n) // int(chains)


def sg_event(algorithm: str, params: dict, *, n: int, temperature: float = 1.0):
    r"""The release of one DP-SGLD/DP-SGNHT iteration at the paper's settings: the Poisson-subsampled
    Gaussian :math:`(q = b/n, \mathrm{nm}_L)` at the Langevin noise multiplier of ``params``
    (:func:`_kernel_params`' terms: the step already divided by ``n``) under substitution
    (:func:`~pyro_dp.kernels.sgmcmc.langevin_noise_multiplier`), the event the kernels and
    :func:`~experiments.sgld_chains.run_sgld_chains` record. ``temperature`` is the problem's;
    ``"dp_sgld_authors"`` runs at twice it (on :func:`squared_problem`)."""
    from pyro_dp.kernels.sgmcmc import langevin_noise_multiplier
    from pyro_dp.mechanisms import subsampled_gaussian_event

    q = params["batch"] / n
    kind = "sgld" if AUTHORS.get(algorithm, algorithm) == "dp_sgld" else "sgnht"
    temp = 2.0 * temperature if algorithm == "dp_sgld_authors" else temperature  # p²: :func:`squared_problem`
    nm = langevin_noise_multiplier(kind, step_size=params["eta"], sample_rate=q, grad_clip=params["grad_clip"],
                                   temperature=temp, thermostat=float(params.get("A", 1.0)), relation="substitute")
    return subsampled_gaussian_event(q, nm, "poisson")


_SG_COUNTS: dict = {}


def sg_iterations(algorithm: str, params: dict, *, epsilon: float, delta: float, n: int, chains: int = 4,
                  temperature: float = 1.0) -> int:
    r"""Iterations per chain of the paper's SG chains: the most that ``chains`` chains together
    may run within :math:`(\varepsilon, \delta)` at their Langevin noise (the paper's code runs
    them "as long as ε allows" and, as for DP-HMC, divides the count by the chains that share
    it: :func:`paper_iterations`), under substitution with the kernels' PLD accountant
    (:func:`~pyro_dp.accounting.max_iterations` with ``num_chains``: the largest ``k`` whose
    ``chains·k`` releases fit, i.e. the one-chain count divided by ``chains``, rounded down).
    ``params`` in :func:`_kernel_params`' terms. Memoised (the PLD search at 8·10⁶ releases
    takes minutes)."""
    from pyro_dp.accounting import max_iterations

    ev = sg_event(algorithm, params, n=n, temperature=temperature)
    key = (ev, float(epsilon), float(delta), int(chains))
    if key not in _SG_COUNTS:
        _SG_COUNTS[key] = max_iterations(epsilon, delta, ev, accountant="pld", num_chains=int(chains),
                                         relation="substitute")
    return _SG_COUNTS[key]


def _start_sd(sds: torch.Tensor) -> float:
    """The paper code's start spread: the mean of the posterior's coordinate sds."""
    return float(sds.mean())


def banana_problem(n: int, seed: int = 0):
    r"""The paper's 2-d banana (``experiments.py``: ``a = 20``, ``tau1 = 0.0005``,
    ``tau2 = 0.0004``, prior precision ``0.001``) as a :class:`~pyro_dp.models.Problem`."""
    from pyro_dp.models import Problem, banana_model, banana_posterior, banana_reference_sample, make_banana_data

    a, s0 = 20.0, 1000.0
    lik = torch.tensor([2000.0, 2500.0], dtype=torch.float64).sqrt()
    X = make_banana_data(n, 2, a, lik_scale=lik, seed=seed)
    post = banana_posterior(X, a=a, sigma0_sq=s0, lik_scale=lik)
    # data-free posterior sds at theta* = (0, 3): Var theta_1 = s1^2, Var theta_2 = s2^2 + 2 a^2 s1^4
    s1, s2 = (n / 2000.0 + 1 / s0) ** -0.5, (n / 2500.0 + 1 / s0) ** -0.5
    sds = torch.tensor([s1, math.sqrt(s2**2 + 2 * a**2 * s1**4)])
    model = partial(banana_model, a=a, sigma0_sq=s0, lik_scale=lik)
    return Problem("dphmc-banana-2d", model, (X,), 1.0, torch.tensor([0.0, 3.0], dtype=X.dtype), _start_sd(sds),
                   post, lambda k, s: banana_reference_sample(post, k, s))


def gauss_cov(dtype=torch.float64) -> torch.Tensor:
    r""":math:`\Sigma = Q\,\mathrm{diag}(\lambda)\,Q^\top` from :data:`GAUSS_EIGENVALUES`, :data:`GAUSS_EIGENVECTORS`."""
    q = torch.tensor(GAUSS_EIGENVECTORS, dtype=dtype)
    cov = q @ torch.diag(torch.tensor(GAUSS_EIGENVALUES, dtype=dtype)) @ q.T
    return 0.5 * (cov + cov.T)


def whitened_gaussian_model(Z, tril_inv, prior_var=1e4):
    r""":func:`~pyro_dp.models.gaussian_model` with each row whitened by the public
    :math:`L^{-1}` (:math:`\Sigma = LL^	op`): :math:`z_j = L^{-1}x_j \sim \mathcal N(L^{-1}	heta, I)`.
    Each row's log-likelihood is the ``MultivariateNormal``'s minus the constant
    :math:`\log|L|`, so ratios and gradients are the same, without a triangular solve per row
    (which made DP-HMC's gradient passes ~0.2 s at n = 10⁵)."""
    d = Z.shape[-1]
    theta = pyro.sample("theta", dist.MultivariateNormal(torch.zeros(d, dtype=Z.dtype, device=Z.device),
                                                         covariance_matrix=prior_var * torch.eye(d, dtype=Z.dtype,
                                                                                                 device=Z.device)))
    loc = theta @ tril_inv.to(Z).T
    with pyro.plate("data", Z.shape[0]) as idx:
        pyro.sample("obs", dist.Normal(loc, 1.0).to_event(1), obs=Z[idx])


def gauss10d_problem(n: int, seed: int = 0):
    r"""The paper's 10-d correlated Gaussian (``gauss_model.py``; prior sd 100) as a
    :class:`~pyro_dp.models.Problem` (rows whitened: :func:`whitened_gaussian_model`)."""
    from pyro_dp.models import Problem, gaussian_posterior, gaussian_reference_sample, make_gaussian_data

    cov = gauss_cov()
    X = make_gaussian_data(n, cov, seed=seed)
    post = gaussian_posterior(X, cov, prior_var=1e4)
    start = torch.zeros(10, dtype=X.dtype)
    start[1] = 3.0
    sds = post.covariance_matrix.diagonal().sqrt()  # the posterior covariance does not depend on the data
    tril_inv = torch.linalg.inv(torch.linalg.cholesky(cov))
    Z = X @ tril_inv.T  # row by row: z_j = L^{-1} x_j
    return Problem("dphmc-gauss-10d", partial(whitened_gaussian_model, tril_inv=tril_inv, prior_var=1e4), (Z,), 1.0,
                   start, _start_sd(sds), post, lambda k, s: gaussian_reference_sample(post, k, s))


def _kernel_params(algorithm: str, prm: dict, n: int) -> dict:
    """The authors' settings in :func:`~experiments._sampling.make_kernel`'s terms: SG steps
    ``2 eta / n`` (SGLD: the code's drift, Welling & Teh's update) and ``eta / n`` (SGNHT, and
    both authors' updates: ``sgld.py`` l. 173, 283)."""
    if algorithm == "dp_sgld":
        return dict(prm, eta=2.0 * prm["eta"] / n, noise="langevin")
    if algorithm in ("dp_sgnht",) + tuple(AUTHORS):
        return dict(prm, eta=prm["eta"] / n, noise="langevin")
    return prm


def _params(problem: str, algorithm: str) -> dict:
    """:data:`PARAMS` of ``algorithm`` (an authors' line: its textbook line's, the same ``params/`` file)."""
    return PARAMS[problem][AUTHORS.get(algorithm, algorithm)]


def squared_problem(problem):
    r"""The problem whose log posterior is twice ``problem``'s: prior variance halved
    (:math:`2\log\mathcal N(\theta; 0, v) = \log\mathcal N(\theta; 0, v/2) + c`; the banana's
    prior is a Gaussian of :math:`g^{-1}(\theta)`, a shear of unit Jacobian, so the same holds)
    and temperature doubled: the target :math:`p^2` of the authors' DP-SGLD.

    The authors' update (``sgld.py`` l. 173–179) is
    :math:`\theta' = \theta + \eta'\big(\nabla\log p_0 + \frac nb\sum_{i\in B}\mathrm{clip}_C
    (\nabla\ell_i)\big) + \mathcal N(0, \eta' I)`, :math:`\eta' = \eta/n`: drift :math:`\eta'\tilde g`
    against noise variance :math:`\eta'`, half of Welling & Teh's (eq. 4: drift :math:`\frac s2\tilde g`,
    variance :math:`s`) at the same drift (our ``dp_sgld``, :math:`s = 2\eta'`). It is eq. 4 with step
    :math:`\eta'` on :math:`p^2`: :math:`\frac{\eta'}2\nabla\log p^2 = \eta'\nabla\log p`, so
    ``DPSGLD`` with step :math:`\eta'` on this problem runs it. The release is the same clipped sum
    of the same per-row gradients :math:`\nabla\ell_i` (the clip acts before the temperature) plus
    Gaussian noise; its noise multiplier (:func:`sg_event`) is
    :math:`2q/(2T\sqrt{\eta'})/(2C) = b/(2C\sqrt{\eta n})` at :math:`T = 1`, the code's ``sigma``
    (``sgld.py`` l. 54, ``sigma_mul = 1``; substitution, ``get_delta_S``), :math:`1/\sqrt2` of the
    textbook line's at step :math:`2\eta'`, and equal to eq. 4's at step :math:`4\eta'` on :math:`p`
    (the same release: ``tests/experiments/test_dphmc_fig1.py``).

    >>> p = squared_problem(gauss10d_problem(50))
    >>> p.model.keywords["prior_var"], p.temperature
    (5000.0, 2.0)
    """
    kw = dict(problem.model.keywords)
    key = "prior_var" if "prior_var" in kw else "sigma0_sq"  # whitened_gaussian_model / banana_model
    kw[key] = kw[key] / 2.0
    return dataclasses.replace(problem, model=partial(problem.model.func, *problem.model.args, **kw),
                               temperature=2.0 * problem.temperature)


def sgnht_update_authors(state, grad: torch.Tensor, step_size):
    r"""The authors' DP-SGNHT step (``sgld.py`` l. 283–294), given the private gradient
    :math:`\tilde g` at :math:`\theta` (its :math:`\sqrt{2Ah}\,\mathcal N(0, I)` inside
    :math:`h\tilde g`, l. 284, as in :func:`~pyro_dp.kernels.sgmcmc.sgnht_update`):

    .. math:: p' = p - h\xi p + h\tilde g(\theta), \quad \theta' = \theta + h\,p, \quad
       \xi' = \xi + h(p^\top p/D - 1),

    explicit Euler: the point and the thermostat move with the **old** momentum :math:`p`
    (l. 291–292), where Ding et al.'s Alg. 1 (our ``DPSGNHT``) uses the new :math:`p'`. No change of
    variables makes one the other: here :math:`\theta'` does not depend on the gradient released at
    :math:`\theta` (it enters the point one step later), in Alg. 1 it does, and ``DPSGNHT`` releases its
    gradient at its own point only. The release is the same (the private gradient at the chain's
    point, the same event), so the ledger is ``DPSGNHT``'s; only this post-processing differs.
    Pure in its arguments, run per chain under ``vmap`` by
    :func:`~experiments.sgld_chains.run_sgnht_chains` (``update=``).

    >>> from pyro_dp.kernels.sgmcmc import SGNHTState
    >>> s = sgnht_update_authors(SGNHTState(torch.zeros(2), torch.ones(2), torch.tensor(1.0)), 3 * torch.ones(2), 0.5)
    >>> s.momentum, s.z, s.thermostat  # Alg. 1 (sgnht_update) would give z = 1 and xi = 2.5 (the new p)
    (tensor([2., 2.]), tensor([0.5000, 0.5000]), tensor(1.))
    """
    from pyro_dp.kernels.sgmcmc import SGNHTState

    h, p = step_size, state.momentum
    p_next = p - h * state.thermostat * p + h * grad  # sgld.py l. 290
    return SGNHTState(state.z + h * p, p_next, state.thermostat + h * (p.dot(p) / p.numel() - 1.0))  # l. 291-292


def run_dphmc_fig1(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                   problems: Sequence[str] = PROBLEMS, progress: bool = True,
                   epsilons: Optional[Sequence[float]] = None, repeats: Optional[int] = None,
                   algorithms: Sequence[str] = ALGORITHMS) -> dict:
    """Run the grid into ``out_dir/dphmc_fig1.csv`` (resumable; one row per run of ``chains``
    pooled chains); draw ``dphmc_fig1.png`` (MMD) and ``dphmc_fig1_mean_error.png``.
    ``epsilons``/``repeats``/``algorithms`` override :func:`settings` (e.g. to extend a run).

    DP-HMC and DP penalty run one Pyro run per cell (:func:`~experiments._sampling.run_chain`).
    The SG cells of one (problem, algorithm) run together (:func:`_sg_runs`): every repeat's
    chains as one vectorised run (:func:`~experiments.sgld_chains.run_sgld_chains` /
    ``run_sgnht_chains``) of the longest :func:`sg_iterations` among the requested ε, each ε
    scored on the prefix of its own length (as Heikkilä et al.'s Fig. 3 scores prefixes of one
    run, :mod:`~experiments.heikkila`). That run happens in the group's first missing
    cell (its ``seconds``), so a resumed grid reruns a group whose cells are partly written (the
    same chains: their seeds do not depend on ε or on the run's length)."""
    from ._sampling import exact_baseline, grid_cells, run_chain, to_device

    quick = quick_mode(quick)
    s = settings(quick)
    if epsilons is not None:
        s["epsilons"] = [float(e) for e in epsilons]
    if repeats is not None:
        s["repeats"] = int(repeats)
    for pn in problems:
        if pn not in PROBLEMS:
            raise KeyError(f"unknown problem {pn!r}; choose from {PROBLEMS}")
    for a in algorithms:
        if a not in ALGORITHMS:
            raise KeyError(f"unknown algorithm {a!r}; choose from {ALGORITHMS}")
    dev = pick_device(device)
    cache = {}

    def problem(pn):
        if pn not in cache:
            p = gauss10d_problem(s["n"]) if pn == "dphmc-gauss-10d" else banana_problem(s["n"])
            p = to_device(p, dev)
            cache[pn] = (p, p.reference_sample(s["ref_size"], seed=12345))
        return cache[pn]

    sg = [a for a in algorithms if a in SG]
    cells = grid_cells(problems, lambda pn: [a for a in algorithms if a not in sg], s["epsilons"], s["repeats"])
    # SG cells grouped by (problem, algorithm): one vectorised run per group, scored per ε
    cells += [dict(problem=pn, algorithm=a, epsilon=float(e), repeat=r) for pn in problems for a in sg
              for e in s["epsilons"] for r in range(s["repeats"])]
    n, chains = s["n"], s["chains"]
    delta = 0.1 / n

    def iterations(cell):
        a, prm = cell["algorithm"], _params(cell["problem"], cell["algorithm"])
        if s["iterations"] is not None:
            return s["iterations"]
        return paper_iterations(a, prm, epsilon=cell["epsilon"], delta=delta, n=n, chains=chains)

    def sg_length(pn, a, eps):
        t = sg_iterations(a, _kernel_params(a, _params(pn, a), n), epsilon=eps, delta=delta, n=n, chains=chains,
                          temperature=problem(pn)[0].temperature)
        return t if s["sg_max_iterations"] is None else min(t, int(s["sg_max_iterations"]))

    group = {}

    def compute(cell):
        p, ref = problem(cell["problem"])
        if cell["algorithm"] == "exact":  # the noise floor of an exact sample of `exact_draws` draws
            return dict(exact_baseline(ref, p, s["exact_draws"], cell["repeat"]), n=n, chains=chains)
        if cell["algorithm"] in SG:
            key = (cell["problem"], cell["algorithm"])
            if group.get("key") != key:  # one group's draws in memory at a time
                group.clear()
                t_max = max(sg_length(*key, e) for e in s["epsilons"])
                prm = _kernel_params(cell["algorithm"], _params(cell["problem"], cell["algorithm"]), n)
                group.update(key=key, run=_sg_runs(cell["algorithm"], p, prm, num_iterations=t_max,
                                                   repeats=s["repeats"], chains=chains, log=log), eps={})
            return _sg_row(group, p, ref, cell, num_iterations=sg_length(*key, cell["epsilon"]), n=n,
                           chains=chains, max_draws=s["max_draws"])
        prm = _kernel_params(cell["algorithm"], _params(cell["problem"], cell["algorithm"]), n)
        out = run_chain(cell["algorithm"], p, ref, epsilon=cell["epsilon"], n=n, num_iterations=iterations(cell),
                        repeat=cell["repeat"], params=prm, adapt=False, num_chains=chains, max_draws=s["max_draws"],
                        jit_compile=s["jit_compile"] and cell["algorithm"] in ("dp_hmc", "dp_penalty"),
                        nonprivate_diagnostics=s["nonprivate_diagnostics"])
        return dict(out, chains=chains)

    res = run_grid("dphmc_fig1", out_dir, cells, compute, COLUMNS, progress=progress, log=log)
    out = dict(res)
    out.update(_plots(res["rows"], out_dir, log))
    return out


def _sg_runs(algorithm: str, problem, params: dict, *, num_iterations: int, repeats: int, chains: int, log=None,
             block: int = 1000):
    """Every repeat's ``chains`` SG chains of ``problem`` as one vectorised run of
    ``num_iterations`` (:mod:`~experiments.sgld_chains`: the kernels' own step and
    draws, checked equal to their chains). Chain ``c`` of repeat ``r`` is the chain
    :func:`~experiments._sampling.run_chain` would run: start
    :func:`~experiments._sampling.start_point` ``(problem, chains·r + c)``, the privacy
    stream (and for DP-SGNHT the momentum's algorithm stream) of
    ``DPSGLD``/``DPSGNHT(seed=noise_seed=1000 r + Σ ord(algorithm))``'s chain ``c``; each draws
    its batches and normals ``block`` iterations at a time (the same laws as the kernel's one at a
    time, other values; ``block=1``: the kernel's chains, ``tests/experiments/test_dphmc_fig1.py``).
    The authors' lines (:data:`AUTHORS`) take their textbook line's starts and seeds (common random
    numbers) and run ``DPSGLD``'s step on :func:`squared_problem` (DP-SGLD) or DP-SGNHT's
    release with :func:`sgnht_update_authors` (DP-SGNHT). Returns the runner's output."""
    from pyro_dp.kernels.base import kernel_chain_seed
    from ._sampling import start_point, width_scale
    from .sgld_chains import run_sgld_chains, run_sgnht_chains

    base = AUTHORS.get(algorithm, algorithm)
    seeds = [1000 * r + sum(map(ord, base)) for r in range(int(repeats))]  # run_chain's, per repeat
    starts = torch.stack([start_point(problem, chains * r + c) for r in range(int(repeats)) for c in range(chains)])
    noise = [kernel_chain_seed(sd, c, "noise") for sd in seeds for c in range(chains)]
    w = width_scale(problem.name, int(problem.args[0].shape[0]), problem.temperature)  # 1 here (make_kernel's)
    target = squared_problem(problem) if algorithm == "dp_sgld_authors" else problem
    common = dict(num_iterations=int(num_iterations), batch_size=params["batch"], step_size=params["eta"] * w * w,
                  grad_clip=params["grad_clip"], noise_seeds=noise, temperature=target.temperature,
                  relation="substitute", log=log, block=int(block))
    if base == "dp_sgld":
        return run_sgld_chains(target.model, target.args, starts.to(problem.start), **common)
    algo = [kernel_chain_seed(sd, c, "algorithm") for sd in seeds for c in range(chains)]
    update = {"update": sgnht_update_authors} if algorithm == "dp_sgnht_authors" else {}
    return run_sgnht_chains(problem.model, problem.args, starts.to(problem.start), thermostat=float(params["A"]),
                            algo_seeds=algo, **common, **update)


def _sg_row(group: dict, problem, ref: torch.Tensor, cell: dict, *, num_iterations: int, n: int, chains: int,
            max_draws: Optional[int]) -> dict:
    """One SG cell's row from its group's run: repeat ``r``'s ``chains`` chains cut at
    ``num_iterations`` (the prefix: the chains of a run of that length), first halves discarded
    (:func:`~experiments._sampling.run_chain`'s warm-up), pooled chain by chain and
    scored as ``run_chain`` scores (MMD on at most ``max_draws`` pooled draws thinned evenly);
    ``epsilon_ledger`` from the prefixes of the chains' own ledgers composed over the run's
    chains (PLD, substitution), checked equal to the planned ε of that count and within the
    target. No clipped fraction (the runner's is over the whole run, not the prefix)."""
    from pyro_dp.accounting import get_accountant, planned_epsilon
    from pyro_dp.mechanisms import PrivacyLedger
    from ._sampling import score_draws
    from .sgld_chains import ledger_prefix

    out, r, t, eps = group["run"], int(cell["repeat"]), int(num_iterations), float(cell["epsilon"])
    delta = 0.1 / n
    rows = slice(chains * r, chains * (r + 1))
    led = PrivacyLedger.merged([ledger_prefix(lg, t) for lg in out.ledgers[rows]])
    key = tuple(led.entries)
    if key not in group["eps"]:
        ledger_eps = get_accountant("pld", led).get_epsilon(delta)
        plan = planned_epsilon(delta, t, [led.entries[0].event], accountant="pld", num_chains=chains,
                               relation="substitute")
        if abs(ledger_eps - plan) > 1e-9 * max(1.0, plan):
            raise RuntimeError(f"{cell}: ledger epsilon {ledger_eps} is not the planned {plan}")
        group["eps"][key] = ledger_eps
    ledger_eps = group["eps"][key]
    if not ledger_eps <= eps * (1 + 1e-9):
        raise RuntimeError(f"{cell['algorithm']} on {problem.name}: ledger epsilon {ledger_eps} > target {eps}")
    x = out.draws[rows, t // 2:t].reshape(-1, out.draws.shape[-1])
    return {"n": n, "delta": delta, "chains": chains, "iterations": t, **score_draws(x, ref, max_draws),
            "acceptance": 1.0, "clipped_fraction": math.nan, "grad_clipped_fraction": math.nan,
            "noise_multiplier": float(out.noise_multiplier), "epsilon_ledger": ledger_eps, "epsilon_ok": True,
            "budget_exhausted": False}


def _plots(rows, out_dir, log) -> dict:
    """The two figures (MMD, mean error) from the CSV's rows, with the exact-vs-exact floor."""
    from .mmd_vs_epsilon import baseline_of

    runs = [r for r in rows if r["algorithm"] != "exact"]
    per_eps = {}
    for r in rows:
        if r["algorithm"] == "dp_hmc":
            per_eps.setdefault(float(r["epsilon"]), set()).add(r["repeat"])
    by_count = {}
    for e, reps in sorted(per_eps.items()):
        by_count.setdefault(len(reps), []).append(f"{e:g}")
    counts = "; ".join(f"{k} at ε = {', '.join(es)}" for k, es in sorted(by_count.items(), reverse=True))
    ch = max((int(r["chains"]) for r in runs if r.get("chains")), default=1)
    what = f"{ch} pooled chains per run, mean ± s.e. over repeats ({counts})"
    return {
        "png": plot_metric_vs_epsilon(runs, "mmd", os.path.join(out_dir, "dphmc_fig1.png"),
                                      baseline=baseline_of(rows), log=log,
                                      title=f"DP-HMC paper (Räisä et al. 2021) Fig. 1 reproduction: MMD\n{what}"),
        "png_mean_error": plot_metric_vs_epsilon(
            runs, "mean_error", os.path.join(out_dir, "dphmc_fig1_mean_error.png"),
            baseline=baseline_of(rows, "mean_error"), log=log,
            title=f"DP-HMC paper Fig. 1 reproduction: mean error\n{what}"),
    }
