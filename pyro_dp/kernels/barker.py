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
from ..mechanisms import (RDPCurveEvent, clip_scalars, draw_batch_indices, first_distinct_draws, gaussian_release,
                          without_replacement_draws)
from .base import check_positive
from .mh import MHState, RandomWalkKernel, RatioRelease, can_fuse, check_batch_size
from .proposals import GaussianMixtureCorrection, _correction_tensors, barker_accept, correction_draws

__all__ = [
    "DPBarker",
    "barker_release",
    "batch_log_ratios",
    "batch_ratio_statistics",
    "fused_barker_release_accept",
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


def batch_ratio_statistics(lik, z: torch.Tensor, z_new: torch.Tensor, idx: torch.Tensor, clip, statistics,
                           name: str):
    r"""``(log_prior(z_new), clipped fraction, statistics(r, None, clip))`` where :math:`r_i =
    \ell_i(z') - \ell_i(z)` on rows ``idx`` (untempered) went through
    :func:`~pyro_dp.mechanisms.clip_scalars` (the per-row rule, then the clip to
    :math:`\pm` ``clip``). ``statistics`` reduces the clipped ratios to a tuple of 0-d tensors
    (the minibatch kernels' :math:`\lambda^*`, :math:`\sigma_b^2`, ...). On the compiled path it
    all runs as one graph on a padded bucket of the rows
    (:meth:`~pyro_dp.compiled.CompiledLikelihood.clipped_batch_ratios`): ``statistics`` is then
    called with the 0/1 mask of the real rows as ``valid`` (the padded rows' ratios are 0) and
    must give the same values; ``name`` identifies it and every constant it closes over.
    The clipped fraction is a **non-private** diagnostic (0 for an empty batch). **Reads the
    data** (release the statistics only through a mechanism); cost :math:`O(|idx|)`.

    >>> import torch
    >>> from pyro_dp.models.examples import normal_mean_model as model
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0, 1.0]),), seed=0)
    >>> lp, frac, (s,) = batch_ratio_statistics(lik, torch.tensor([0.0]), torch.tensor([1.0]),
    ...                                         torch.tensor([0, 1]), 2.0, lambda r, valid, c: (r.sum(),), "sum")
    >>> float(s), frac  # ratios -0.5 and 2.5, the second clipped to 2
    (1.5, 0.5)
    """
    out = None
    if idx.numel() and getattr(lik, "compiled", None) is not None:
        out = lik.compiled.clipped_batch_ratios(name, statistics, z, z_new, idx, clip)
    if out is None:
        r, lp_new = batch_log_ratios(lik, z, z_new, idx)
        r, clipped = clip_scalars(r, clip)
        out = lp_new, clipped.sum(), clipped.numel(), tuple(statistics(r, None, clip))
    lp_new, n_clipped, n_rows, stats = out
    n_rows = int(n_rows)
    return lp_new, (int(n_clipped) / n_rows if n_rows else 0.0), stats


def _barker_statistics(n: int, b: int, temperature: float):
    r"""``statistics(r, valid, clip) -> (lambda*, sigma_b^2)`` of clipped ratios (Heikkilä et al.
    2019 eq. (6), tempered; thesis §3.3: the :math:`1/b` sample variance), for
    :func:`batch_ratio_statistics`."""
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


def barker_release(lik, noise, state: MHState, z_new: torch.Tensor, *, batch_size: int,
                   correction: GaussianMixtureCorrection, event) -> RatioRelease:
    r"""One DP Barker release (module docstring): a secret batch of ``batch_size`` rows without
    replacement, the clipped ratios' :math:`\lambda^*_S` and :math:`\sigma_b^2`, and one draw of
    :math:`\mathcal N(\lambda^*_S, C - \sigma_b^2)` (Heikkilä et al. 2019, eq. (18))."""
    n, b, T = lik.num_rows, int(batch_size), lik.temperature
    idx = noise.sample_without_replacement(n, b, device=state.z.device)  # secret batch
    # Heikkilä et al. 2019, Thm 2 condition (19) with tempering (23): |T r_i| <= sqrt(b)/N
    lp_new, frac, (lam_batch, var_b) = batch_ratio_statistics(
        lik, state.z, z_new, idx, math.sqrt(b) / (n * T), _barker_statistics(n, b, T),
        f"barker_statistics[n={n},b={b},T={T!r}]")
    rel = gaussian_release(lam_batch, torch.sqrt(correction.C - var_b), event, noise)
    # What the step sees of the noise is public: its total variance C (privacy noise C - sigma_b^2
    # plus, by the CLT, the batch's sigma_b^2), never the data-dependent split.
    total = torch.as_tensor(correction.C, dtype=lam_batch.dtype, device=lam_batch.device)
    return RatioRelease(rel.value, total, lp_new, (event,), frac, float(torch.sqrt(total)))


def _fused_barker_fn(lik, n: int, b: int, temperature: float, C: float):
    r"""One DP Barker step after the proposal, as a pure tensor function for one graph: the
    batch (the first ``b`` distinct of the pre-drawn indices ``draws`` with their sorted
    ``keys``, :func:`~pyro_dp.mechanisms.first_distinct_draws`), the clipped ratios' :math:`\lambda^*_S`
    and :math:`\sigma_b^2` (:func:`_barker_statistics`), the release :math:`\lambda^*_S +
    \sqrt{C - \sigma_b^2}\,\xi` (eq. (18); ``xi`` the secret stream's standard normal, scaled
    as :meth:`~pyro_dp.mechanisms.NoiseSource.normal` scales it), and the Barker test with the
    :math:`V_{\rm corr}` draw from the pre-drawn ``expo`` (the component by Gumbel-max, as
    :func:`~.proposals._correction_draw`), ``u`` (the sign) and ``xc``, ANDed with the data-free
    validity check of :func:`~.mh.mh_step`. Outputs ``log p(θ')`` and ``(accepted, clipped
    rows, fewer than b distinct draws)`` as one float64 vector; the ratios and statistics never
    leave the graph, and the release leaves only inside the accept decision."""
    statistics = _barker_statistics(n, b, temperature)
    clip = math.sqrt(b) / (n * temperature)  # Heikkilä et al. 2019, Thm 2 (19) with tempering (23)

    def step(z, z_new, draws, keys, xi, expo, u, xc, lp_old, log_q, means, sds, weights):
        idx, short = first_distinct_draws(draws, keys, b)
        ll_old, _ = lik._eager_loglik_and_prior(z, idx)
        ll_new, lp_new = lik._eager_loglik_and_prior(z_new, idx)
        r, clipped = clip_scalars(ll_new - ll_old, clip)
        lam_batch, var_b = statistics(r, None, clip)
        std = torch.sqrt(C - var_b)
        log_ratio = lam_batch + (xi * std.to(torch.float64)).to(lam_batch.dtype)  # eq. (18), gaussian_release
        lambda_hat = log_ratio + (lp_new - lp_old) + log_q
        k = torch.argmax(weights / expo).reshape(1)  # a tensor index: no value leaves the graph
        corr = (torch.where(u < 0.5, 1.0, -1.0).to(means.dtype) * means.index_select(0, k)
                + sds.index_select(0, k) * xc).reshape(())
        valid = torch.isfinite(lp_new) & torch.isfinite(lambda_hat)  # data-free (the noise variance is C)
        accepted = (lambda_hat + corr > 0) & valid  # proposals.barker_accept
        flags = torch.stack([accepted.to(torch.float64), clipped.sum().to(torch.float64), short.to(torch.float64)])
        return lp_new, flags

    return step


def fused_barker_release_accept(lik, noise, rng, state: MHState, z_new: torch.Tensor, log_q_ratio, *,
                                batch_size: int, correction: GaussianMixtureCorrection, event):
    r"""``(RatioRelease, accepted)`` of one DP Barker iteration in one compiled graph
    (:func:`_fused_barker_fn`), or ``None`` with both streams as they were: decided before
    any draw when the step cannot be fused (eager path, sharded rows, an untraceable model,
    the dense or overflow branches of :func:`~pyro_dp.mechanisms.sample_without_replacement`),
    or after the graph when the pre-drawn indices hold fewer than ``b`` distinct values
    (rare; it depends only on the secret draws, not on the data): the generators are then
    restored and the eager step draws the batch again with its extra draws. The draws are
    those of :func:`barker_release` followed by :func:`~.proposals.barker_accept`, in their
    order: the batch's indices and the release noise (secret stream), then the
    :math:`V_{\rm corr}` draw (algorithm stream); chain and ledger are the eager path's
    (``tests/test_compiled.py``). The release's ``log_ratio`` is not returned (``None``):
    nothing after the accept decision reads it."""
    if not can_fuse(lik, noise):
        return None
    n, b, T = lik.num_rows, int(batch_size), float(lik.temperature)
    m = without_replacement_draws(n, b)
    if m is None:
        return None
    z = state.z
    means, sds, weights, _ = _correction_tensors(correction, z.dtype, z.device)
    gen = noise.generator
    like, ints = cached_zeros((), torch.float64, z.device), cached_zeros((m,), torch.long, z.device)
    zero = cached_zeros((), z.dtype, z.device)
    example = (z, z_new, ints, ints, like, weights, like, zero, state.log_prior, zero, means, sds, weights)
    graph = lik.compiled.fused_graph(f"barker_step[n={n},b={b},T={T!r},C={correction.C!r}]",
                                     _fused_barker_fn(lik, n, b, T, correction.C), example, full_data=False)
    if graph is None:
        return None
    secret, public = gen.get_state(), rng.get_state()
    dev = z.device
    draws, keys = draw_batch_indices(gen, n, m, m, dev)  # sample_without_replacement's first draws
    xi = noise.standard_normal(())  # gaussian_release's draw
    expo, u, xc = correction_draws(rng, correction, z)  # proposals._correction_draw's draws
    q = torch.as_tensor(log_q_ratio, dtype=z.dtype, device=dev)
    lp_new, flags = graph(z, z_new, draws, keys, xi.to(dev), expo.to(dev), u.to(dev), xc,
                          state.log_prior, q, means, sds, weights)
    accepted, n_clipped, short = flags.tolist()
    if short:  # fewer than b distinct draws: the eager step draws more (data-free, see above)
        gen.set_state(secret)
        rng.set_state(public)
        return None
    total = correction.C
    rel = RatioRelease(None, total, lp_new, (event,), n_clipped / b, math.sqrt(total))
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
        self._batch_size_given = batch_size is not None  # None: the data plate's subsample_size
        self.max_order = check_positive("max_order", max_order, integer=True)
        self.batch_size = None if batch_size is None else self._check_plate_batch_size(batch_size)
        self._setup_walk(proposal_scale, one_component=one_component, guided_walk=guided_walk)
        self.correction = load_correction()
        if self.correction.C != BARKER_C:
            raise ValueError("the shipped V_corr was fitted for a different C")
        self._event = None

    takes_plate_batch = True

    def _rows_per_iteration(self):
        return "penalty", float(self.batch_size), 0.0  # auto_compile: one batch of ratios

    def _check_plate_batch_size(self, batch_size) -> int:
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

    def _per_iteration_events(self):
        return [self._rdp_event()]

    def _release(self, noise, state, z_new):
        return barker_release(self.lik, noise, state, z_new, batch_size=self.batch_size,
                              correction=self.correction, event=self._rdp_event())

    def _accept(self, rng, lambda_hat, noise_var):
        return barker_accept(rng, lambda_hat, self.correction)  # the noise is exactly C: no penalty

    def _fused_release_accept(self, noise, rng, state, z_new, log_q_ratio):
        return fused_barker_release_accept(self.lik, noise, rng, state, z_new, log_q_ratio,
                                           batch_size=self.batch_size, correction=self.correction,
                                           event=self._rdp_event())
