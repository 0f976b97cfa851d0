r"""DP-Fast MH: exact minibatch DP Metropolis–Hastings (Zhang & Zhang 2023, Alg. 1–2).

Each iteration proposes :math:`\theta'` by a Gaussian random walk, :math:`M=\|\theta'-\theta\|`
(flat unconstrained space), and draws :math:`B\sim\mathrm{Poisson}(\lambda + CM)` with
:math:`C=\sum_i c_i = Nc` (Alg. 1). If :math:`B<K` it runs TunaMH's minibatch test on
:math:`B` indices drawn with replacement (each kept with the thinning probability of Alg. 1)
and releases

.. math::
    \hat\ell_1 = \sum_{i\in\mathcal I} 2\,\mathrm{artanh}\Big(\frac{C\,d_i}{c\,(2\lambda+CM)}\Big)
                 + \mathcal N\big(0, \sigma_1^2\Delta(\ell_1)^2\big),\qquad
    \Delta(\ell_1) = 2\log(1+CM/\lambda)\ \text{(Lemma 1, eq. 1)},

otherwise the full-batch test, :math:`\hat\ell_2 = \sum_{i=1}^N d_i + \mathcal N(0,\sigma_2^2\Delta(\ell_2)^2)`,
:math:`\Delta(\ell_2) = 2cM` (Lemma 1, eq. 2). Here :math:`d_i = T\,\mathrm{clip}_{\pm cM}
(\ell_i(\theta')-\ell_i(\theta))` is the (tempered) energy difference
:math:`U_i(\theta)-U_i(\theta')`, **clipped** so that Assumption 1 — and with it every
sensitivity above — holds even if the user's bound is wrong. The chain accepts with the
penalty rule :math:`\min\{1,\exp(\hat\ell + \log\frac{p(\theta')}{p(\theta)} - \sigma^2\Delta^2/2)\}`
(Alg. 2; the prior ratio, which the authors' code drops, is included: it is data-free and
enters like the proposal ratio in TunaMH's detailed-balance identity). The noise scales are
Alg. 2's :math:`\sigma_2 = \sqrt{2\log(1.25/\delta)}/\varepsilon` and
:math:`\sigma_1 = 6Kp\sqrt{2\log(2.5Kp/\delta)}/\varepsilon` with :math:`p=\max_i c_i/C`.

Privacy (see :class:`DPFastMH` for the decisions): one iteration is
:math:`(\varepsilon,\delta)`-DP (Thm 2); the kernel re-derives this per configuration
(:func:`fastmh_step_privacy`) and every iteration — warmup and every chain included — records
the same :class:`~pyro_dp.mechanisms.ApproxDPEvent`, composed by the exact optimal
composition theorem (:mod:`pyro_dp.accounting.composition`) and reported next to the
paper's advanced composition. ``full_batch=True`` (the paper's full-batch variant) records
the underlying Gaussian mechanism instead, composed exactly in GDP.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch

from ..accounting import get_accountant
from ..accounting.composition import AdvancedCompositionAccountant, OptimalCompositionAccountant
from ..accounting.algorithms import StepPrivacy, fastmh_step_privacy
from ..warn import warn_user
from ..private import diagnostic  # the clipped fraction (issue 58)
from ..mechanisms import (ApproxDPEvent, GaussianEvent, NonPrivateEvent, PrivacyLedger, batch_with_replacement, clip_scalars,
                          clipped_sum_with_noise, poisson_count, thinning_uniforms)
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease, mh_init, mh_step, random_walk_proposal, release_then_accept
from .proposals import penalty_accept
from .releases import ReleasePlan

__all__ = [
    "DPFastMH",
    "FastMHConfig",
    "FastMHInfo",
    "fastmh_release",
    "StepPrivacy",
    "fastmh_step_privacy",
    "fastmh_init",
    "fastmh_step",
    "expected_rows_read",
]


# --------------------------------------------------------------------------- privacy of one step


# --------------------------------------------------------------------------- pure core


class FastMHConfig(NamedTuple):
    """Constants of one chain (all public).

    :ivar c: per-row bound on untempered log-likelihood differences per unit of ``M``.
    :ivar lam: :math:`\\lambda`.
    :ivar max_batch_size: :math:`K`.
    :ivar sigma1, sigma2: Alg. 2 noise scales (0: non-private test mode).
    :ivar threshold1, threshold2: privacy-for-free thresholds.
    :ivar privacy_for_free: use the un-noised branches when the sensitivity is small.
    :ivar full_batch: always run the full-batch test (the paper's full-batch variant).
    :ivar event: the event every iteration records.
    """

    c: float
    lam: float
    max_batch_size: int
    sigma1: float
    sigma2: float
    threshold1: float
    threshold2: float
    privacy_for_free: bool
    full_batch: bool
    event: object


class FastMHInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: the accept decision.
    :ivar events: privacy events (the per-iteration event).
    :ivar clipped_fraction: fraction of per-example differences clipped to ``±cM``
        (**non-private** diagnostic).
    :ivar batch_size: the Poisson draw :math:`B` (``N`` in the full-batch variant).
    :ivar rows_read: per-example evaluations (``B`` or ``N``).
    :ivar full_batch: whether the full-batch test ran.
    :ivar free: whether the un-noised ("privacy for free") branch ran.
    :ivar noise_std: std of the noise on the log ratio.
    :ivar distance: :math:`M=\\|\\theta'-\\theta\\|`.
    """

    accepted: bool
    events: Tuple
    clipped_fraction: float
    batch_size: int
    rows_read: int
    full_batch: bool
    free: bool
    noise_std: float
    distance: float


def expected_rows_read(mean_batch: float, max_batch_size: int, num_rows: int) -> float:
    r"""Expected rows one minibatch iteration of Alg. 2 reads (Zhang & Zhang 2023): the Poisson
    batch :math:`B` (mean ``mean_batch``) when :math:`B < K`, else every row,
    :math:`\mathbb E[B\,1(B<K)] + N\,P(B\ge K)`. Public quantities only (for ``jit_compile=None``).

    >>> round(expected_rows_read(1045.0, 1018, 12214))  # B >= K in 80 % of the draws
    9995
    >>> round(expected_rows_read(100.0, 1000, 10000), 6), expected_rows_read(5000.0, 10, 10000)
    (100.0, 10000.0)
    """
    mu, k, n = float(mean_batch), int(max_batch_size), float(num_rows)
    spread = 40.0 * math.sqrt(mu) + 40.0  # the Poisson mass beyond mu -/+ spread is negligible
    if k <= 0 or k <= mu - spread:
        return n
    if k > mu + spread:
        return mu
    lo = max(0, int(mu - spread))
    b = torch.arange(lo, k, dtype=torch.float64)
    pmf = torch.exp(b * math.log(mu) - mu - torch.lgamma(b + 1.0)) if mu > 0 else (b == 0).double()
    below = float(pmf.sum().clamp(max=1.0))
    return float((b * pmf).sum()) + n * (1.0 - below)


def fastmh_init(lik, z: torch.Tensor) -> MHState:
    """Initial state at ``z`` (data-free; ``cache`` holds all ``N`` per-example
    log-likelihoods once a full-batch step has computed them)."""
    return mh_init(lik, z)


def _energy_diffs(lik, ll_new, ll_old, bound):
    """Tempered, clipped :math:`U_i(\\theta)-U_i(\\theta')`; NaN (e.g. inf - inf) maps to 0 and
    ±inf to ±bound (the per-row rule of :func:`~pyro_dp.mechanisms.clip_scalars`)."""
    clipped, mask = clip_scalars(ll_new - ll_old, bound)
    frac = float(diagnostic(mask).double().mean()) if mask.numel() else 0.0
    return lik.temperature * clipped, frac


def fastmh_release(lik, noise, state: MHState, z_new: torch.Tensor, *, config: FastMHConfig) -> RatioRelease:
    """The release of one DP-Fast MH iteration (Zhang & Zhang 2023, Alg. 2; module docstring):
    the minibatch (B < K) or full-batch noisy log ratio. ``extra`` is the step's
    :class:`FastMHInfo` without the accept decision."""
    cfg, z = config, state.z
    ll_old = None
    m = lik.jump_norm(z_new, z)  # M(theta, theta') = ||theta - theta'|| (Asm. 1), likelihood coordinates
    mf = float(m)
    n = lik.num_rows
    t = lik.temperature
    c = t * cfg.c  # energy units: U_i = -T l_i, so |U_i(theta) - U_i(theta')| <= T c M
    big_c = n * c  # C = sum_i c_i (one public bound for every row)
    if cfg.full_batch:
        b = n
    else:
        b = poisson_count(noise, cfg.lam + big_c * mf)  # Alg. 1: B ~ Poisson(lambda + C M), secret stream
    loglik = None
    if not cfg.full_batch and b < cfg.max_batch_size:
        # ---- minibatch MH (Alg. 2, B < K): TunaMH's Batch(B) and MHRatio (Alg. 1)
        # the batch and its thinning uniforms come from the secret stream (batch selection)
        idx = batch_with_replacement(noise, n, b, device=z.device)  # P(i_b = i) = c_i / C = 1/N
        u = thinning_uniforms(noise, (b,), like=z)
        if b > 0:
            ll_old = lik.per_example_loglik(z, idx)
            ll_new, lp_new = lik.loglik_and_prior(z_new, idx)
            d, frac = _energy_diffs(lik, ll_new, ll_old, cfg.c * m)  # d_i = U_i(theta) - U_i(theta')
        else:
            with torch.no_grad():
                lp_new = lik.log_prior(z_new)
            d, frac = torch.zeros(0, dtype=z.dtype, device=z.device), 0.0
        # Alg. 1, Batch: keep i_b w.p. (lam c + C/2 (U(theta') - U(theta) + c M)) / (lam c + c C M)
        keep = u < (cfg.lam * c + 0.5 * big_c * (c * m - d)) / (cfg.lam * c + c * big_c * m)
        # Alg. 1, MHRatio: 2 sum artanh(C (U(theta) - U(theta')) / (c (2 lam + C M)))
        terms = 2.0 * torch.atanh(big_c * d[keep] / (c * (2.0 * cfg.lam + big_c * m)))
        sens = 2.0 * math.log1p(big_c * mf / cfg.lam)  # Lemma 1, eq. (1): Delta(l1)
        free = cfg.privacy_for_free and sens <= cfg.threshold1  # Alg. 2, privacy for free
        nm = 0.0 if free else cfg.sigma1
        # each term lies in [-Delta/2, Delta/2] (App. A): clipping there is a no-op and the
        # substitute sensitivity is 2 * Delta/2 = Delta(l1); noise std sigma1 * Delta(l1) (Alg. 2)
        rel = clipped_sum_with_noise(terms, sens / 2.0, nm, noise, event=cfg.event)  # recorded as Thm 2's event
        log_ratio, noise_std = rel.value, float(rel.noise_std)
        rows, full = b, False
    else:
        # ---- full-batch MH (Alg. 2, B >= K, or the full-batch variant)
        ll_old = state.cache if state.cache is not None else lik.per_example_loglik(z)
        ll_new, lp_new = lik.loglik_and_prior(z_new)
        diff = ll_new - ll_old  # NaN/±inf rows: the per-row rule inside the release
        sens = 2.0 * c * mf  # Lemma 1, eq. (2): Delta(l2) = 2 max_i c_i M
        free = cfg.privacy_for_free and sens <= cfg.threshold2
        nm = 0.0 if free else cfg.sigma2
        # untempered clip at +-c M: substitute sensitivity 2 c M; tempering is post-processing
        rel = clipped_sum_with_noise(diff, cfg.c * m, nm, noise, event=cfg.event)  # recorded as Thm 2's event
        log_ratio, noise_std = t * rel.value, t * float(rel.noise_std)  # std = sigma2 Delta(l2)
        frac = rel.clipped_fraction
        loglik, rows, full = ll_new, n, True
    # Alg. 2: r = exp(l + xi - sigma^2 Delta^2 / 2) q(theta|theta')/q(theta'|theta), times the prior ratio
    extra = FastMHInfo(False, (cfg.event,), frac, b, rows, full, free, noise_std, mf)
    return RatioRelease(log_ratio, torch.as_tensor(noise_std**2, dtype=z.dtype), lp_new, (cfg.event,), frac,
                        noise_std, cache_new=loglik,  # all N terms are cached only after a full-batch step
                        cache_old=ll_old if full else state.cache, extra=extra)


def _accept(rng, lambda_hat, noise_var):
    return penalty_accept(rng, lambda_hat, noise_var)


def fastmh_step(rng: torch.Generator, noise, state: MHState, lik, *, proposal_scale,
                config: FastMHConfig) -> Tuple[MHState, FastMHInfo]:
    """One DP-Fast MH iteration (Zhang & Zhang 2023, Alg. 2) through :func:`~.mh.mh_step`."""
    new, info = mh_step(rng, noise, state, propose=random_walk_proposal(proposal_scale),
                        release_accept=release_then_accept(partial(fastmh_release, lik, config=config), _accept))
    return new, info.extra._replace(accepted=info.accepted)


# --------------------------------------------------------------------------- Pyro kernel


def default_accountant(full_batch: bool, privacy_for_free: bool, kwargs: dict) -> str:
    """DPFastMH's accountant when none is given: ``"gdp"`` for the full-batch Gaussian variant,
    ``"pld"`` with a private initialisation (its Gaussian sums, which the (ε, δ) compositions cannot
    take: dp_accounting's PLD composes both kinds), else ``"optimal"``."""
    non_private = kwargs.get("non_private", False)
    if full_batch and not privacy_for_free and not non_private:
        return "gdp"
    return "pld" if kwargs.get("init") is not None and not non_private else "optimal"


def check_lipschitz(lipschitz) -> float:
    """One public bound :math:`c` for every row (Zhang & Zhang 2023, Alg. 2), checked."""
    per_row = lipschitz.numel() > 1 if torch.is_tensor(lipschitz) else (
        hasattr(lipschitz, "__len__") and not isinstance(lipschitz, (str, bytes)))
    if per_row:
        raise ValueError(
            "lipschitz must be ONE public bound c for every row (or a callable of public "
            "quantities): per-row bounds c_i computed from the data would make the batch-size "
            "law and the sampling probabilities data-dependent, which the privacy proof of "
            "DP-Fast MH does not cover. Use c = max_i c_i over the data domain."
        )
    return check_positive("lipschitz", lipschitz)


def check_batch_settings(full_batch: bool, lam, max_batch_size) -> Tuple[Optional[float], Optional[int]]:
    """``(lam, max_batch_size)`` checked: required by the minibatch algorithm, optional with ``full_batch``."""
    if full_batch:
        return (None if lam is None else check_positive("lam", lam),
                None if max_batch_size is None else check_positive("max_batch_size", max_batch_size, integer=True))
    if lam is None or max_batch_size is None:
        raise ValueError("the minibatch algorithm needs lam and max_batch_size (or full_batch=True)")
    lam = check_positive("lam", lam)
    if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, (int, float)) or max_batch_size != int(max_batch_size):
        raise TypeError(f"max_batch_size (K) must be an integer, got {max_batch_size!r}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size (K) must be >= 1, got {max_batch_size!r}")
    return lam, int(max_batch_size)


def check_step_privacy(non_private: bool, step_epsilon, step_delta) -> Tuple[Optional[float], Optional[float]]:
    """``(step_epsilon, step_delta)``, the per-iteration privacy of Thm 2, checked (unset in the test mode)."""
    if non_private:
        if step_epsilon is not None or step_delta is not None:
            raise ValueError("non_private=True is the noise-free test mode: leave step_epsilon/step_delta unset")
        return step_epsilon, step_delta
    if step_epsilon is None or step_delta is None:
        raise ValueError("give step_epsilon and step_delta (the per-iteration privacy of Thm 2; DP-Fast MH sets "
                         "its noise per iteration, and epsilon/delta, if given, only cap the total)")
    se, sd = check_positive("step_epsilon", step_epsilon), float(step_delta)
    if not se < 1.0:
        raise ValueError(f"step_epsilon must be in (0, 1) (Gaussian mechanism, Dwork & Roth Thm A.1), got {step_epsilon!r}")
    if not (0.0 < sd < 1.0):
        raise ValueError(f"step_delta must be in (0, 1), got {step_delta!r}")
    return se, sd


def expected_cost(lik, proposal_scale, lam: Optional[float], max_batch_size: Optional[int], bound: float,
                  full_batch: bool) -> Tuple[str, float, float]:
    """auto_compile's cost of one DP-Fast MH iteration: the expected rows it reads (public: N, the settings and the
    proposal's law). Alg. 2 reads B ~ Poisson(λ + C·M) rows when B < K and all N otherwise,
    with M = proposal_scale·‖ξ‖ over the likelihood's d coordinates; without a proposal scale
    yet (private tuning), K rows."""
    n = lik.num_rows
    if full_batch or max_batch_size is None:
        return "penalty", float(n), 0.0
    if proposal_scale is None:
        return "fastmh", float(min(n, max_batch_size)), 0.0
    d = max(lik.likelihood_dim, 1)
    # the proposal's sd over the likelihood's coordinates (scalar or per coordinate): its root
    # mean square, exact for one scale for all
    sd = torch.as_tensor(proposal_scale, dtype=torch.float64).detach().cpu().expand(lik.dim)
    mask = lik.likelihood_mask
    sq = sd.square() if mask is None else sd.square() * mask.detach().cpu().double()
    rms = math.sqrt(float(sq.sum()) / d)
    # M = rms * ||xi|| varies from move to move (chi with d degrees of freedom), which spreads B
    # far beyond a Poisson's: average over 256 quantiles of ||xi|| (Wilson-Hilferty:
    # (chi2_d / d)^(1/3) ~ N(1 - 2/(9d), 2/(9d)); deterministic, no draw)
    v = 2.0 / (9.0 * d)
    z = torch.special.ndtri((torch.arange(256, dtype=torch.float64) + 0.5) / 256)
    radii = (d * (1.0 - v + z * math.sqrt(v)).clamp(min=0.0) ** 3).sqrt()
    scale = n * lik.temperature * bound * rms
    rows = [expected_rows_read(lam + scale * float(r), max_batch_size, n) for r in radii]
    return "fastmh", sum(rows) / len(rows), 0.0


class DPFastMH(RandomWalkKernel):
    r"""DP-Fast MH (Zhang & Zhang 2023, Alg. 2) as a Pyro ``MCMCKernel``.

    :param model: Pyro model with its observed sites in a data plate indexed by the plate's
        indices (minibatches need it).
    :param proposal_scale: random-walk std in unconstrained space (scalar or per coordinate).
    :param lipschitz: the public bound :math:`c` of Assumption 1 on the **untempered**
        per-example log-likelihood: :math:`|\ell_i(\theta)-\ell_i(\theta')| \le c\|\theta-\theta'\|`
        for every row, or a callable ``f(num_rows=N, dim=D) -> c`` of public quantities.
        Differences are clipped to :math:`\pm cM`, so privacy holds even if the bound is
        wrong (exactness then fails: see ``diagnostics()["non-private clipped fraction"]`` with
        ``nonprivate_diagnostics=True``).
        **Per-row bounds are refused**: they must be data-independent for the privacy proof
        (they set :math:`C`, hence the law of :math:`B`, and the sampling probabilities), and
        bounds like :math:`c_i=\|x_i\|` (the paper's App. E.2) are computed from the data.
    :param float lam: :math:`\lambda > 0`; :math:`\mathbb E[B] = \lambda + C\,\mathbb E[M]`.
    :param int max_batch_size: :math:`K \ge 1`; :math:`B \ge K` runs the full-batch test.
    :param float step_epsilon, step_delta: per-iteration :math:`(\varepsilon, \delta)` of Thm 2,
        :math:`\varepsilon,\delta \in (0,1)` (Alg. 2's Gaussian calibration needs
        :math:`\varepsilon<1`).
    :param bool full_batch: always run the full-batch test (the paper's full-batch variant);
        ``lam`` and ``max_batch_size`` are then unused.
    :param bool privacy_for_free: use Alg. 2's un-noised branches when the sensitivity is below
        the threshold. **Off by default, deviation from the paper**: the un-noised MH accept
        bit is not :math:`(\varepsilon,\delta)`-DP for small δ — its reject probability can go
        from :math:`0` to :math:`1-e^{-\Delta}` — so enabling it records
        :math:`\delta_{\rm step} \approx \varepsilon` per iteration (honest, and nearly useless).
    :param accountant: default: exact optimal composition of the per-iteration events
        (:class:`~pyro_dp.accounting.composition.OptimalCompositionAccountant`), ``"gdp"``
        for the full-batch variant, or ``"pld"`` with a private initialisation (``init=``),
        whose Gaussian releases the (ε, δ) compositions cannot take. :meth:`privacy_report` also gives the paper's advanced
        composition; :meth:`get_epsilon` returns the smaller.

    Other keyword arguments as in :class:`~pyro_dp.kernels.base.DPKernel`. ``step_epsilon``
    and ``step_delta`` are always required: the paper's noise is set per iteration (Alg. 2),
    so unlike the other kernels DP-Fast MH does not derive its noise from a total budget.
    ``epsilon`` and ``delta``, if given, are a *total* budget over all iterations and chains,
    enforced on the ledger: the chain stops reading data when the next iteration would exceed it.

    Warmup and chains: every iteration reads data (warmup too), and every chain reads the
    same data, so :math:`T = \text{chains}\times(\text{warmup}+\text{samples})` events compose.
    The per-iteration δ adds up (:math:`T\delta_{\rm step}` in every composition theorem), so
    ``step_delta`` must be well below ``delta / T``.

    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = (torch.randn(5000, generator=torch.Generator().manual_seed(0)) + 1.0).clamp(-3, 3)
    >>> kernel = DPFastMH(model, proposal_scale=5e-4, lipschitz=5.0, lam=100.0, max_batch_size=400,
    ...                   step_epsilon=0.5, step_delta=1e-9, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=100, warmup_steps=50, disable_progbar=True,
    ...             initial_params={"mu": torch.tensor(1.0)})  # data-free start
    >>> mcmc.run(y)
    >>> d = mcmc.diagnostics()  # E[B] = 100 + 25000 * 5e-4 * sqrt(2/pi) = 110 rows per step
    >>> abs(d["mean batch size"]["chain 0"] - 110) < 5, d["full-batch fraction"]["chain 0"]
    (True, 0.0)
    >>> kernel.ledger.entries  # 150 iterations, warmup included, each (0.5, 1e-9)-DP (Thm 2)
    (LedgerEntry(event=ApproxDPEvent(epsilon=0.5, delta=1e-09), count=150),)
    >>> {k: round(v, 2) for k, v in kernel.privacy_report(1e-5).items()}  # paper's vs exact composition
    {'advanced': 47.77, 'optimal': 41.95}
    >>> kernel.get_epsilon(1e-5) == kernel.privacy_report(1e-5)["optimal"]
    True
    """

    def __init__(
        self,
        model,
        proposal_scale,
        lipschitz: Union[float, Callable[..., float]],
        lam: Optional[float] = None,
        max_batch_size: Optional[int] = None,
        step_epsilon: Optional[float] = None,
        step_delta: Optional[float] = None,
        *,
        full_batch: bool = False,
        privacy_for_free: bool = False,
        accountant=None,
        **kwargs,
    ):
        self.full_batch, self.privacy_for_free = bool(full_batch), bool(privacy_for_free)
        if accountant is None:
            accountant = default_accountant(self.full_batch, self.privacy_for_free, kwargs)
        super().__init__(model, accountant=accountant, **kwargs)
        self._setup_walk(proposal_scale)
        self.lipschitz = lipschitz if callable(lipschitz) else check_lipschitz(lipschitz)
        self.lam, self.max_batch_size = check_batch_settings(self.full_batch, lam, max_batch_size)
        self.step_epsilon, self.step_delta = check_step_privacy(self.non_private, step_epsilon, step_delta)
        self.step_privacy: Optional[StepPrivacy] = None

    # ------------------------------------------------------------------ DPKernel hooks
    _chain_attrs = RandomWalkKernel._chain_attrs + ("_stats",)

    #: why the data plate's ``subsample_size`` is refused (:mod:`~pyro_dp.kernels.declared_batch`)
    plate_batch_refusal = ("DPFastMH draws a random batch whose size the algorithm sets (expected lam + C*E[M], "
                           "falling back to every row from max_batch_size on; Zhang & Zhang 2023, Alg. 2), so it "
                           "cannot honour a fixed subsample_size")

    def _reset_chain_stats(self):
        super()._reset_chain_stats()
        self._stats = {"batch": 0.0, "rows": 0.0, "full": 0, "free": 0, "n": 0}

    def _bound(self) -> float:
        c = self.lipschitz
        if callable(c):
            c = check_positive("lipschitz(num_rows=, dim=)", c(num_rows=self.lik.num_rows, dim=self.lik.dim))
        return float(c)

    def _calibrate(self):
        """Called by ``setup`` once ``N`` is known (data-free): noise scales and the event."""
        self._c = self._bound()
        n = self.lik.num_rows
        k = self.max_batch_size if self.max_batch_size is not None else n
        if self.non_private:
            self.step_privacy = StepPrivacy(0.0, 0.0, 0.0, 0.0, math.inf, 1.0, math.inf, 1.0, NonPrivateEvent())
            return
        # one bound for every row: p = max_i c_i / C = 1/N
        self.step_privacy = fastmh_step_privacy(
            self.step_epsilon, self.step_delta, k, 1.0 / n,
            privacy_for_free=self.privacy_for_free, full_batch=self.full_batch,
        )
        ev = self.step_privacy.event
        if isinstance(ev, ApproxDPEvent) and (ev.epsilon > self.step_epsilon or ev.delta > self.step_delta):

            warn_user(
                f"Thm 2's per-iteration ({self.step_epsilon}, {self.step_delta}) does not hold for this "
                f"configuration (K={k}, N={n}, privacy_for_free={self.privacy_for_free}); recording the "
                f"certified ({ev.epsilon:.4g}, {ev.delta:.4g}) per iteration instead",
                UserWarning,
            )

    def _config(self) -> FastMHConfig:
        sp = self.step_privacy
        return FastMHConfig(
            self._c,
            self.lam if self.lam is not None else 1.0,
            self.max_batch_size if self.max_batch_size is not None else self.lik.num_rows,
            sp.sigma1, sp.sigma2, sp.threshold1, sp.threshold2,
            self.privacy_for_free, self.full_batch, sp.event,
        )

    def releases(self, state=None):
        # Zhang & Zhang 2023 Thm 2: one (epsilon, delta) step per iteration (or the certified one)
        if self.step_privacy is None:
            raise RuntimeError("the per-iteration event depends on N: call setup() first")
        return ReleasePlan((self.step_privacy.event,), cost=lambda: expected_cost(
            self.lik, self.proposal_scale, self.lam, self.max_batch_size, self._bound(), self.full_batch))

    draws_directions = False  # the full random walk only: no guided-walk directions (Alg. 1)

    def _release(self, noise, state, z_new):
        return fastmh_release(self.lik, noise, state, z_new, config=self._config())

    def _accept(self, rng, lambda_hat, noise_var):
        return _accept(rng, lambda_hat, noise_var)

    def _step(self, state):
        new, info = super()._step(state)
        s, facts = self._stats, info.extra
        s["n"] += 1
        s["batch"] += facts.batch_size
        s["rows"] += facts.rows_read
        s["full"] += int(facts.full_batch)
        s["free"] += int(facts.free)
        return new, info

    # ------------------------------------------------------------------ reporting
    def _paper_ledger(self) -> Optional[PrivacyLedger]:
        """The run as the paper states it: one ``ApproxDPEvent(step_epsilon, step_delta)``
        (or the certified event, if larger) per iteration; ``None`` when the ledger holds
        other releases too (a private initialisation's or tuning's Gaussian sums, labelled in
        the ledger), which the paper's (ε, δ) compositions cannot take. Until 2026-11-26 those
        were counted as Fast MH steps, and :meth:`get_epsilon` under-reported such a run."""
        out = PrivacyLedger()
        sp = self.step_privacy
        if sp is None or self.non_private:
            return out
        ledger = self.ledger
        if any(label for _, _, label in ledger.labelled_entries()):
            return None
        ev = sp.event if isinstance(sp.event, ApproxDPEvent) else ApproxDPEvent(self.step_epsilon, self.step_delta)
        out.record(ev, ledger.num_releases)
        return out

    def privacy_report(self, delta: Optional[float] = None) -> dict:
        r"""ε at ``delta`` of every chain this kernel ran, under each composition:
        ``"advanced"`` (the paper's: DRV 2010 / KOV 2015 Thm 3.5 over the per-iteration
        :math:`(\varepsilon,\delta)`), ``"optimal"`` (exact optimal composition of the same
        events, KOV Thm 3.3) and, for the full-batch variant, ``"gdp"`` (exact composition
        of the Gaussian mechanisms actually released). The first two only when every release
        was a Fast MH step (not with a private initialisation: :meth:`_paper_ledger`)."""

        delta = self.reference_delta if delta is None else float(delta)
        self.privacy.require_complete()
        if self.non_private:
            return {"advanced": math.inf, "optimal": math.inf}
        paper = self._paper_ledger()
        out = {} if paper is None else {
            "advanced": AdvancedCompositionAccountant(paper).get_epsilon(delta),
            "optimal": OptimalCompositionAccountant(paper).get_epsilon(delta),
        }
        if self.ledger.entries and all(isinstance(e.event, GaussianEvent) for e in self.ledger.entries):
            out["gdp"] = get_accountant("gdp", self.ledger).get_epsilon(delta)
        return out

    def get_epsilon(self, delta: Optional[float] = None, accountant=None) -> float:
        """Total ε at ``delta``: the kernel's accountant on its ledger, or — by default —
        the smallest valid value of :meth:`privacy_report` and that accountant."""
        eps = super().get_epsilon(delta, accountant)
        if accountant is not None or self.non_private:
            return eps
        return min([eps] + list(self.privacy_report(delta).values()))

    def diagnostics(self) -> dict:
        d = super().diagnostics()
        s, n = self._stats, max(self._stats["n"], 1)
        d.update({
            "mean batch size": s["batch"] / n,  # E[B] = lambda + C E[M] (Alg. 1)
            "mean rows read": s["rows"] / n,
            "full-batch fraction": s["full"] / n,
            "privacy-for-free fraction": s["free"] / n,
        })
        return d

    def logging(self):
        m = max(self._stats["n"], 1)
        return {
            **super().logging(),
            "batch": f"{self._stats['batch'] / m:.1f}",
            "full": f"{self._stats['full'] / m:.2f}",
        }
