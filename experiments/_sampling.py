r"""Shared set-up of the sampling experiments (thesis Figs 6.3–6.9, DP-HMC paper Fig. 1):
the thesis code's hyper-parameters, kernel construction from a privacy budget, and one
chain → one CSV row of metrics.

**Hyper-parameters** (:data:`THESIS_PARAMS`) are those of the thesis code
(``oraisa/masters-thesis``, ``code/params/{dpps,dppa,hmc,barker,mdpps}_<problem>.py``), tuned
there at the Table 6.1 ``n``. When an experiment runs at a smaller ``n`` the posterior is
wider by :math:`w = \sqrt{T_0 n_0' / (T n)}` (posterior sd :math:`\propto 1/\sqrt{Tn}`; for
the tempered problems :math:`Tn = n_0` so :math:`w = 1`), and proposal scales and leapfrog
step sizes are multiplied by :math:`w` (:func:`width_scale`). Clip bounds, batch sizes,
``L`` and masses are kept.

**Privacy**: every kernel gets ``epsilon`` and ``delta = 0.1/n`` (thesis §6.4). Two schemes:

* **the thesis's** (``num_iterations=None``; the full experiments at the thesis's ``n``): the
  noise is the thesis's :math:`\tau` and the chain runs the most iterations ε allows
  (:func:`thesis_iterations`); the kernel calibrates its noise to that count, which gives
  the thesis's :math:`\tau\sqrt n` (or slightly less), and the ledger is checked after the run;
* **a fixed count** (quick mode, other experiments): the kernel calibrates its noise to a
  given ``num_iterations`` (DP Barker, whose noise is fixed by its test, runs what the budget
  allows, capped at the count). At a small ``n`` the thesis's scheme gives a handful of
  iterations (e.g. 5 at ε = 1, n = 10⁴), hence this scheme there.

**Warm-up**: the thesis discards the first half of each chain; we do the same. With
``adapt=True`` (quick mode, where the thesis values were tuned at another ``n``) DP penalty and
DP-HMC use that half to adapt the proposal scale / step size from the thesis value
(Robbins–Monro / dual averaging on the released accept decisions: post-processing, no
extra privacy cost; the iterations are counted in the ledger).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from functools import partial
from typing import Dict, Optional

import torch

from pyro_dp.accounting import max_iterations
from pyro_dp.accounting.subsampled import dp_barker_event
from ._metrics import mean_error, variance_error

__all__ = ["THESIS_PARAMS", "THESIS_N", "ALGORITHMS", "thesis_iterations", "width_scale", "start_point", "make_kernel",
           "run_chain", "exact_baseline", "to_device", "grid_cells"]

#: fewest iterations a chain may have (Pyro's diagnostics need 4 kept draws after the half warm-up)
MIN_ITERATIONS = 8

#: Table 6.1 ``n`` and tempering, the scale the thesis parameters were tuned at
THESIS_N = {"flat-banana-2d": 100_000, "flat-banana-10d": 200_000, "tempered-banana-2d": 100_000,
            "tempered-banana-10d": 200_000, "gauss-30d": 200_000, "narrow-banana": 150_000,
            "correlated-gauss": 200_000, "circle": 100_000}
_N0 = {"tempered-banana-2d": 1000, "tempered-banana-10d": 1000}

#: problem -> algorithm -> thesis-code parameters (at :data:`THESIS_N`), from
#: ``oraisa/masters-thesis`` at commit ``f859f56``, ``code/params/<algo>_<problem>.py`` with
#: ``dpps`` = DP penalty, ``dppa`` = DP penalty OCU+GWMH, ``hmc``, ``barker``, ``mdpps`` =
#: minibatch DP penalty, ``mdppa`` = minibatch DP penalty OCU+GWMH (thesis §6.4: "the penalty
#: algorithm with subsampling, again with and without GWMH and OCU"; Fig. 6.4 only, the thesis
#: leaves the minibatch algorithms out of Fig. 6.5), and the thesis's problem names ``easy-2d``/``easy-10d`` (flat bananas),
#: ``tempered-2d``/``tempered-10d``, ``gauss-30d``, ``hard-2d`` (narrow banana),
#: ``hard-gauss-2d`` (correlated Gauss) and ``circle``. ``tau`` (``tau_l``/``tau_g`` for HMC) is
#: the thesis's noise scale: noise multiplier :math:`\tau\sqrt n` for the full-data releases
#: (``dp_penalty.py``: ``sigma = tau * np.sqrt(n)``; ``hmc.py``), :math:`\sqrt\tau` for the
#: minibatch penalty (``dp_penalty_minibatch.py``: ``sigma=np.sqrt(tau)``).
THESIS_PARAMS: Dict[str, Dict[str, dict]] = {
    "flat-banana-2d": {
        "dp_penalty": dict(prop=0.008, clip=2.0, tau=0.1),
        "dp_penalty_ocu_gwmh": dict(prop=0.008, clip=1.8, tau=0.1),
        "dp_hmc": dict(tau_l=0.1, tau_g=0.4, L=10, eta=0.0005, mass=1.0, r_clip=2.0, grad_clip=1.0),
        "dp_barker": dict(prop=0.008 * 0.1, batch=1300),
        "minibatch_dp_penalty": dict(prop=0.001, clip=1.0, batch=1000, tau=0.7),
        "minibatch_dp_penalty_ocu_gwmh": dict(prop=0.001, clip=1.0, batch=1000, tau=0.7),
    },
    "flat-banana-10d": {
        "dp_penalty": dict(prop=0.0015, clip=2.0, tau=0.1),
        "dp_penalty_ocu_gwmh": dict(prop=0.0015, clip=3.0, tau=0.1),
        "dp_hmc": dict(tau_l=0.05, tau_g=0.2, L=10, eta=0.00015, mass=1.0, r_clip=2.5, grad_clip=3.0),
        "dp_barker": dict(prop=8 * 0.0001, batch=2600),
        "minibatch_dp_penalty": dict(prop=0.0001, clip=3.0, batch=1000, tau=0.6),
        "minibatch_dp_penalty_ocu_gwmh": dict(prop=8 * 0.00004, clip=2.0, batch=1000, tau=0.5),
    },
    "tempered-banana-2d": {
        "dp_penalty": dict(prop=0.007 * 5, clip=5.0, tau=0.2),
        "dp_penalty_ocu_gwmh": dict(prop=0.008 * 5, clip=3.5, tau=0.2),
        "dp_hmc": dict(tau_l=0.2, tau_g=0.6, L=10, eta=0.01, mass=1.0, r_clip=2.5, grad_clip=2.0),
        "dp_barker": dict(prop=0.008 * 15, batch=1300),
        "minibatch_dp_penalty": dict(prop=0.025, clip=4.0, batch=1000, tau=1.5),
        "minibatch_dp_penalty_ocu_gwmh": dict(prop=0.04, clip=4.0, batch=1000, tau=2.0),
    },
    "tempered-banana-10d": {
        "dp_penalty": dict(prop=0.02, clip=3.0, tau=0.18),
        "dp_penalty_ocu_gwmh": dict(prop=8 * 0.005, clip=3.0, tau=0.1),
        "dp_hmc": dict(tau_l=0.08, tau_g=0.2, L=10, eta=0.015, mass=1.0, r_clip=2.5, grad_clip=3.5),
        "dp_barker": dict(prop=8 * 0.005, batch=2600),
        "minibatch_dp_penalty": dict(prop=8 * 0.0025, clip=2.0, batch=1200, tau=0.7),
        "minibatch_dp_penalty_ocu_gwmh": dict(prop=8 * 0.0035, clip=2.0, batch=1200, tau=0.8),
    },
    "gauss-30d": {  # the thesis's final values; its commented-out ones had a per-coordinate profile
        "dp_penalty": dict(prop=0.00084, clip=3.0, tau=0.06),
        "dp_penalty_ocu_gwmh": dict(prop=0.00084, clip=3.0, tau=0.2),
        "dp_hmc": dict(tau_l=0.05, tau_g=0.1, L=5, eta=0.00025, mass=1.0, r_clip=2.5, grad_clip=6.0),
    },
    "narrow-banana": {
        "dp_penalty": dict(prop=0.0015, clip=5.5, tau=0.2),
        "dp_penalty_ocu_gwmh": dict(prop=0.0015, clip=8.5, tau=0.1),
        "dp_hmc": dict(tau_l=0.15, tau_g=0.25, L=5, eta=0.00045, mass=1.0, r_clip=5.0, grad_clip=2.8),
    },
    "correlated-gauss": {
        "dp_penalty": dict(prop=0.00015, clip=50.0, tau=0.07),
        "dp_penalty_ocu_gwmh": dict(prop=0.0002, clip=45.0, tau=0.1),
        "dp_hmc": dict(tau_l=0.05, tau_g=0.2, L=8, eta=0.00007, mass=1.0, r_clip=30.0, grad_clip=29.0),
    },
    "circle": {
        "dp_penalty": dict(prop=0.2, clip=0.002, tau=4.0),
        "dp_penalty_ocu_gwmh": dict(prop=0.3, clip=0.002, tau=4.0),
        "dp_hmc": dict(tau_l=0.6, tau_g=1.9, L=40, eta=0.07, mass=1.0, r_clip=0.001, grad_clip=0.0015),
    },
}

#: algorithm names accepted by :func:`make_kernel`
ALGORITHMS = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc", "dp_barker", "minibatch_dp_penalty",
              "minibatch_dp_penalty_ocu_gwmh", "dp_sgld", "dp_sgnht")

#: the minibatch DP penalty variants: plain random walk, and one-component updates with the guided walk
MINIBATCH = ("minibatch_dp_penalty", "minibatch_dp_penalty_ocu_gwmh")


def thesis_iterations(algorithm: str, params: dict, *, epsilon: float, delta: float, n: int) -> int:
    r"""The thesis code's iteration count for one chain: the noise is fixed by ``tau`` and the
    chain runs the most iterations the budget :math:`(\varepsilon, \delta)` allows.

    * DP penalty (both variants): Gaussian mechanism of noise multiplier :math:`\tau\sqrt n`
      per iteration, tight (ε, δ) of the composed Gaussian (thesis Thm 6; ``dp_penalty.py``
      ``adp_iters``, whose ``adp_delta`` is the same Gaussian formula as our ``"gdp"``
      accountant).
    * DP-HMC: per iteration one ratio release at :math:`\tau_l\sqrt n` and :math:`L+1`
      gradient releases at :math:`\tau_g\sqrt n` (``hmc.py`` ``adp_delta`` with its default
      ``compute_less_grad=False``: ``grad_evals = k * (L + 1)``; thesis Thm 11). Our kernel
      reuses the last gradient (:math:`kL+1` releases) and calibrates its noise to this count,
      so its noise is slightly *smaller* than the thesis's for the same ε.
    * DP Barker: the most iterations within ε under Heikkilä Thm 2 + Cor. 2 (``dp_barker.py``
      ``maximize_iters``; we convert RDP with the improved conversion, so the count can be
      a little larger).
    * minibatch DP penalty (both proposals; OCU+GWMH changes the proposal only, thesis §3.3):
      noise multiplier :math:`\sqrt\tau`, sampling without replacement.
      The thesis code counts iterations with the Fourier accountant (``adp_iters`` of
      ``dp_penalty_minibatch.py``); its one-step worst-case pair does not compose for sampling
      without replacement under substitution (Lebeda et al. 2024; see thesis Fig. 6.2 in
      ``docs/results.md``), so we count with the kernel's own valid accountant
      (``dp_accounting``'s RDP, WBK19 Thm 27). **A privacy-validity deviation**: fewer
      iterations than the thesis at the same ε.
    """
    from pyro_dp.mechanisms import GaussianEvent, SubsampledGaussianEvent

    s = math.sqrt(n)
    if algorithm in ("dp_penalty", "dp_penalty_ocu_gwmh"):
        return max_iterations(epsilon, delta, GaussianEvent(params["tau"] * s), accountant="gdp")
    if algorithm == "dp_hmc":
        per = [GaussianEvent(params["tau_l"] * s)] + [GaussianEvent(params["tau_g"] * s)] * (params["L"] + 1)
        return max_iterations(epsilon, delta, per, accountant="gdp")
    if algorithm == "dp_barker":
        return _barker_allowed(params, epsilon=epsilon, delta=delta, n=n)
    if algorithm in MINIBATCH:
        key = (epsilon, delta, n, params["batch"], params["tau"])
        if key not in _THESIS_MINIBATCH_ITERS:
            ev = SubsampledGaussianEvent(min(params["batch"], n // 2) / n, math.sqrt(params["tau"]),
                                         "without_replacement")
            _THESIS_MINIBATCH_ITERS[key] = max_iterations(epsilon, delta, ev, accountant="dp_rdp")
        return _THESIS_MINIBATCH_ITERS[key]
    raise KeyError(f"no thesis iteration count for {algorithm!r}")


_THESIS_MINIBATCH_ITERS: Dict[tuple, int] = {}


def _barker_allowed(params: dict, *, epsilon: float, delta: float, n: int) -> int:
    """DP Barker's most iterations within (ε, δ) (Heikkilä et al. 2019 Thm 2 + Cor. 2, thesis Thm 7)."""
    b = min(params["batch"], n // 2)
    return max_iterations(epsilon, delta, [dp_barker_event(b, n, 256)], accountant="rdp")


def width_scale(problem: str, n: int, temperature: float) -> float:
    r""":math:`w = \sqrt{T_0 N_0/(T n)}`: how much wider the posterior is at ``n`` than at the
    thesis's Table 6.1 ``N_0`` (posterior sd :math:`\propto (Tn)^{-1/2}`, Bernstein–von Mises)."""
    n_th = THESIS_N.get(problem, n)
    t_th = _N0[problem] / n_th if problem in _N0 else 1.0
    return math.sqrt(t_th * n_th / (temperature * n))


def to_device(problem, device: torch.device):
    """The problem with its data and start point on ``device`` (dtype kept)."""
    args = tuple(a.to(device) if torch.is_tensor(a) else a for a in problem.args)
    return dataclasses.replace(problem, args=args, start=problem.start.to(device))


def start_point(problem, repeat: int) -> torch.Tensor:
    r"""Thesis §6.1: :math:`\theta^* + \mathcal N(0, s^2 I)` with ``s = start_sd``; the same
    for every algorithm and ε, different per repeat (seeded by the repeat only, as
    ``run_chain.py``'s ``53274257 + index``)."""
    g = torch.Generator().manual_seed(53274257 + int(repeat))
    z = torch.randn(problem.start.shape, generator=g, dtype=torch.float64)
    return problem.start + problem.start_sd * z.to(problem.start)


def _scaled(v, w):
    return [w * x for x in v] if isinstance(v, (list, tuple)) else w * v


def _tensor(v):
    return torch.as_tensor(v, dtype=torch.float64) if isinstance(v, (list, tuple)) else v


_MINIBATCH_NM: Dict[tuple, float] = {}


class _Calibrated:
    """Marks a minibatch kernel whose calibrated noise multiplier is to be memoised after setup."""

    def __init__(self, kernel, key):
        self.kernel, self.key = kernel, key


def make_kernel(algorithm: str, problem, *, epsilon: Optional[float], delta: float, num_iterations: Optional[int],
                seed: int, params: dict, n: int, non_private: bool = False, llr_clip: Optional[float] = None,
                adapt: bool = True, jit_compile: bool = False, num_chains: int = 1,
                nonprivate_diagnostics: bool = True):
    """Build one kernel for ``problem`` with the privacy budget ``(epsilon, delta)`` over
    ``num_iterations`` (noise calibrated by the kernel), or ``non_private`` (zero noise).

    ``num_iterations=None`` is the thesis's scheme: the noise is the thesis's ``tau`` and the
    chain runs :func:`thesis_iterations` iterations (the kernel still calibrates to that count,
    which gives the thesis's noise or slightly less; the ledger is checked after the run).
    ``adapt`` adapts the proposal scale / step size during warm-up (off at the thesis's ``n``,
    where the thesis's hand-tuned values apply as they are); ``jit_compile`` is the kernels'
    compiled path; ``nonprivate_diagnostics=False`` skips the non-private clipped fractions
    (a full-data pass per iteration, which dominates a minibatch kernel's cost). ``num_chains`` chains share the budget (the kernel calibrates its noise to
    ``num_chains`` × ``num_iterations`` iterations, as the DP-HMC paper code divides its
    iteration count by its 4 chains).

    Returns ``(kernel, num_iterations)``: DP Barker's count may be lowered to what ε allows."""
    from pyro_dp import DPBarker, DPHMC, DPMinibatchPenalty, DPPenalty, DPSGLD, DPSGNHT

    w = width_scale(problem.name, n, problem.temperature)
    thesis_scheme = num_iterations is None
    if thesis_scheme:
        if non_private or epsilon is None:
            raise ValueError("the thesis scheme (num_iterations=None) needs a privacy budget")
        num_iterations = thesis_iterations(algorithm, params, epsilon=epsilon, delta=delta, n=n)
        if num_iterations < MIN_ITERATIONS:
            return None, num_iterations
    # synthetic data: the noise is seeded (noise_seed) so that figures are reproducible, and the
    # non-private clipped fractions are reported as the papers do
    common = dict(temperature=problem.temperature, init_strategy=problem.init_strategy(), seed=seed,
                  noise_seed=seed, nonprivate_diagnostics=nonprivate_diagnostics, jit_compile=jit_compile)
    budget = {} if non_private else dict(epsilon=epsilon, delta=delta, num_iterations=num_iterations)
    if int(num_chains) > 1 and not non_private:
        budget["num_chains"] = int(num_chains)
    if algorithm in ("dp_penalty", "dp_penalty_ocu_gwmh"):
        gw = algorithm == "dp_penalty_ocu_gwmh"
        nm = {"noise_multiplier": 0.0, "non_private": True} if non_private else {}
        k = DPPenalty(problem.model, proposal_scale=_tensor(_scaled(params["prop"], w)),
                      llr_clip=params["clip"] if llr_clip is None else llr_clip, guided_walk=gw,
                      adapt_proposal=adapt, **nm, **budget, **common)
        return k, num_iterations
    if algorithm == "dp_hmc":
        nm = ({"grad_noise_multiplier": 0.0, "llr_noise_multiplier": 0.0, "non_private": True}
              if non_private else {"noise_ratio": params["tau_g"] / params["tau_l"]})  # thesis tau_g / tau_l
        k = DPHMC(problem.model, step_size=w * params["eta"], num_steps=params["L"],
                  grad_clip=params["grad_clip"], llr_clip=params["r_clip"] if llr_clip is None else llr_clip,
                  mass=_tensor(params["mass"]), adapt_step_size=adapt, target_accept_prob=0.65,
                  jitter=bool(params.get("jitter", False)),
                  **nm, **budget, **common)
        return k, num_iterations
    if algorithm == "dp_barker":
        b = min(params["batch"], n // 2)
        # the thesis scheme's count already is what the budget allows (thesis_iterations)
        its = num_iterations if thesis_scheme else min(
            num_iterations, _barker_allowed(params, epsilon=epsilon, delta=delta, n=n))
        if its < MIN_ITERATIONS:
            return None, its
        k = DPBarker(problem.model, batch_size=b, proposal_scale=_tensor(_scaled(params["prop"], w)),
                     epsilon=epsilon, delta=delta, num_iterations=its, **common)
        return k, its
    if algorithm in MINIBATCH:
        b = min(params["batch"], n // 2)
        walk = algorithm == "minibatch_dp_penalty_ocu_gwmh"  # thesis code mdppa: ocu = grw = True
        mk = partial(DPMinibatchPenalty, problem.model, batch_size=b,
                     proposal_scale=_tensor(_scaled(params["prop"], w)), llr_clip=params["clip"],
                     subsampling="without_replacement", one_component=walk, guided_walk=walk,
                     **common)  # thesis §3.3 scheme
        if non_private:
            return mk(noise_multiplier=0.0, non_private=True), num_iterations
        if thesis_scheme:  # the thesis's noise multiplier sqrt(tau) (thesis Thm 8), count from the valid accountant
            return mk(noise_multiplier=math.sqrt(params["tau"]), reference_delta=delta), num_iterations
        # The kernel's own calibration (dp_accounting RDP of sampling without replacement) takes
        # ~25 s; it depends only on (epsilon, delta, iterations, b, n), so it runs once per key
        # and later kernels get its noise multiplier (the ledger check below still applies).
        key = (epsilon, delta, num_iterations, b, n)
        if key not in _MINIBATCH_NM:
            k = mk(**budget)
            return _Calibrated(k, key), num_iterations
        return mk(noise_multiplier=_MINIBATCH_NM[key], reference_delta=delta), num_iterations
    if algorithm in ("dp_sgld", "dp_sgnht"):
        extra = {"thermostat": float(params["A"])} if algorithm == "dp_sgnht" and "A" in params else {}
        if params.get("noise") == "langevin" and not non_private:
            # the DP-HMC paper code's scheme: the Langevin noise alone (no calibration, whose PLD
            # search costs ~40 s per kernel); run_chain reads the run's ε from the ledger and
            # refuses a run over its target
            from pyro_dp.kernels.sgmcmc import langevin_noise_multiplier

            nm_l = langevin_noise_multiplier(
                "sgld" if algorithm == "dp_sgld" else "sgnht", step_size=params["eta"] * w * w,
                sample_rate=params["batch"] / n, grad_clip=params["grad_clip"], temperature=problem.temperature,
                thermostat=float(params.get("A", 1.0)))
            budget = dict(noise_multiplier=nm_l, reference_delta=delta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            # the kernels' default relation, substitution (issue #38), as every other kernel here is
            # accounted; the kernel's default accountant (PLD, REPLACE_ONE)
            k = (DPSGLD if algorithm == "dp_sgld" else DPSGNHT)(
                problem.model, batch_size=params["batch"], step_size=params["eta"] * w * w,
                grad_clip=params["grad_clip"], **extra, **budget, **common)
        return k, num_iterations
    raise KeyError(f"unknown algorithm {algorithm!r}; choose from {ALGORITHMS}")


#: compiled graphs shared by the kernels of one (problem, algorithm, n, parameters) in this
#: process (:func:`_share_graphs`)
_JIT_CACHES: Dict[tuple, dict] = {}


def _share_graphs(kernel, problem, algorithm: str, n: int, params: dict, llr_clip) -> None:
    """Let ``kernel`` reuse the graphs compiled by earlier kernels of the same cell family.

    A kernel compiles its per-example graphs once and reuses them for its chains
    (:mod:`pyro_dp.compiled`); a grid builds a new kernel per cell, which would compile again
    (seconds per cell). The graphs depend on the model, the data's shapes and the kernel's
    fixed settings (clip bounds, temperature, ``L``), which are the same for every ε and repeat
    of one (problem, algorithm, n, parameters); the noise, ε and seeds are not in them. So
    kernels of one family share one cache dict: the same graphs they would each compile."""
    key = (problem.name, algorithm, n, repr(sorted(params.items())), llr_clip, float(problem.temperature))
    kernel._jit_cache = _JIT_CACHES.setdefault(key, {})


def run_chain(algorithm: str, problem, ref: torch.Tensor, *, epsilon: Optional[float], n: int,
              num_iterations: Optional[int], repeat: int, params: dict, non_private: bool = False,
              llr_clip: Optional[float] = None, adapt: bool = True, jit_compile: bool = False,
              num_chains: int = 1, max_draws: Optional[int] = None, nonprivate_diagnostics: bool = True) -> dict:
    """Run one chain (first half discarded as warm-up, thesis §6.1) and score it against the
    exact reference sample ``ref``: MMD (thesis §5.4), mean and variance errors, acceptance,
    clipped fractions, ε from the ledger (checked ≤ the target). ``num_iterations=None``: the
    thesis's scheme (:func:`make_kernel`).

    ``num_chains > 1`` runs that many chains (sharing the budget, :func:`make_kernel`) from
    the starts :func:`start_point` ``(problem, num_chains * repeat + c)`` and scores their
    pooled kept draws (DP-HMC paper §4: "the 4 chains are combined"); acceptance and clipped
    fractions are then the chains' mean. ``max_draws`` thins the pooled draws evenly to at
    most that many for the MMD (the DP-HMC paper code thins its SG chains to ~5000 draws)."""
    from .grid import run_kernel

    delta = 0.1 / n  # thesis §6.4: delta = 0.1/n
    seed = 1000 * int(repeat) + sum(map(ord, algorithm))  # fixed per (algorithm, repeat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel, its = make_kernel(algorithm, problem, epsilon=epsilon, delta=delta, num_iterations=num_iterations,
                                  seed=seed, params=params, n=n, non_private=non_private, llr_clip=llr_clip,
                                  adapt=adapt, jit_compile=jit_compile, num_chains=num_chains,
                                  nonprivate_diagnostics=nonprivate_diagnostics)
        memo = None
        if isinstance(kernel, _Calibrated):
            kernel, memo = kernel.kernel, kernel.key
        if jit_compile and kernel is not None:
            _share_graphs(kernel, problem, algorithm, n, params, llr_clip)
        out = {"n": n, "delta": delta, "iterations": its}
        if kernel is None or its < MIN_ITERATIONS:  # DP Barker: the budget allows (almost) no iteration at this n
            return dict(out, mmd=math.nan, mean_error=math.nan, var_error=math.nan, epsilon_ledger=0.0,
                        epsilon_ok=True)
        warmup = its // 2
        if num_chains > 1:
            start = torch.stack([start_point(problem, num_chains * int(repeat) + c) for c in range(num_chains)])
        else:
            start = start_point(problem, repeat)
        x, diag = run_kernel(kernel, problem.args, num_samples=its - warmup, warmup_steps=warmup,
                             initial_params={"theta": start}, num_chains=num_chains)
    if memo is not None:
        _MINIBATCH_NM[memo] = float(kernel.noise_multiplier)
    eps_ledger = float(diag["epsilon_total"])
    ok = non_private or eps_ledger <= epsilon * (1 + 1e-9)
    if not ok:  # the kernel's own calibration must never overshoot
        raise RuntimeError(f"{algorithm} on {problem.name}: ledger epsilon {eps_ledger} > target {epsilon}")
    nm = getattr(kernel, "noise_multiplier", None)
    if nm is None:
        nm = getattr(kernel, "llr_noise_multiplier", None)
    out.update(
        score_draws(x, ref, max_draws),
        acceptance=diag.get("acceptance rate", math.nan),
        clipped_fraction=diag.get("non-private ratio clipped fraction", diag.get("non-private clipped fraction", math.nan)),
        grad_clipped_fraction=diag.get("non-private gradient clipped fraction", math.nan),
        noise_multiplier=math.nan if nm is None else float(nm),
        epsilon_ledger=eps_ledger if math.isfinite(eps_ledger) else math.inf,
        epsilon_ok=ok,
        budget_exhausted=bool(diag.get("budget exhausted", False)),
    )
    return out


def score_draws(x: torch.Tensor, ref: torch.Tensor, max_draws: Optional[int] = None) -> Dict[str, float]:
    """``mmd``, ``mean_error`` and ``var_error`` of the kept draws ``x`` (``[draws, d]``) against
    the exact reference sample ``ref`` (thesis §5.4); the MMD on at most ``max_draws`` of them,
    thinned evenly (the DP-HMC paper code thins its SG chains to ~5000 draws); NaN for all three
    when a draw is not finite.

    >>> s = score_draws(torch.zeros(10, 2), torch.zeros(5, 2))
    >>> sorted(s), s["mean_error"]
    (['mean_error', 'mmd', 'var_error'], 0.0)
    """
    from pyro_dp.evaluation import mmd

    x, ref = x.detach().cpu().double(), ref.cpu().double()
    if not bool(torch.isfinite(x).all()):
        return {"mmd": math.nan, "mean_error": math.nan, "var_error": math.nan}
    xm = x if max_draws is None or len(x) <= max_draws else x[torch.linspace(0, len(x) - 1, int(max_draws)).long()]
    return {"mmd": float(mmd(xm, ref)), "mean_error": mean_error(x, ref), "var_error": variance_error(x, ref)}


def grid_cells(problems, algorithms_for, epsilons, repeats, epsilons_for=None) -> list:
    """The cells of an MMD-vs-ε grid: for every (problem, ε), ``repeats`` ``"exact"`` baseline
    cells (two exact samples compared) and ``repeats`` cells per algorithm of
    ``algorithms_for(problem)``, in that order, so that a partial run holds whole
    (problem, algorithm, ε) groups. ``epsilons_for(problem)`` overrides ``epsilons`` per problem."""
    cells = []
    for pn in problems:
        algs = ["exact"] + list(algorithms_for(pn))
        for eps in (epsilons_for(pn) if epsilons_for else epsilons):
            cells += [dict(problem=pn, algorithm=a, epsilon=float(eps), repeat=r) for a in algs for r in range(repeats)]
    return cells


def exact_baseline(ref: torch.Tensor, problem, num_samples: int, repeat: int) -> dict:
    """Thesis Fig. 6.3's black lines: MMD etc. between an independent exact sample of the chains'
    kept size and the reference sample (:func:`score_draws`)."""
    return score_draws(problem.reference_sample(num_samples, seed=10_000 + int(repeat)), ref)
