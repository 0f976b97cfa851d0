r"""DP Barker: subsampled, differentially private Metropolis–Hastings with the Barker test
(Heikkilä, Jälkö, Dikmen & Honkela 2019; Räisä 2021 thesis §3.2, Alg. 2, Thm 7).

Each iteration proposes :math:`\theta'` by a Gaussian random walk, draws a batch
:math:`S` of :math:`b` of the :math:`N` rows **without replacement**, and computes the
per-example log-likelihood ratios :math:`r_i = \ell_i(\theta') - \ell_i(\theta)`, clipped to
:math:`|r_i| \le \sqrt b/(NT)` (Heikkilä et al. 2019, Thm 2 condition (19), tempered as in
(23): :math:`|T r_i| \le \sqrt b / N`, i.e. :math:`|r_i| \le \sqrt b/n_0` for :math:`T = n_0/N`).
It releases one draw of

.. math::
    \mathcal N\big(\lambda^*_S,\; C - \sigma_b^2\big),\qquad
    \lambda^*_S = \frac{NT}{b}\sum_{i\in S} r_i,\qquad
    \sigma_b^2 = \frac{(NT)^2}{b}\,\widehat{\mathrm{Var}}_S(r)

(Heikkilä et al. 2019, eqs. (6), (16)–(18); thesis §3.3 for :math:`\sigma_b^2` with the
:math:`1/b` sample variance), adds the data-free log prior and proposal ratios, and accepts iff
the sum plus :math:`V_{\rm corr}` is positive, where :math:`\mathcal N(0, C) + V_{\rm corr}
\approx \mathrm{Logistic}(0, 1)` (:func:`~pyro_dp.kernels.proposals.barker_accept`).
:math:`C = 2` (Heikkilä et al. 2019, §3.3).

**No data-dependent failure.** The clip makes :math:`|T r_i| \le \sqrt b/N`, so
:math:`\sigma_b^2 = \frac{N^2}{b}\widehat{\mathrm{Var}}_S(Tr) \le \frac{N^2}{b}\cdot\frac{b}{N^2} = 1 < C` always: the noise
variance :math:`C - \sigma_b^2 \ge 1` never becomes invalid (the reference implementation
exits when it does, which leaks). No branch depends on the data.

Privacy: one iteration is :math:`(\alpha, \varepsilon'(\alpha))`-RDP on the batch (Thm 2),
amplified by sampling without replacement (Heikkilä Cor. 2 = WBK19 Thm 9), for integer
:math:`2 \le \alpha < b/5`. Each iteration records a
:class:`~pyro_dp.mechanisms.RDPCurveEvent` on exactly those orders (substitute relation),
composed by the ``"rdp"`` accountant and converted to :math:`(\varepsilon, \delta)` by
optimising over them (:mod:`pyro_dp.accounting.subsampled`) with the improved conversion of
Balle et al. 2020, Thm 21 / Canonne, Kamath & Steinke 2020, Prop. 12 (as Opacus and
``dp_accounting`` convert RDP; Mironov's 2017 Prop. 3, which the paper states, is
``RDPAccountant(conversion="mironov")``: e.g. :math:`b = 1000`, :math:`N = 10^6`, 1000
iterations, :math:`\delta = 10^{-6}`: ε = 0.1736 instead of 0.2258).

The chain is approximate: it targets the tempered posterior up to the CLT error of the
batch mean and the :math:`V_{\rm corr}` approximation (Kolmogorov distance ~6e-4 here), and the
bias from clipping.
"""
from __future__ import annotations

import json
import math
import os

import torch

from ..accounting import UnsupportedEventError, get_accountant
from ..accounting.subsampled import barker_orders, dp_barker_event
from ..compiled import cached_zeros
from ..private import diagnostic  # the clipped-row count (issue 58)
from ..mechanisms.release import graph_release
from ..mechanisms import GaussianStdReleaseSpec, RDPCurveEvent, batch_without_replacement, clip_scalars
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease, can_fuse, check_batch_size, valid_move
from .releases import ReleasePlan
from .proposals import GaussianMixtureCorrection, correction_tensors, correction_draws, correction_from_draws

__all__ = [
    "DPBarker",
    "barker_step_fn",
    "barker_release_accept",
    "barker_noise_std",
    "batch_log_ratios",
    "barker_batch_statistics",
    "load_correction",
    "BARKER_C",
]

#: Variance of the Gaussian part of the logistic decomposition (Heikkilä et al. 2019, §3.3).
BARKER_C = 2.0

_VCORR_FILE = os.path.join(os.path.dirname(__file__), "barker_vcorr.json")


def load_correction(path: str = _VCORR_FILE) -> GaussianMixtureCorrection:
    """The shipped :math:`V_{\\rm corr}` mixture (fitted by ``scripts/fit_barker_vcorr.py``)."""
    with open(path) as f:
        d = json.load(f)
    t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    return GaussianMixtureCorrection(float(d["C"]), t(d["means"]), t(d["variances"]), t(d["weights"]))


def batch_log_ratios(lik, z: torch.Tensor, z_new: torch.Tensor, idx: torch.Tensor):
    r"""``(r, log_prior(z_new))`` with :math:`r_i = \ell_i(z') - \ell_i(z)` on rows ``idx``
    only (untempered; cost :math:`O(|idx|)` when the model indexes its data by the plate)."""
    if idx.numel() == 0:
        return torch.zeros(0, dtype=z.dtype, device=z.device), lik.log_prior(z_new)
    return lik.log_ratios(z, z_new, idx)  # one graph on the compiled path


def _barker_statistics(n: int, b: int, temperature: float):
    r"""``statistics(r, valid, clip) -> (lambda*, sigma_b^2)`` of clipped ratios (Heikkilä et al.
    2019 eq. (6), tempered; thesis §3.3: the :math:`1/b` sample variance), for
    :func:`barker_step_fn` and :func:`barker_batch_statistics` (``valid``: the 0/1 mask of a
    padded bucket's real rows)."""
    scale = n * temperature / b

    def statistics(r, valid, clip):
        lam_batch = scale * r.sum()
        if valid is None:
            var = r.var(unbiased=False)
        else:  # a padded bucket (padded rows are 0): the 1/b variance of the b real rows
            var = (valid * (r - r.sum() / b) ** 2).sum() / b
        # the clip bounds the variance term by 1 < C; the clamp only guards round-off
        return lam_batch, torch.clamp(scale * scale * b * var, max=1.0)

    return statistics


def barker_batch_statistics(r: torch.Tensor, n: int, b: int, temperature: float):
    r"""``(lambda*, sigma_b^2, clipped mask)`` of a batch of untempered ratios ``r``.

    Clips :math:`|r_i| \le \sqrt b/(NT)` (Heikkilä et al. 2019, Thm 2 condition (19) with
    tempering (23)), then :math:`\lambda^* = \frac{NT}{b}\sum_S r_i` (eq. (6), tempered) and
    :math:`\sigma_b^2 = \frac{(NT)^2}{b}\widehat{\mathrm{Var}}_S(r)` with the :math:`1/b` sample
    variance (thesis §3.3), which the clip bounds by 1 < C; the final clamp only guards
    floating-point round-off.

    >>> n, b, T = 1000, 100, 0.1
    >>> r = torch.tensor([1e9, -1e9] * 50, dtype=torch.float64)  # adversarial: maximal variance
    >>> lam, var_b, mask = barker_batch_statistics(r, n, b, T)
    >>> float(lam), round(float(var_b), 12), bool(mask.all())
    (0.0, 1.0, True)
    """
    r, clipped = clip_scalars(r, math.sqrt(b) / (n * temperature))
    lam_batch, var_b = _barker_statistics(n, b, temperature)(r, None, None)
    return lam_batch, var_b, clipped


def barker_noise_std(var_b: torch.Tensor, C: float) -> torch.Tensor:
    r"""The privacy noise's standard deviation :math:`\sqrt{C - \sigma_b^2}` (Heikkilä et al.
    2019, eq. (18)): the released :math:`\lambda^*_S` then carries Gaussian noise of variance
    exactly :math:`C` in all (privacy noise plus, by the CLT, the batch's :math:`\sigma_b^2`).
    The clip bounds :math:`\sigma_b^2 \le 1 < C` (module doc)."""
    return torch.sqrt(C - var_b)


def traced_log_ratios(lik):
    """``log_ratios(z, z_new, idx) -> (r, log p(z_new))`` inside a fused graph: the model's terms
    traced as they are (``lik.log_ratios``' eager branch; outside a graph the step calls
    :func:`batch_log_ratios`, which may run the likelihood's own graph)."""
    def log_ratios(z, z_new, idx):
        ll_old, _ = lik.eager_loglik_and_prior(z, idx)
        ll_new, lp_new = lik.eager_loglik_and_prior(z_new, idx)
        return ll_new - ll_old, lp_new

    return log_ratios


def barker_step_fn(lik, n: int, b: int, temperature: float, C: float, spec: GaussianStdReleaseSpec, log_ratios):
    r"""One DP Barker iteration after the proposal, written once as a pure tensor function
    ``step(z, z_new, idx, ξ, E, u, x, log p(θ), log q-ratio, means, sds, weights) -> (log p(θ'),
    released λ*, flags)``: the batch ``idx`` (drawn before it from the secret stream), the clipped
    ratios' :math:`\lambda^*_S` and :math:`\sigma_b^2` (:func:`_barker_statistics`, ratios clipped
    to :math:`\pm\sqrt b/(NT)`, Heikkilä et al. 2019 Thm 2 (19) with tempering (23)), the release
    :math:`\lambda^*_S + \sqrt{C - \sigma_b^2}\,\xi` (eq. (18); ``spec`` adds it, ``ξ`` from the
    secret stream), and the Barker test :math:`\hat\lambda + V_{\rm corr} > 0` (eq. (9)) with
    :math:`V_{\rm corr}` from its pre-drawn randomness (:func:`~.proposals.correction_from_draws`),
    ANDed with the data-free validity check :func:`~.mh.valid_move` (the noise variance is
    :math:`C`, always finite). The eager path runs it as it is (``log_ratios`` =
    :func:`batch_log_ratios`); ``jit_compile=True`` traces the same function into one graph.
    ``flags``: ``(accepted, clipped rows)`` in float64."""
    statistics = _barker_statistics(n, b, temperature)
    clip = math.sqrt(b) / (n * temperature)  # Heikkilä et al. 2019, Thm 2 (19) with tempering (23)

    def step(z, z_new, idx, xi, expo, u, xc, lp_old, log_q, means, sds, weights):
        r, lp_new = log_ratios(z, z_new, idx)
        r, clipped = clip_scalars(r, clip)  # the per-row rule, then the clip
        lam_batch, var_b = statistics(r, None, clip)
        log_ratio = spec.release(lam_batch, barker_noise_std(var_b, C), xi)  # eq. (18)
        lambda_hat = log_ratio + (lp_new - lp_old) + log_q
        valid = valid_move(lp_new, lambda_hat)  # data-free (the noise variance is C)
        accepted = (lambda_hat + correction_from_draws(expo, u, xc, means, sds, weights) > 0) & valid  # eq. (9)
        return lp_new, log_ratio, torch.stack([accepted.to(torch.float64), diagnostic(clipped.sum()).to(torch.float64)])

    return step


def barker_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio, *,
                          batch_size: int, correction: GaussianMixtureCorrection, event):
    r"""``(RatioRelease, accepted)`` of one DP Barker iteration: :func:`barker_step_fn` run as one
    compiled graph when it can be (the compiled path in one process and a model the trace can
    represent: decided before anything is drawn), else as it is. Its randomness is drawn before
    it, in the eager order: the batch of ``b`` rows without replacement and the release's
    standard normal (secret stream, :func:`~pyro_dp.mechanisms.batch_without_replacement` and the
    release spec), then the :math:`V_{\rm corr}` draws (algorithm stream,
    :func:`~.proposals.correction_draws`, in :math:`\hat\lambda`'s dtype). Chain and ledger
    are the same on both paths (``tests/kernels/test_golden.py``, ``tests/test_compiled.py``)."""
    n, b, T, C = lik.num_rows, int(batch_size), float(lik.temperature), correction.C
    spec = GaussianStdReleaseSpec(event)
    z, dev = state.z, state.z.device
    like = cached_zeros((), torch.promote_types(lik.dtype, state.log_prior.dtype), dev)  # λ̂'s dtype
    means, sds, weights = correction_tensors(correction, like.dtype, dev)
    step = None
    if can_fuse(lik, noise):
        f64, ints = cached_zeros((), torch.float64, dev), cached_zeros((b,), torch.long, dev)
        example = (z, z_new, ints, f64, weights, f64, like, state.log_prior, cached_zeros((), z.dtype, dev), means,
                   sds, weights)
        step = lik.compiled.fused_graph(f"barker_step[n={n},b={b},T={T!r},C={C!r}]",
                                        barker_step_fn(lik, n, b, T, C, spec, traced_log_ratios(lik)), example,
                                        full_data=False, released=(1, 2), noise=(3,), release=graph_release)  # (log p(θ'), λ*, flags)
    if step is None:  # the same function, run as it is
        step = barker_step_fn(lik, n, b, T, C, spec, lambda z0, z1, idx: batch_log_ratios(lik, z0, z1, idx))
    idx = batch_without_replacement(noise, n, b, device=dev)  # the secret batch
    xi = spec.draw(noise, (), device=dev)  # the release's standard normal (secret stream)
    expo, u, xc = correction_draws(rng, correction, like)  # V_corr's randomness (algorithm stream)
    q = torch.as_tensor(log_q_ratio, dtype=z.dtype, device=dev)
    lp_new, log_ratio, flags = step(z, z_new, idx, xi, expo.to(dev), u.to(dev), xc, state.log_prior, q, means, sds,
                                    weights)
    accepted, n_clipped = flags.tolist()
    # What the step sees of the noise is public: its total variance C (privacy noise C - sigma_b^2
    # plus, by the CLT, the batch's sigma_b^2), never the data-dependent split.
    rel = RatioRelease(log_ratio, C, lp_new, (event,), n_clipped / b, math.sqrt(C))
    return rel, accepted == 1.0


class DPBarker(RandomWalkKernel):
    r"""DP Barker (Heikkilä et al. 2019) as a Pyro ``MCMCKernel``.

    :param model: Pyro model that indexes its data by the data plate's indices
        (``with pyro.plate("data", N) as idx: ... obs=y[idx]``) so a batch costs :math:`O(b)`.
    :param int batch_size: :math:`b`, rows per iteration (without replacement); needs
        :math:`10 < b \le N` (an RDP order :math:`2 \le \alpha < b/5` must exist); ``None``:
        the data plate's ``subsample_size`` (:mod:`~pyro_dp.kernels.declared_batch`), accounted as
        that :math:`b`.
    :param proposal_scale: random-walk standard deviation in unconstrained space.
    :param float temperature: :math:`T = n_0/N`; per-example ratios are clipped to
        :math:`\sqrt b/(NT) = \sqrt b/n_0` (Heikkilä et al. 2019, eq. (23)).
    :param bool one_component, guided_walk: OCU / GWMH proposals as in
        :class:`~pyro_dp.kernels.penalty.DPPenalty`.
    :param int max_order: largest RDP order evaluated (default 256; fewer orders can only
        make ε larger).

    The privacy noise is fixed by the method (:math:`C = 2`), so there is no noise knob:
    a budget (``epsilon``, ``delta``) only limits the number of iterations. Other keyword
    arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`; the default accountant is
    ``"rdp"`` (the only one that composes :class:`~pyro_dp.mechanisms.RDPCurveEvent`), with
    the improved RDP-to-:math:`(\varepsilon,\delta)` conversion (module doc).

    Example
    -------
    >>> import torch; from pyro.infer import MCMC; from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = torch.randn(10_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1.0
    >>> kernel = DPBarker(model, batch_size=200, proposal_scale=0.1, temperature=100 / 10_000,
    ...                   init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=300, warmup_steps=100, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"].mean()) - 1.0) < 0.3
    True
    >>> round(kernel.get_epsilon(1e-5), 2)  # 400 iterations, b/N = 0.02 (Heikkilä Thm 2 + Cor 2)
    2.56
    """

    def __init__(
        self,
        model,
        batch_size: int,
        proposal_scale,
        *,
        one_component: bool = False,
        guided_walk: bool = False,
        max_order: int = 256,
        accountant: str = "rdp",
        **kwargs,
    ):
        if kwargs.get("non_private"):
            raise ValueError("DPBarker has no non-private mode: its noise is fixed by the Barker test (C = 2)")
        super().__init__(model, accountant=accountant, **kwargs)
        self.batch_size_given = batch_size is not None  # None: the data plate's subsample_size
        self.max_order = check_positive("max_order", max_order, integer=True)
        self.batch_size = None if batch_size is None else self.check_plate_batch_size(batch_size)
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk)
        self.correction = load_correction()
        if self.correction.C != BARKER_C:
            raise ValueError("the shipped V_corr was fitted for a different C")
        self._event = None

    takes_plate_batch = True

    def check_plate_batch_size(self, batch_size) -> int:
        b = check_batch_size(batch_size)
        barker_orders(b, self.max_order)  # raises if b/5 leaves no RDP order
        return b

    def _rdp_event(self) -> RDPCurveEvent:
        n = self.lik.num_rows
        if self.batch_size > n:
            raise ValueError(f"batch_size={self.batch_size} exceeds the number of rows N={n}")
        if self._event is None or self._event_n != n:
            self._event, self._event_n = dp_barker_event(self.batch_size, n, self.max_order), n
        return self._event

    def _calibrate(self):
        # before any data is read: the accountant must compose RDP curves
        if not get_accountant(self.accountant).supports(self._rdp_event()):
            raise UnsupportedEventError(
                f"accountant {self.accountant!r} cannot compose DP Barker's RDP curve; use 'rdp'"
            )

    def releases(self, state=None):
        # Heikkilä et al. 2019 Thm 2: one RDP curve per iteration; auto_compile: one batch of ratios
        return ReleasePlan((self._rdp_event(),), cost=("penalty", float(self.batch_size), 0.0))

    # mh_step's release_accept (moves 2-3) as one function, eager or compiled: never None, so
    # RandomWalkKernel's _release/_accept hooks are not used
    def _release_accept(self, noise, rng, state, z_new, log_q_ratio):
        return barker_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio, batch_size=self.batch_size,
                                     correction=self.correction, event=self._rdp_event())
