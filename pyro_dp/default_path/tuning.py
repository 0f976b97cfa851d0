r"""The default path: private tuning at the start of every chain, and the run length that
Pyro's ``MCMC`` will ask for.

``MCMC(DPHMC(model))`` and ``MCMC(DPPenalty(model, epsilon=2.0))`` run with no other
argument. What the papers tuned by hand on non-private error metrics, :class:`DPAutoTune`
buys from a fixed, documented share of the budget, at the first iteration of every chain
(``setup`` stays data-free), in three phases — each release recorded in the chain's ledger
under its own label (``tune:rows``, ``tune:scale``, ``tune:clip``, ``tune:start``, ``tune:metric``) and counted by the
budget and by the kernel's noise calibration:

0. **the rows the per-row rule maps**: one noisy count (:func:`rule_rows`), which warns when
   clearly more than zero rows have values outside their support or non-finite terms; with
   ``scale=True``, the coordinates' typical gradient sizes
   (:func:`~pyro_dp.default_path.whitening.private_log_scales`), and the rest runs in coordinates
   where they are equal (covariates on their own scales);

1. **the scale of the gradients**: a private quantile of the per-example gradient norms
   :math:`\|\nabla\ell_i(z_0)\|` at the data-free start (:func:`data_free_start`): one Gaussian
   histogram over data-free log-spaced bins (:func:`~pyro_dp.mechanisms.noisy_histogram`;
   the DP quantile by a noisy histogram, Dwork & Lei 2009 §3);
2. **a private start**: ``num_steps`` steps of DP-Adam (Kingma & Ba 2015, Alg. 1, on the
   released clipped gradient sums; DP-GD as in Abadi et al. 2016, Alg. 1, without
   subsampling) on the tempered log posterior, with a data-free learning rate that stays at
   ``learning_rate[0]`` for the first half of the steps and then decays geometrically to
   ``learning_rate[1]``. Adam's per-coordinate normalisation makes the step scale-free (no
   step size to tune on the data), and the decay lets it settle near the mode although the
   noise dominates the gradient there. The start is the Polyak–Ruppert average of the last
   third of the iterates (Polyak & Juditsky 1992);
3. **clip bounds, tracked along the way**: at every step two adaptive clips (Andrew et al.
   2021, Alg. 1: a noisy count of the rows below the clip moves it geometrically towards a
   quantile) follow the ``grad_quantile`` and ``llr_quantile`` of the norms where the ascent
   is. The steps clip at the higher one (a clip below most rows' norms moves the fixed point
   of clipped ascent, e.g. a Normal scale towards 0). Their geometric means over the last
   third are the gradient clip :math:`b_g` and the ratio clip :math:`b_l` per unit jump (a
   ratio :math:`\ell_i(\theta')-\ell_i(\theta)` is at most :math:`\|\nabla\ell_i\|\,
   \|\theta'-\theta\|` to first order, Räisä 2021 thesis §3.1, so a ratio clip above the
   gradient norms of nearly all rows clips nearly nothing). Tracked counts are steadier than
   a tail quantile of a histogram, whose upper bins' noise adds up.

The kernel then sets its step sizes **data-free**, from the public clip, noise multiplier,
temperature, :math:`N` and dimension: the jump length whose penalty noise has standard
deviation about 1 (:func:`penalty_jump_length`: the penalty test rejects longer jumps,
Yıldırım & Ermiş 2019 §3.1), capped by a guess of the posterior scale from the gradient
clip (:func:`posterior_scale_guess`), and adapts them during warmup from the accept
decisions only (post-processing), with a floor so that the step cannot collapse.

Who spends what (see ``docs/tuning.md``): with budget :math:`(\varepsilon, \delta)` over
``num_chains`` chains, each chain's tuning gets ``share`` of the chain's
:math:`\mu^2` in Gaussian DP (:math:`\mu` of the budget from
:func:`~pyro_dp.accounting.gdp.gdp_mu`; Gaussian mechanisms compose as
:math:`\mu^2 = \sum_j 1/\mathrm{nm}_j^2`, Dong, Roth & Su 2022 Cor. 3.3), ``histogram_share``
of it for the histogram, :data:`COUNT_SHARE` for the adaptive clips' counts and the rest for
the DP-Adam steps. This only chooses the noise
of the tuning releases; the kernel's accountant composes them with everything else, and the
kernel's own noise is calibrated to what is left.

>>> t = DPAutoTune(num_steps=40)
>>> t.configure(epsilon=1.0, delta=1e-5, num_chains=1)
>>> [(type(e).__name__, n) for e, n in t.events()]
[('GaussianEvent', 1), ('GaussianEvent', 40), ('GaussianEvent', 81)]
"""
from __future__ import annotations

import math
import numbers
import warnings
from typing import List, NamedTuple, Optional, Tuple

import torch

from ..accounting.gdp import gdp_mu
from ..kernels.scales import (NORM_BIN_EDGES, init_to_center, penalty_jump_length,  # noqa: F401 (re-exported)
                              posterior_scale_guess, private_norm_quantiles)
from .centring import CENTRE_SHARE, Centre, centre_noise_multipliers, private_centre
from .whitening import (METRIC_SHARE, SCALE_SHARE, likelihood_coordinates, metric_is_resolved, metric_sd,
                        prior_capped, private_log_scales, private_metric, reshapes, scaling_from_release,
                        whitening_from_metric, whitens)
from ..mechanisms import (
    ClippedSum,
    GaussianEvent,
    NonPrivateEvent,
    clip_and_sum,
    clipped_sum_with_noise,
    noisy_count,
    sum_clipped,
)

# init_to_center, NORM_BIN_EDGES, penalty_jump_length, posterior_scale_guess, private_norm_quantiles:
# importable from here as before, documented in their home, pyro_dp.kernels.scales
__all__ = [
    "DPAutoTune",
    "data_free_start",
    "TuneResult",
    "RuleMappedRowsWarning",
    "rule_rows",
    "DEFAULT_TUNING_SHARE",
    "private_quantiles",
    "adapt_clip",
    "ClipSchedule",
]

#: Share of each chain's budget (as Gaussian-DP :math:`\mu^2`) that :class:`DPAutoTune` spends.
DEFAULT_TUNING_SHARE = 0.15

# histograms per tuning run: one, at the data-free start (the adaptive clips take it from there)
_NUM_HISTOGRAMS = 1
# noisy counts per DP-Adam step: one per adaptive clip (grad_quantile, llr_quantile)
_COUNTS_PER_STEP = 2
#: noisy counts besides the steps': the rows the per-row rule maps at the start (:func:`rule_rows`)
_RULE_COUNTS = 1
#: Share of the tuning budget spent on the adaptive clip's counts (one per DP-Adam step).
COUNT_SHARE = 0.15
# eta_C of the geometric clip update (Andrew et al. 2021 use 0.2)
_CLIP_RATE = 0.2

# rows per chunk of the per-example gradients of a histogram (never N x D at once for large N)
_CHUNK_ROWS = 1 << 16


def _learning_rate(t: int, num_steps: int, lr0: float, lr1: float) -> float:
    """Data-free schedule: ``lr0`` for the first half of the steps (Adam's normalised steps then
    travel up to ``lr0 * num_steps / 2`` unconstrained units from a far start), then a
    geometric decay to ``lr1`` at the last step, so the iterates settle although the noise
    dominates the gradient near the mode."""
    half = num_steps // 2
    if t < half:
        return lr0
    return lr0 * (lr1 / lr0) ** ((t - half) / max(num_steps - 1 - half, 1))


class TuneResult(NamedTuple):
    """What a :class:`DPAutoTune` run found (post-processing of its releases: public).

    :ivar z: the private start, flat, in unconstrained space.
    :ivar grad_clip: the ``grad_quantile`` of the per-example gradient norms at ``z``.
    :ivar llr_clip: the ``llr_quantile`` of the same norms (the ratio clip per unit jump).
    :ivar start_clip: the clip the last DP-Adam step used.
    :ivar metric_sd: the posterior sd per flat unconstrained coordinate that the released metric
        predicts (:func:`~pyro_dp.default_path.whitening.metric_sd`, also where it was not resolved
        and so not applied), or ``None`` where no metric was released.
    :ivar centre: the centre of the gradient clip ball in the chain's coordinates
        (:mod:`~pyro_dp.default_path.centring`), or ``None`` (the origin).
    :ivar centre_ratio: the radius around ``centre`` over the radius around the origin.
    """

    z: torch.Tensor
    grad_clip: float
    llr_clip: float
    start_clip: float
    metric_sd: Optional[torch.Tensor] = None
    centre: Optional[torch.Tensor] = None
    centre_ratio: float = 1.0


def _fraction(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return float(value)


def _row_gradients(lik, z: torch.Tensor):
    """The per-example gradients of every local row, in chunks of at most ``_CHUNK_ROWS`` rows
    (never N x D at once for large N). **Private**: only ever released through a mechanism."""
    n = lik.num_rows
    if n <= _CHUNK_ROWS:
        yield lik.per_example_grad(z)[1]
        return
    for start in range(0, n, _CHUNK_ROWS):
        yield lik.per_example_grad(z, torch.arange(start, min(start + _CHUNK_ROWS, n), device=lik.device))[1]


def _row_norms(lik, z: torch.Tensor) -> torch.Tensor:
    """Per-example gradient norms :math:`\\|\\nabla\\ell_i(z)\\|` of every local row (**private**:
    only ever passed to a histogram or count release)."""
    return torch.cat([torch.linalg.vector_norm(g, dim=-1) for g in _row_gradients(lik, z)])


def _norms_and_clipped_sum(lik, z: torch.Tensor, clip) -> Tuple[torch.Tensor, ClippedSum]:
    """The per-example gradient norms and :func:`~pyro_dp.mechanisms.clip_and_sum` of the same
    gradients (the per-row rule, the clip, the sum), from one pass over them. **Private**."""
    norms, parts = [], []
    for g in _row_gradients(lik, z):
        norms.append(torch.linalg.vector_norm(g, dim=-1))
        parts.append(clip_and_sum(g, clip))
    return torch.cat(norms), sum_clipped(parts)


def private_quantiles(lik, z, quantiles, noise_multiplier, noise, relation="substitute", record=None):
    r"""Private upper quantiles of the per-example gradient norms at ``z``
    (:func:`private_norm_quantiles` of :math:`\|\nabla\ell_i(z)\|`). Returns ``(quantiles,
    event)``; ``record(event)`` is called right after the release."""
    return private_norm_quantiles(lik, _row_norms(lik, z), quantiles, noise_multiplier, noise, relation, record)


class DPAutoTune:
    r"""Private tuning at the start of every chain (module docstring): a quantile of the
    gradient norms, a DP-Adam start, and the clip bounds at that start.

    :param int num_steps: DP-Adam steps (each one release of the clipped gradient sum).
    :param float share: share of each chain's budget (Gaussian-DP :math:`\mu^2`) to spend.
    :param float histogram_share: share of that for the histogram (:data:`COUNT_SHARE` goes to
        the adaptive clips' counts, the rest to the steps).
    :param tuple learning_rate: Adam's learning rate in unconstrained units: the first value
        for the first half of the steps, then a geometric decay to the second.
    :param float grad_quantile: quantile of the norms used as gradient clip.
    :param float llr_quantile: quantile of the norms used as ratio clip (per unit jump), and
        as the clip of the DP-Adam steps; raised at large :math:`N` (:meth:`ratio_quantile`).
    :param tuple betas: Adam's :math:`(\beta_1, \beta_2)`; a short first-moment memory (0.5)
        keeps the ascent from swinging past the mode (the tail average smooths the noise).
    :param tuple noise_multipliers: ``(histogram, steps, counts)`` noise multipliers; default: from
        the kernel's budget and ``share`` (needed when the kernel has no budget).
    :param bool whiten: also release a private estimate of the posterior's covariance at the
        start (:data:`~pyro_dp.default_path.whitening.METRIC_SHARE` of the tuning's share, ledger label
        ``"tune:metric"``) and run the chain in the coordinates it whitens
        (:mod:`pyro_dp.default_path.whitening`, :mod:`pyro_dp.preconditioning`). For models with at
        least two latent coordinates, all in the likelihood
        (:func:`~pyro_dp.default_path.whitening.whitens`; else nothing is released and nothing
        changes).
        Default ``False``; DPPenalty's default path turns it on
        (:attr:`~pyro_dp.kernels.base.DPKernel.whiten_by_default`, measured in
        ``docs/tuning.md``); a kernel set-up turns it off, before planning, for a model it does
        not apply to.
    :param bool scale: first release the per-coordinate sizes of the gradients at the
        data-free start (:data:`~pyro_dp.default_path.whitening.SCALE_SHARE` of the tuning's share,
        ledger label ``"tune:scale"``, :func:`~pyro_dp.default_path.whitening.private_log_scales`) and
        run the tuning and the chain in the coordinates where every column's gradients have one
        size (covariates on their own scales: one clip then serves every column). Default: as
        ``whiten``. For models with at least two latent coordinates in the likelihood
        (:func:`~pyro_dp.default_path.whitening.reshapes`); only those are released and rescaled.
    :param bool centre: last, release a centre for the gradient clip ball at the start, in the
        chain's coordinates (:mod:`~pyro_dp.default_path.centring`, ledger label ``"tune:centre"``,
        :data:`~pyro_dp.default_path.centring.CENTRE_SHARE` of each chain's budget on top of
        ``share``). Default ``False``; DPSGLD's default path turns it on under substitution.

    The kernels build one when their clips or steps are left to the default
    (``DPPenalty(model, epsilon=2.0)``, ``DPHMC(model)``); pass your own as ``init=`` to
    change its settings. It sets the start and the clips of every chain; the kernel derives
    its step sizes from them.
    """

    def __init__(self, num_steps: int = 60, *, share: float = DEFAULT_TUNING_SHARE, histogram_share: float = 0.1,
                 learning_rate: Tuple[float, float] = (0.5, 1e-3), grad_quantile: float = 0.9,
                 llr_quantile: float = 0.98, betas: Tuple[float, float] = (0.5, 0.9),
                 noise_multipliers: Optional[Tuple[float, float, float]] = None, whiten: bool = False,
                 scale: Optional[bool] = None, centre: bool = False):
        if isinstance(num_steps, bool) or not isinstance(num_steps, numbers.Integral) or num_steps < 1:
            raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")
        self.num_steps = int(num_steps)
        self.share = _fraction("share", share)
        self.histogram_share = _fraction("histogram_share", histogram_share)
        lr = tuple(float(x) for x in learning_rate)
        if len(lr) != 2 or not all(0 < x < math.inf for x in lr):
            raise ValueError(f"learning_rate must be two positive numbers (start, end), got {learning_rate!r}")
        self.learning_rate = lr
        self.betas = (_fraction("betas[0]", betas[0]), _fraction("betas[1]", betas[1]))
        self.grad_quantile = _fraction("grad_quantile", grad_quantile)
        self.llr_quantile = _fraction("llr_quantile", llr_quantile)
        self.noise_multipliers = None
        #: the noise multiplier of the kernel's ratio release, set by the kernel after its noise
        #: calibration (:meth:`set_ratio_noise`); it raises the ratio clip's quantile at large N
        self.ratio_noise_multiplier: Optional[float] = None
        if noise_multipliers is not None:
            nms = tuple(float(x) for x in noise_multipliers)
            if len(nms) != 3 or not all(0 <= x < math.inf for x in nms):
                raise ValueError("noise_multipliers must be three non-negative numbers (histogram, steps, counts), "
                                 f"got {noise_multipliers!r}")
            self.noise_multipliers = nms
        self.result: Optional[TuneResult] = None
        if not isinstance(whiten, bool):
            raise TypeError(f"whiten must be True or False, got {whiten!r}")
        if scale is not None and not isinstance(scale, bool):
            raise TypeError(f"scale must be True, False or None (as whiten), got {scale!r}")
        #: release per-coordinate gradient scales first and run the tuning and the chain in the
        #: coordinates they balance (:func:`~pyro_dp.default_path.whitening.private_log_scales`)
        self.scale = whiten if scale is None else scale
        #: also release a posterior-covariance estimate at the start and run the chain in the
        #: coordinates it whitens (:mod:`pyro_dp.default_path.whitening`)
        self.whiten = whiten
        #: the noise multiplier of the whitening release (set by :meth:`configure`)
        self.metric_noise_multiplier: Optional[float] = None
        #: the noise multiplier of the per-coordinate scales' release (set by :meth:`configure`)
        self.scale_noise_multiplier: Optional[float] = None
        if not isinstance(centre, bool):
            raise TypeError(f"centre must be True or False, got {centre!r}")
        #: release a centre for the gradient clip ball (:mod:`~pyro_dp.default_path.centring`)
        self.centre = centre
        #: the two centre releases' noise multipliers (set by :meth:`configure`)
        self.centre_noise_multipliers: Optional[Tuple[float, float]] = None

    def __repr__(self):
        return (f"DPAutoTune(num_steps={self.num_steps}, share={self.share}, noise_multipliers="
                f"{self.noise_multipliers})")

    @property
    def noise_multiplier(self) -> Optional[float]:
        """The smallest noise multiplier of its releases (``None`` before :meth:`configure`)."""
        return None if self.noise_multipliers is None else min(self.noise_multipliers)

    def set_ratio_noise(self, noise_multiplier: Optional[float]) -> None:
        """The kernel's ratio-release noise multiplier (data-free; the kernels call it after
        calibrating their noise): see :meth:`ratio_quantile`."""
        self.ratio_noise_multiplier = None if noise_multiplier is None else float(noise_multiplier)

    def ratio_quantile(self, num_rows: int) -> float:
        r"""The quantile of the per-example gradient norms that the ratio clip tracks:
        ``llr_quantile``, raised at large :math:`N` to :math:`1 - k/N` with
        :math:`k = \max(2\,\mathrm{nm}, 3\,\mathrm{nm}_{\rm count}, 1)` rows above the clip.

        Why (a first-order bias–variance balance, the argument of Amin et al. 2019,
        "Bounding user contributions: a bias-variance trade-off in differential privacy", ICML; derived here for this clip): raising the ratio clip :math:`b` (per unit
        jump :math:`\|\Delta\|`) by :math:`db` raises the penalty noise's standard deviation
        :math:`\mathrm{nm}\cdot 2b\|\Delta\|` (thesis §3.1) by :math:`2\,\mathrm{nm}\|\Delta\|\,db`
        and lowers the clipping bias :math:`\sum_i(\|\nabla\ell_i\|-b)_+\|\Delta\|` by
        :math:`\#\{i: \|\nabla\ell_i\|>b\}\|\Delta\|\,db`: the two balance when about
        :math:`2\,\mathrm{nm}` rows lie above the clip. A fixed quantile instead clips a fixed
        *fraction* of the rows, whose bias grows like :math:`\sqrt N` posterior standard
        deviations (measured: a regression's noise scale 4 sds low at :math:`N = 10^5`,
        :math:`\varepsilon = 200`, with ``llr_quantile = 0.98``). The adaptive clip cannot
        resolve fewer rows than its count noise, hence :math:`3\,\mathrm{nm}_{\rm count}`; at
        least one row. Data-free (public :math:`N` and noise multipliers); at small
        :math:`N` or much noise it is ``llr_quantile``.

        >>> t = DPAutoTune(noise_multipliers=(5.0, 5.0, 2.0)); t.set_ratio_noise(10.0)
        >>> t.ratio_quantile(1000), t.ratio_quantile(100_000)
        (0.98, 0.9998)
        """
        nm = self.ratio_noise_multiplier
        if nm is None or self.noise_multipliers is None:
            return self.llr_quantile
        rows_above = max(2.0 * nm, 3.0 * self.noise_multipliers[2], 1.0)
        return max(self.llr_quantile, 1.0 - rows_above / float(num_rows))

    def reliability_problem(self, num_rows: int) -> Optional[str]:
        r"""Why this tuning cannot be trusted on ``num_rows`` rows, or ``None``. Data-free (the
        public :math:`N` and noise multipliers): the adaptive clips move on noisy counts of the
        rows below them, and when a count's noise standard deviation exceeds half of the
        rows the gradient clip's quantile leaves above it, :math:`(1-q)N`, the clips follow
        the noise (measured at :math:`N = 1000`, :math:`\varepsilon = 1`: gradient clips from 1
        to 1360 for a true 1.6, and the DP-Adam start, clipped there, ended further from the
        posterior than it began in 6 of 20 runs).

        >>> t = DPAutoTune(noise_multipliers=(30.0, 30.0, 290.0))
        >>> t.reliability_problem(100_000) is None, t.reliability_problem(1000) is not None
        (True, True)
        """
        if self.noise_multipliers is None:
            return None
        nm_count = self.noise_multipliers[2]
        tail = (1.0 - self.grad_quantile) * num_rows
        if nm_count <= tail / 2.0:
            return None
        return (f"at this budget the private tuning's counts have noise of about {nm_count:.3g} rows, against the "
                f"{tail:.3g} of N = {num_rows} rows its gradient clip leaves above it: its clips and its start can be "
                "far off (a chain may start far from the posterior and barely move, with high acceptance). Give "
                "the settings yourself (docs/tuning.md), spend more epsilon, or use more rows")

    def configure(self, *, epsilon: Optional[float], delta: Optional[float], num_chains: int = 1,
                  non_private: bool = False) -> None:
        """Choose the noise of the tuning releases from the budget (data-free; once: every
        chain of a kernel tunes with the same noise)."""
        if self.noise_multipliers is not None:
            if self.whiten and self.metric_noise_multiplier is None:
                self.metric_noise_multiplier = self.noise_multipliers[0]  # given: as the histogram's
            if self.scale and self.scale_noise_multiplier is None:
                self.scale_noise_multiplier = self.noise_multipliers[0]
            if self.centre and self.centre_noise_multipliers is None:
                self.centre_noise_multipliers = (self.noise_multipliers[0],) * 2
            return
        if non_private:
            self.noise_multipliers = (0.0, 0.0, 0.0)
            self.metric_noise_multiplier = self.scale_noise_multiplier = 0.0
            self.centre_noise_multipliers = (0.0, 0.0)
            return
        if epsilon is None:
            raise ValueError("DPAutoTune needs the kernel's budget (epsilon, delta) or explicit noise_multipliers")
        chain_mu2 = gdp_mu(epsilon, delta) ** 2 / num_chains
        if self.centre:  # on top of the tuning's share (pyro_dp.default_path.centring)
            self.centre_noise_multipliers = centre_noise_multipliers(chain_mu2 * CENTRE_SHARE)
        mu2 = chain_mu2 * self.share  # this chain's tuning share of μ²
        # μ² = Σ 1/nm² (Dong, Roth & Su 2022 Cor. 3.3): one histogram, num_steps gradient sums
        # and 2 num_steps counts, each group with its share of this chain's tuning μ²
        metric_share = METRIC_SHARE if self.whiten else 0.0
        scale_share = SCALE_SHARE if self.scale else 0.0
        step_share = 1.0 - self.histogram_share - COUNT_SHARE - metric_share - scale_share
        if self.whiten:
            self.metric_noise_multiplier = math.sqrt(1.0 / (metric_share * mu2))  # one release
        if self.scale:
            self.scale_noise_multiplier = math.sqrt(1.0 / (scale_share * mu2))  # one release
        if step_share <= 0:
            raise ValueError(f"histogram_share must be below {1.0 - COUNT_SHARE}, got {self.histogram_share}")
        self.noise_multipliers = (math.sqrt(_NUM_HISTOGRAMS / (self.histogram_share * mu2)),
                                  math.sqrt(self.num_steps / (step_share * mu2)),
                                  math.sqrt(self._num_counts() / (COUNT_SHARE * mu2)))

    def _num_counts(self) -> int:
        """Noisy counts per run: two per DP-Adam step (the adaptive clips) and one of the rows the
        per-row rule maps (:func:`rule_rows`)."""
        return _COUNTS_PER_STEP * self.num_steps + _RULE_COUNTS

    def events(self) -> List[Tuple[object, int]]:
        """The releases it makes, ``[(event, count)]``, for budget planning (after :meth:`configure`)."""
        if self.noise_multipliers is None:
            raise RuntimeError("DPAutoTune.configure() first: its noise comes from the kernel's budget")
        ev = [NonPrivateEvent() if nm == 0 else GaussianEvent(nm) for nm in self.noise_multipliers]
        out = [(ev[0], _NUM_HISTOGRAMS), (ev[1], self.num_steps), (ev[2], self._num_counts())]
        centre = self.centre_noise_multipliers if self.centre else (None, None)
        for on, nm in ((self.scale, self.scale_noise_multiplier), (self.whiten, self.metric_noise_multiplier),
                       (self.centre, centre[0]), (self.centre, centre[1])):
            if on:
                out.append((NonPrivateEvent() if nm == 0 else GaussianEvent(nm), 1))
        return out

    def run(self, lik, z: torch.Tensor, noise, relation: str = "substitute", record=None):
        """Tune from ``z``; returns ``(z_start, events, 0.0)`` and sets :attr:`result`.

        ``record(event, label)`` is called right after each release: ``"tune:clip"`` for the
        histogram and the adaptive clips' counts, ``"tune:start"`` for the DP-Adam steps."""
        if self.noise_multipliers is None:
            raise RuntimeError("DPAutoTune.configure() first")
        nm_hist, nm_step, nm_count = self.noise_multipliers
        events = []

        def rec(label):
            def _rec(ev):
                events.append(ev)
                if record is not None:
                    record(ev, label)
            return _rec

        z = data_free_start(lik, z)
        n = getattr(lik, "global_num_rows", lik.num_rows)
        q_ratio = self.ratio_quantile(n)
        # phase 0: how many rows the per-row rule maps (a value outside its support, a non-finite
        # term): a noisy count, never an exact one; a clear excess warns (#38)
        self.rule_rows = rule_rows(lik, z, nm_count, noise, relation, rec("tune:rows"))
        coords = likelihood_coordinates(lik)
        whiten, scale = self.whiten and whitens(lik), self.scale and reshapes(lik)
        expected_sd = None  # the posterior sd the metric release predicts (phase 3)
        # phase 0b: per-coordinate scales (pyro_dp.default_path.whitening.private_log_scales): the tuning
        # and the chain then run in coordinates where every column's gradients have the same size,
        # so one clip serves them all (unscaled covariates, #40)
        if scale:
            sums, counts, c_std = private_log_scales(lik, z, self.scale_noise_multiplier, noise, relation,
                                                     rec("tune:scale"), rows=_row_gradients(lik, z), coords=coords)
            l = scaling_from_release(sums, counts, c_std, n)  # the likelihood's coordinates; the others keep theirs
            l = prior_capped(lik, z, l, coords)  # no unit wider than the prior's spread (issue 59)
            if not bool((l == 1).all()):  # else the columns share a scale: the model's own coordinates
                lik.compose_preconditioner(z, torch.diag(l if coords is None else torch.ones_like(z).index_copy(0, coords, l)))
                z = torch.zeros_like(z)
        # phase 1: the scale of the per-example gradients at the data-free start (one histogram
        # gives every quantile: the raised ratio quantile's too, at no extra release)
        (c0, c0_ratio), _ = private_quantiles(lik, z, (self.grad_quantile, q_ratio), nm_hist, noise, relation,
                                              rec("tune:clip"))
        z = z.detach().clone()
        m, v = torch.zeros_like(z), torch.zeros_like(z)
        b1, b2 = self.betas  # Kingma & Ba 2015, Alg. 1
        lr0, lr1 = self.learning_rate
        # two adaptive clips, for the two quantiles: [grad_quantile, llr_quantile]; the steps use
        # the higher one (a clip below most rows' norms moves the fixed point of clipped ascent)
        sched = ClipSchedule(self, n, c0, c0_ratio)
        z_sum, tail = torch.zeros_like(z), 0
        for t in range(self.num_steps):
            lr = _learning_rate(t, self.num_steps, lr0, lr1)  # data-free schedule
            # reads the data (private: the norms are released only as counts, the sum as below)
            norms, cs = _norms_and_clipped_sum(lik, z, sched.clips[1])
            rel = clipped_sum_with_noise(cs, sched.clips[1], nm_step, noise, relation)  # released here
            rec("tune:start")(rel.event)
            sched.step(t, norms, nm_count, noise, relation, rec("tune:clip"))
            # ascent direction of the tempered log posterior per row (post-processing; prior data-free)
            g = (lik.temperature * lik.project(rel.value) + lik.grad_log_prior(z)) / n
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            step = lr * (m / (1 - b1 ** (t + 1))) / (torch.sqrt(v / (1 - b2 ** (t + 1))) + 1e-300)
            z_new = (z + step).detach()
            if bool(torch.isfinite(z_new).all()):  # post-processing of released values
                z = z_new
            if t >= sched.tail_from:  # Polyak-Ruppert averaging of the last third (Polyak & Juditsky 1992)
                z_sum, tail = z_sum + z, tail + 1
        z = z_sum / tail
        clip_g, clip_l = sched.means()  # geometric means over the last third
        # phase 3: posterior-shaped coordinates (pyro_dp.default_path.whitening), where it applies (data-free:
        # >= 2 coordinates, all in the likelihood; a kernel's set-up turns `whiten` off before planning
        # elsewhere, so only a tuner configured by hand can plan a share that is then not spent)
        if whiten:
            metric, std = private_metric(lik, z, max(clip_g, clip_l), self.metric_noise_multiplier, noise, relation,
                                         rec("tune:metric"), rows=_row_gradients(lik, z), coords=coords)
            L, f = whitening_from_metric(lik, z, metric, std, coords)  # post-processing
            expected_sd = metric_sd(lik, L)  # for the end-of-chain spread check, applied or not
            if metric_is_resolved(metric, std):  # else the scaled coordinates of phase 0b (post-processing)
                lik.compose_preconditioner(z, L)
                z, clip_g, clip_l = torch.zeros_like(z), clip_g * f, clip_l * f
        # phase 4: a centre for the gradient clip ball, in the chain's coordinates (pyro_dp.default_path.centring)
        centre = (private_centre(lambda: _row_gradients(lik, z), max(clip_g, clip_l), self.centre_noise_multipliers,
                                 noise, relation, rec("tune:centre")) if self.centre else Centre(None, 1.0))
        self.result = TuneResult(z, clip_g, clip_l, clip_l, expected_sd, *centre)
        return z, events, 0.0


class RuleMappedRowsWarning(UserWarning):
    """A noisy count says that clearly more than zero rows have a value outside their
    distribution's support or a non-finite log-likelihood: the per-row rule gives them a zero
    term, i.e. they are left out of the posterior."""


def rule_rows(lik, z: torch.Tensor, noise_multiplier: float, noise, relation: str = "substitute",
              record=None) -> float:
    r"""Release a noisy count of the rows the per-row rule maps at ``z`` — a value outside its
    distribution's support (:func:`~pyro_dp.isolation.support_rule`: a label out of range, a
    negative count, NaN, a Bernoulli label of -1) or a non-finite log-likelihood — with
    :func:`~pyro_dp.mechanisms.noisy_count` (:math:`\Delta = 1`), and warn
    (:class:`RuleMappedRowsWarning`) when it exceeds three noise standard deviations: the rule
    keeps such rows private but leaves them out of the posterior, which is wrong when many rows
    are (data that do not match the model). Returns the noisy count (post-processing: public).

    >>> import torch
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> from pyro_dp.mechanisms import NoiseSource, recording
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, float("nan"), 1.0]),), seed=0)
    >>> with recording():  # the release records its event here (a kernel's private start opens one)
    ...     rule_rows(lik, torch.zeros(1), 0.0, NoiseSource())  # noise 0 for the example only
    1.0
    """
    ll = lik.per_example_loglik(z)
    mapped = (~torch.isfinite(ll)).sum()  # reads the data: released only as the noisy count below
    cnt = noisy_count(mapped, noise_multiplier, noise, relation)
    if record is not None:
        record(cnt.event)
    value = float(cnt.value)
    if value > 3.0 * float(noise_multiplier) and value >= 1.0:
        n = getattr(lik, "global_num_rows", lik.num_rows)
        warnings.warn(
            f"a noisy count (standard deviation {noise_multiplier:.3g}, covered by epsilon) says that about "
            f"{value:.0f} of {n} rows have a value outside their distribution's support or a non-finite "
            "log-likelihood (NaN values, labels out of range, -1/1 labels for a Bernoulli, negative counts). "
            "pyro_dp gives such rows a zero term (the per-row rule keeps them private) — they are left out of the "
            "posterior. Check that the data match the model (docs/privacy.md, 'The per-row rule')",
            RuleMappedRowsWarning, stacklevel=5)
    return value


def data_free_start(lik, z: torch.Tensor) -> torch.Tensor:
    r"""The start of the tuning: of ``z`` (the kernel's data-free start, e.g.
    :func:`init_to_center`) and the origin of unconstrained space (unit scales, uniform
    simplexes, interval midpoints), the one with the higher prior density
    :math:`\log p(\theta)+\log|\det J|`. A prior mean can lie where the prior has almost no
    mass (the thesis banana's :math:`E\theta_2 = -a\sigma_0^2 = -20000`, while its mode is the
    origin); comparing two fixed points is data-free and, unlike a search for the prior's mode,
    cannot run off to infinity on a hierarchical (funnel) prior.
    """
    best, best_lp = z, float(lik.log_prior(z))
    origin = torch.zeros_like(z)
    lp = float(lik.log_prior(origin))
    if math.isfinite(lp) and not lp <= best_lp:  # also replaces a start of non-finite density
        best = origin
    return best


def adapt_clip(norms, clip, quantile, n, noise_multiplier, noise, relation, record, tail_scaled=False) -> float:
    r"""One step of the adaptive clip of Andrew et al. 2021, Alg. 1: release the number of rows
    whose norm is at most ``clip`` (a non-finite norm is not counted: the per-row rule) with
    :func:`~pyro_dp.mechanisms.noisy_count`, and move the clip geometrically towards the
    ``quantile`` :math:`\gamma`: :math:`C \leftarrow C\exp(-\eta_C(b-\gamma))`, with
    :math:`b-\gamma` scaled by the room on its side (:math:`1-\gamma` above, :math:`\gamma`
    below) so that a high quantile is approached as fast from above as from below.

    ``tail_scaled`` (the raised ratio quantile of :meth:`DPAutoTune.ratio_quantile`, a few rows
    in :math:`N`): :math:`b-\gamma` is scaled by the tail :math:`1-\gamma` on both sides and
    capped at :math:`\pm 1`, so that the clip also climbs towards such a quantile at up to
    :math:`e^{\eta_C}` per step (with the room :math:`\gamma` below it climbed by about
    :math:`e^{\eta_C(\gamma-b)}`, i.e. not at all when 1% of the rows are above it)."""
    below = (torch.isfinite(norms) & (norms <= clip)).sum()
    cnt = noisy_count(below, noise_multiplier, noise, relation)
    record(cnt.event)
    frac = min(max(float(cnt.value) / n, 0.0), 1.0)  # post-processing
    gap = frac - quantile
    if tail_scaled:
        return clip * math.exp(-_CLIP_RATE * min(max(gap / (1.0 - quantile), -1.0), 1.0))
    return clip * math.exp(-_CLIP_RATE * gap / ((1.0 - quantile) if gap > 0 else quantile))


class ClipSchedule:
    r"""The adaptive clips of :meth:`DPAutoTune.run`, one :func:`adapt_clip` step per DP-Adam
    step, for the two quantiles ``(grad_quantile, ratio_quantile(n))``, and their geometric means
    over the last third of the steps (Polyak-Ruppert averaging, Polyak & Juditsky 1992). The
    tuner and :func:`~pyro_dp.default_path.one_release.simulated_ratio_clip` (which forecasts the
    ratio clip, ``which=(1,)``) both run this schedule, so the forecast follows the tuner.

    Starts: both clips at the histogram's ``grad_quantile`` ``c0``; a raised ratio quantile
    (:meth:`DPAutoTune.ratio_quantile` above ``llr_quantile``) from its own histogram quantile
    ``c0_ratio`` when higher (the adaptive clip approaches a high quantile fast from above, but
    from below only at about (q - fraction below) per step, too slow for 1 - q of a few rows in
    :math:`10^5`, measured), stepped with ``tail_scaled``.
    """

    def __init__(self, tuner, n: int, c0: float, c0_ratio: float):
        q_ratio = tuner.ratio_quantile(n)
        self.n, self.raised = n, q_ratio > tuner.llr_quantile
        self.quantiles = (tuner.grad_quantile, q_ratio)
        self.clips = [c0, max(c0, c0_ratio) if self.raised else c0]
        self.tail_from = tuner.num_steps - max(1, tuner.num_steps // 3)
        self.log_sums, self.tail = [0.0, 0.0], 0

    def step(self, t: int, norms, noise_multiplier, noise, relation, record, which=(0, 1)) -> None:
        """Step ``t``: one :func:`adapt_clip` release per clip in ``which`` (0: gradient, 1: ratio),
        in that order, then, in the last third, add their logs to the tail's sums."""
        for j in which:
            self.clips[j] = adapt_clip(norms, self.clips[j], self.quantiles[j], self.n, noise_multiplier, noise,
                                       relation, record, tail_scaled=(j == 1 and self.raised))
        if t >= self.tail_from:
            self.tail += 1
            for j in which:
                self.log_sums[j] += math.log(self.clips[j])

    def means(self):
        """The clips' geometric means over the last third: ``(gradient, ratio)``."""
        return tuple(math.exp(c / self.tail) for c in self.log_sums)
