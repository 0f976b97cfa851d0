r"""DP stochastic-gradient MCMC baselines: DP-SGLD and DP-SGNHT (no accept/reject test).

**The released quantity.** Every iteration draws a Poisson subsample :math:`B` of the rows
(each row independently with probability :math:`q = b/N`, :math:`b` the *expected* batch
size) and releases the clipped, noised gradient sum

.. math:: \tilde S = \sum_{i\in B} \mathrm{clip}_C(\nabla\ell_i(\theta)) + \zeta,
   \qquad \zeta \sim \mathcal N(0, \sigma^2 I),

through :func:`~pyro_dp.mechanisms.clipped_sum_with_noise`. The log-posterior gradient
estimate is the post-processing

.. math:: \tilde g(\theta) = \nabla\log p(\theta) + \frac{T N}{b}\,\tilde S

(Welling & Teh 2011, eq. 4, tempered by :math:`T`). We scale by :math:`N/b = 1/q`, not by
:math:`N/|B|`: under Poisson sampling :math:`E[\frac1q\sum_{i\in B} c_i] = \sum_i c_i`
(Horvitz–Thompson), whereas :math:`N/|B|` gives a biased ratio estimator. The realised
:math:`|B| \sim \mathrm{Binomial}(N, q)` is data-free (its law depends only on the public
:math:`N` and :math:`q`) but random; moreover under add/remove neighbours it reveals whether
the differing row was sampled, which the Gaussian mechanism's analysis does not cover —
another reason never to divide by it.

**The Langevin noise is the privacy noise** (Wang, Fienberg & Smola 2015; Li, Chen, Liu &
Carin 2019). DP-SGLD's update (Welling & Teh 2011, eq. 4)

.. math:: \theta' = \theta + \frac\eta2\Big(\nabla\log p(\theta) + \frac{TN}{b}
   \sum_{i\in B}\mathrm{clip}_C(\nabla\ell_i)\Big) + \mathcal N(0, \eta I)

equals :math:`\theta + \frac\eta2\tilde g` when the noise on the gradient sum has
:math:`\sigma_L = \sqrt\eta / (\frac\eta2 \frac{TN}{b}) = \frac{2b}{TN\sqrt\eta}`; the
Gaussian mechanism on :math:`\sum\mathrm{clip}_C` then has noise multiplier

.. math:: \mathrm{nm}_L = \sigma_L/\Delta = \frac{2b}{T N C\sqrt\eta}\ \text{(add/remove, }
   \Delta = C), \qquad \frac{b}{T N C\sqrt\eta}\ \text{(substitute, } \Delta = 2C).

DP-SGNHT (Ding et al. 2014, Alg. 1) injects :math:`\sqrt{2Ah}\,\mathcal N(0, I)` into a
momentum updated by :math:`h\tilde g`, so :math:`\sigma_L = \frac{b}{TN}\sqrt{2A/h}` and
:math:`\mathrm{nm}_L = \frac{b\sqrt{2A/h}}{TNC}` (add/remove; half that for substitute).
When the budget needs a larger noise multiplier :math:`\mathrm{nm} > \mathrm{nm}_L`, the
kernel adds the missing noise **explicitly** (it never changes the step size): the noise on
:math:`\sum\mathrm{clip}_C` then has :math:`\sigma = \mathrm{nm}\cdot\Delta`, i.e. the
Langevin noise variance is inflated by :math:`\kappa^2 = (\mathrm{nm}/\mathrm{nm}_L)^2`,
and a warning says so. All of it (Langevin part included) is drawn from the kernel's
dedicated :class:`~pyro_dp.mechanisms.NoiseSource`. So is the Poisson subsample: privacy
amplification by subsampling needs the batch to be as secret as the noise.

**Accounting.** Each iteration records ``SubsampledGaussianEvent(q, nm, "poisson")``. The
ledger's neighbouring relation is a parameter: ``"substitute"`` (default, as every kernel
of this library; ``nm = σ/(2C)``) or ``"add_remove"`` (Opacus's; ``nm = σ/C``, twice the
substitute value for the same physical noise). Under both the default accountant is
``"pld"``: ``dp_accounting``'s privacy-loss distribution with its pessimistic
(connect-the-dots) discretisation, ``REPLACE_ONE`` or ``ADD_OR_REMOVE_ONE``
(:class:`~pyro_dp.accounting.PLDAccountant`), as tight as the best of Opacus and
``dp_accounting`` (``docs/accounting.md``; e.g. :math:`q = 0.01`, nm = 1, 300 steps,
:math:`\delta = 10^{-5}`: ε = 1.068, where Opacus's RDP gives 1.451 and its PRV 1.078).
Under add/remove ``"rdp"`` (Opacus's RDP analysis, improved conversion: the value of
Opacus's ``RDPAccountant``), ``"prv"`` (Opacus's default, its upper bound) and ``"dp_rdp"``
also apply. Calibration searches on a coarse PLD grid first and certifies on the fine one
(:mod:`pyro_dp.accounting.planning`). There is no accept/reject step: the acceptance
rate is 1 by construction.

**What is public: N only under substitution** (issue #38). :math:`q = b/N` and the
:math:`N/b` scaling read :math:`N`, and the ledger's :math:`q` (hence ε) with them.
Substitution neighbours have the same :math:`N`, so under the default relation :math:`N`
is public and ε is the same on both neighbours. Add/remove neighbours differ in
:math:`N`: a kernel that read :math:`N` there would publish an ε that tells them apart (before
issue #38: ε 0.189972576 at :math:`N = 1000`, 0.189989549 at 1001). So ``relation="add_remove"`` needs
``public_num_rows=M``, a public row count the user states (a published data-set size, a
bound), used in place of :math:`N` everywhere the kernel would read it: :math:`q = b/M`, the
:math:`M/b` scaling, the calibration, the :math:`\delta \le 1/N` notice and a private
initialisation's step. The rows themselves are still Poisson-sampled one by one with
probability :math:`q` (the mechanism, whatever :math:`N` is), so ε depends on
:math:`b, M, \eta, C, T` and the run length only; without ``public_num_rows`` add/remove
is refused. **When** :math:`M \ne N`: the gradient estimate stays unbiased (each row is
kept with probability :math:`q`, so :math:`E[\frac1q\sum_{i\in B} c_i] = \sum_{i=1}^N
c_i` for any :math:`q`) and the Langevin noise is unchanged (:math:`\mathrm{nm}_L`
depends on :math:`q` only); what changes is the expected batch :math:`qN = bN/M` rows,
not :math:`b` — more work and less subsampling variance when :math:`M < N`, the reverse
when :math:`M > N` — and the ledger's :math:`q` is the stated :math:`b/M`, which is the
true inclusion probability, so ε is exact for the rows actually sampled. Only the batch
size, a secret, depends on :math:`N`.

**Bias.** SG-MCMC with a fixed step size is biased: on a Gaussian posterior with variance
:math:`v`, exact-gradient SGLD has stationary variance :math:`v/(1-\eta/(4v))`, and the
subsampling noise adds more (see ``tests/kernels/test_sgmcmc.py`` for the exact formula).
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import NamedTuple, Optional, Tuple

import torch

from ..accounting import get_accountant
from ..mechanisms import SubsampledGaussianEvent
from .base import DPKernel, check_positive
from .path_hook import default_path
from .releases import Budget, init_events, sgld_noise, sgld_releases
from .runner import LANGEVIN_BURN_IN
from .scales import init_to_center
from .sg_gradient import GradientRelease, private_gradient, private_gradient_fn  # noqa: F401 (re-exported)

__all__ = [
    "DPSGLD",
    "DPSGNHT",
    "SGLDState",
    "SGNHTState",
    "SGMCMCInfo",
    "GradientRelease",
    "private_gradient",
    "private_gradient_fn",
    "langevin_noise_multiplier",
    "sgld_init",
    "sgld_step",
    "sgld_update",
    "sgnht_init",
    "sgnht_step",
    "sgnht_update",
]

_SENSITIVITY = {"add_remove": 1.0, "substitute": 2.0}  # Δ / C for a sum of C-clipped rows


class SGLDState(NamedTuple):
    """State of a DP-SGLD chain.

    :ivar z: current point, flat, in unconstrained space.
    """

    z: torch.Tensor


class SGNHTState(NamedTuple):
    """State of a DP-SGNHT chain (Ding et al. 2014, Alg. 1).

    :ivar z: current point :math:`\\theta`, flat, in unconstrained space.
    :ivar momentum: :math:`p`, same shape as ``z``.
    :ivar thermostat: :math:`\\xi`, a 0-d tensor (post-processing of released gradients).
    """

    z: torch.Tensor
    momentum: torch.Tensor
    thermostat: torch.Tensor


class SGMCMCInfo(NamedTuple):
    """What one iteration did.

    :ivar accepted: always ``True``: SG-MCMC has no accept/reject test.
    :ivar events: the one ``SubsampledGaussianEvent`` released.
    :ivar clipped_fraction: fraction of the batch whose gradient was clipped
        (**non-private** diagnostic; 0 for an empty batch).
    :ivar noise_std: :math:`\\sigma`, std of the noise on the clipped gradient sum.
    """

    accepted: bool
    events: Tuple
    clipped_fraction: float
    noise_std: float


def langevin_noise_multiplier(
    kind: str, *, step_size: float, sample_rate: float, grad_clip: float, temperature: float = 1.0,
    thermostat: float = 1.0, relation: str = "substitute",
) -> float:
    r"""Noise multiplier the Langevin noise alone gives the clipped gradient sum (module doc).

    SGLD: :math:`\sigma_L = 2q/(T\sqrt\eta)` (Welling & Teh 2011, eq. 4: noise
    :math:`\mathcal N(0,\eta)` against drift :math:`\frac\eta2\frac Tq\sum`); SGNHT:
    :math:`\sigma_L = q\sqrt{2A/h}/T` (Ding et al. 2014, Alg. 1: noise
    :math:`\sqrt{2Ah}\,\mathcal N(0,1)` against :math:`h\frac Tq\sum`). Returns
    :math:`\sigma_L/\Delta` with :math:`\Delta = C` (add/remove) or :math:`2C` (substitute).

    >>> langevin_noise_multiplier("sgld", step_size=1e-4, sample_rate=0.01, grad_clip=1.0)
    1.0
    >>> langevin_noise_multiplier("sgld", step_size=1e-4, sample_rate=0.01, grad_clip=1.0,
    ...                           relation="add_remove")
    2.0
    """
    q, T, C = float(sample_rate), float(temperature), float(grad_clip)
    if relation not in _SENSITIVITY:
        raise ValueError(f"relation must be 'add_remove' or 'substitute', got {relation!r}")
    if kind == "sgld":
        sigma = 2.0 * q / (T * math.sqrt(step_size))
    elif kind == "sgnht":
        sigma = q * math.sqrt(2.0 * thermostat / step_size) / T
    else:
        raise ValueError(f"kind must be 'sgld' or 'sgnht', got {kind!r}")
    return sigma / (_SENSITIVITY[relation] * C)


def sgld_init(lik, z: torch.Tensor) -> SGLDState:
    """Initial DP-SGLD state (data-free)."""
    return SGLDState(z)


def sgld_update(z: torch.Tensor, grad: torch.Tensor, step_size) -> torch.Tensor:
    r""":math:`\theta' = \theta + \frac\eta2\tilde g` (Welling & Teh 2011, eq. 4; the noise is
    inside :math:`\tilde g`): the update :func:`sgld_step` applies to the private gradient, and
    :func:`experiments.sgld_chains.run_sgld_chains` to many chains' at once.

    >>> sgld_update(torch.zeros(2), torch.ones(2), 0.1)
    tensor([0.0500, 0.0500])
    """
    return z + 0.5 * step_size * grad


def sgld_step(noise, state: SGLDState, lik, *, step_size, sample_rate, grad_clip, noise_multiplier,
              relation="substitute", diffusion: float = 0.0, rng=None, centre=None) -> Tuple[SGLDState, SGMCMCInfo]:
    r"""One DP-SGLD step :math:`\theta' = \theta + \frac\eta2\tilde g(\theta)`. With
    ``noise_multiplier`` equal to :func:`langevin_noise_multiplier` the noise inside
    :math:`\tilde g` is exactly the :math:`\mathcal N(0,\eta I)` of Welling & Teh (2011, eq. 4).
    With a smaller one (the default path's, :class:`DPSGLD`) ``diffusion`` is the variance
    missing from it, added as :math:`\mathcal N(0, \mathrm{diffusion}\,I)` drawn from ``rng``
    (the algorithm stream: data-free, not a release); ``0``: nothing drawn. ``centre``: the clip
    ball's (:func:`private_gradient`)."""
    rel = private_gradient(noise, lik, state.z, sample_rate=sample_rate, grad_clip=grad_clip,
                           noise_multiplier=noise_multiplier, relation=relation, centre=centre)
    z = sgld_update(state.z, rel.grad, step_size)
    if diffusion > 0:
        z = z + math.sqrt(diffusion) * torch.randn(z.shape, generator=rng, dtype=z.dtype, device=z.device)
    return SGLDState(z), SGMCMCInfo(True, (rel.event,), rel.clipped_fraction, rel.noise_std)


def sgnht_init(lik, z: torch.Tensor, rng: torch.Generator, thermostat: float) -> SGNHTState:
    """Initial DP-SGNHT state: :math:`p\\sim\\mathcal N(0,I)`, :math:`\\xi = A` (Ding et al.
    2014, Alg. 1); data-free, drawn from the algorithm stream ``rng``."""
    p = torch.randn(z.shape, generator=rng, dtype=z.dtype, device=z.device)
    return SGNHTState(z, p, torch.tensor(float(thermostat), dtype=z.dtype, device=z.device))


def sgnht_update(state: SGNHTState, grad: torch.Tensor, step_size) -> SGNHTState:
    r"""Ding et al. (2014), Alg. 1 given the private gradient :math:`\tilde g = -\nabla\tilde U`
    (the :math:`\sqrt{2Ah}\,\mathcal N(0,I)` is inside :math:`h\tilde g`, module doc):
    :math:`p' = p - h\xi p + h\tilde g`, :math:`\theta' = \theta + hp'`,
    :math:`\xi' = \xi + h(p'^\top p'/D - 1)`. The update :func:`sgnht_step` applies, and
    :func:`experiments.sgld_chains.run_sgnht_chains` to each chain under ``vmap``.

    >>> s = sgnht_update(SGNHTState(torch.zeros(2), torch.ones(2), torch.tensor(1.0)), torch.ones(2), 0.5)
    >>> s.momentum, s.z, s.thermostat
    (tensor([1., 1.]), tensor([0.5000, 0.5000]), tensor(1.))
    """
    h = step_size
    p = state.momentum - h * state.thermostat * state.momentum + h * grad  # Ding et al. 2014, Alg. 1
    z = state.z + h * p
    xi = state.thermostat + h * (p.dot(p) / p.numel() - 1.0)
    return SGNHTState(z, p, xi)


def sgnht_step(noise, state: SGNHTState, lik, *, step_size, sample_rate, grad_clip, noise_multiplier,
               relation="substitute") -> Tuple[SGNHTState, SGMCMCInfo]:
    r"""One DP-SGNHT step (Ding et al. 2014, Alg. 1, with :math:`-\nabla\tilde U = \tilde g`):

    .. math:: p' = p - h\xi p + h\tilde g(\theta), \quad \theta' = \theta + h p', \quad
       \xi' = \xi + h(p'^\top p'/D - 1),

    where the :math:`\sqrt{2Ah}\,\mathcal N(0,I)` of Alg. 1 is the noise inside
    :math:`h\tilde g` (module doc)."""
    rel = private_gradient(noise, lik, state.z, sample_rate=sample_rate, grad_clip=grad_clip,
                           noise_multiplier=noise_multiplier, relation=relation)
    return sgnht_update(state, rel.grad, step_size), SGMCMCInfo(True, (rel.event,), rel.clipped_fraction,
                                                                 rel.noise_std)


class _SGMCMC(DPKernel):
    """Shared Pyro lifecycle of :class:`DPSGLD` and :class:`DPSGNHT` (not used directly)."""

    _kind = ""
    supported_relations = ("add_remove", "substitute")

    def __init__(self, model, batch_size=None, step_size=None, grad_clip=None, noise_multiplier=None, *,
                 relation="substitute", public_num_rows=None, accountant=None, **kwargs):
        if relation not in _SENSITIVITY:
            raise ValueError(f"relation must be 'add_remove' or 'substitute', got {relation!r}")
        if relation == "add_remove" and public_num_rows is None:  # issue #38 (module doc)
            raise ValueError(
                f"{type(self).__name__}: relation='add_remove' makes the number of rows N private (add/remove "
                "neighbours differ in it), but the sampling rate q = b/N and the N/b scaling would read it and "
                "publish it through epsilon. Pass public_num_rows=M, a public row count you state (used in place "
                "of N; the rows are still sampled with probability b/M), or use relation='substitute' (the "
                "default), under which N is public")
        if relation != "add_remove" and public_num_rows is not None:
            raise ValueError(f"public_num_rows is for relation='add_remove' only: under relation={relation!r} "
                             "N is public and is read from the data")
        #: the public row count standing for N under add/remove (``None`` under substitution)
        self.public_num_rows = (None if public_num_rows is None
                                else check_positive("public_num_rows", public_num_rows, integer=True))
        if kwargs.pop("non_private", False):
            raise ValueError("SG-MCMC has no noise-free mode: its Langevin noise is the privacy noise")
        auto = tuple(n for n, v in (("step_size", step_size), ("grad_clip", grad_clip)) if v is None)
        full_batch = bool(auto) and batch_size is None and relation == "substitute"
        #: the accountant was chosen by the kernel (``accountant=None``)
        self._accountant_chosen = accountant is None
        if accountant is None:  # the tight numerical accountant under both relations (module doc); for the
            # default path's full batch every release is a Gaussian, which "gdp" composes exactly
            accountant = "gdp" if full_batch else "pld"
        if auto:
            if self._kind != "sgld":
                raise ValueError(f"{type(self).__name__} has no default path: give step_size and grad_clip "
                                 "(DPSGLD(model, epsilon=...) tunes both)")
            if len(auto) == 1:
                raise ValueError("give both step_size and grad_clip, or neither (the default path tunes both: the "
                                 "step follows from the tuned clip and the noise, docs/tuning.md)")
            if noise_multiplier is not None:
                raise ValueError("the default path (step_size and grad_clip left out) calibrates the noise to the "
                                 "budget: give epsilon= instead of noise_multiplier, or give all three")
            if kwargs.get("init_strategy") is None:
                kwargs["init_strategy"] = init_to_center  # the tuner's data-free start: the prior centre
        super().__init__(model, accountant=accountant, relation=relation, **kwargs)
        #: settings the kernel tunes privately at every chain's start (left out by the user)
        self.auto_tuned = auto
        #: with batch_size=None and no plate subsample_size, the default path reads every row
        #: each iteration (q = 1; under substitution, where N is public)
        self.full_batch_default = full_batch
        #: variance of the data-free diffusion added each step (the default path's top-up, sgld_step)
        self.diffusion = 0.0

        probe = SubsampledGaussianEvent(1.0 if full_batch else 0.5, 1.0)
        if not get_accountant(accountant, relation=relation).supports(probe):
            ok = "'rdp', 'prv', 'pld' or 'dp_rdp'" if relation == "add_remove" else "'pld'"
            raise ValueError(
                f"accountant {accountant!r} cannot analyse the Poisson-subsampled Gaussian under "
                f"relation={relation!r}; use {ok}"
            )
        self.batch_size_given = batch_size is not None  # None: the data plate's subsample_size
        self.batch_size = None if batch_size is None else self.check_plate_batch_size(batch_size)
        self.step_size = None if step_size is None else check_positive("step_size", step_size)
        self.grad_clip = None if grad_clip is None else check_positive("grad_clip", grad_clip)
        if noise_multiplier is not None:
            noise_multiplier = check_positive("noise_multiplier", noise_multiplier)
        self.required_noise_multiplier = noise_multiplier
        self.noise_multiplier: Optional[float] = None  # in use: max(Langevin, required); set by setup
        self.langevin_noise_multiplier: Optional[float] = None
        self.sample_rate: Optional[float] = None
        self._calibration_key = None
        if auto:
            self.privacy.adopt_default_budget()  # calibrated to the budget (the default one if none is given)
            self.init = default_path().tuner(self)

    takes_plate_batch = True

    @staticmethod
    def check_plate_batch_size(batch_size) -> int:
        return check_positive("batch_size", batch_size, integer=True)

    # ---------------------------------------------------------------- privacy plan (data-free)
    def _thermostat_value(self) -> float:
        return 1.0

    def _calibrate(self):
        if self.public_num_rows is not None:  # add/remove: N is private; M stands for it (module doc)
            n = self.public_num_rows
            # every later read of "the public N" (the delta <= 1/N notice, a private init's eta/N step) sees M
            self.lik.global_num_rows = n
            if self.batch_size > n:
                raise ValueError(f"batch_size={self.batch_size} exceeds public_num_rows={n}")
        else:  # substitution: N is public
            n = self.lik.num_rows
            if self.batch_size > n:
                raise ValueError(f"batch_size={self.batch_size} exceeds the number of rows N={n}")
        key = (n, self.temperature, self.num_chains)
        if key == self._calibration_key:
            return  # setup() runs again (MCMC._set_transforms): nothing to redo
        q = self.batch_size / n  # q = b/N (b/M under add/remove), b the expected batch size
        if self.auto_tuned:  # the default path: the budget's noise now, the step from the tuned clip (the default path's recipe)
            if q < 1.0 and self._accountant_chosen and self.accountant == "gdp":
                self.privacy.accountant = "pld"  # the plate's subsample_size: subsampled, "gdp" cannot compose it
            self.sample_rate, self.noise_multiplier = q, sgld_noise(Budget.of(self), self.num_iterations,
                                                                   init_events(self), sample_rate=q)
            self._calibration_key = key
            return
        nm_l = langevin_noise_multiplier(
            self._kind, step_size=self.step_size, sample_rate=q, grad_clip=self.grad_clip,
            temperature=self.temperature, thermostat=self._thermostat_value(), relation=self.relation,
        )
        required = self.required_noise_multiplier
        if required is None and self.epsilon is not None and self.num_iterations is not None:
            # smallest nm with num_iterations x num_chains Poisson-subsampled Gaussians (plus a
            # private init's releases) within (epsilon, delta) (as Opacus's
            # make_private_with_epsilon), verified, rounded up
            required = sgld_noise(Budget.of(self), self.num_iterations, init_events(self), sample_rate=q,
                                  at_least=nm_l)  # no search when nm_l already fits
        self.sample_rate, self.langevin_noise_multiplier = q, nm_l
        self.noise_multiplier = nm_l if required is None else max(nm_l, required)
        if self.noise_multiplier > nm_l:
            kappa2 = (self.noise_multiplier / nm_l) ** 2
            warnings.warn(
                f"the privacy target needs noise multiplier {self.noise_multiplier:.4g} but the Langevin "
                f"noise of step_size={self.step_size} gives only {nm_l:.4g}: adding the missing noise to "
                f"the gradient sum explicitly (injected-noise variance x{kappa2:.3g}). "
                f"{self._extra_noise_note(kappa2)}",
                UserWarning, stacklevel=4,
            )
        self._calibration_key = key

    def _extra_noise_note(self, kappa2: float) -> str:
        return ""

    def releases(self, state=None):
        # The default path's clip (DPSGLD's, with no ratio release: ratio noise 0): as few rows above it as the
        # tuner's count noise resolves (DPAutoTune.ratio_quantile with no ratio noise). Amin et al.'s balance
        # (about 2 nm rows above) weighs clipping bias against release noise; here the release noise is part of
        # Langevin's diffusion, and a larger clip costs only a smaller step, while no accept test corrects the
        # bias (measured: 168 rows above put a linear model's sigma 1.4 sd off). auto_compile: one (expected)
        # batch of gradients.
        return dataclasses.replace(sgld_releases(self.sample_rate, self.noise_multiplier,
                                                 0.0 if self.auto_tuned else None),
                                   cost=("penalty", 0.0, float(self.batch_size)))

    def _step_kwargs(self):
        return dict(step_size=self.step_size, sample_rate=self.sample_rate, grad_clip=self.grad_clip,
                    noise_multiplier=self.noise_multiplier, relation=self.relation)

    # ---------------------------------------------------------------- lifecycle / reporting
    def diagnostics(self) -> dict:
        """DPKernel's diagnostics plus the noise plan. ``"acceptance rate"`` is 1 by
        construction (there is no accept/reject test)."""
        out = super().diagnostics()
        out.update({
            "accept/reject test": "none (SG-MCMC): acceptance rate is 1 by construction",
            "noise multiplier": self.noise_multiplier,
            "Langevin noise multiplier": self.langevin_noise_multiplier,
            "sample rate": self.sample_rate,
            "public num rows": self.public_num_rows,
        })
        return out

    def logging(self):
        return {**super().logging(), "acc. rate": "1 (no test)"}


# The parameters both SG-MCMC kernels share, in signature order around DPSGNHT's
# ``thermostat`` (so each kernel's docstring has one parameter list).
_PARAMS_HEAD = r"""
    :param model: Pyro model whose data plate is indexed by the plate's indices
        (``with pyro.plate("data", N) as idx: ... obs=y[idx]``).
    :param int batch_size: :math:`b`, the **expected** batch size; rows are Poisson-sampled
        with :math:`q = b/N` (:math:`b/M` under add/remove) and gradients scaled by :math:`1/q`
        (module doc). ``None``: the data plate's ``subsample_size``
        (:mod:`~pyro_dp.kernels.declared_batch`), accounted as that :math:`b`; on
        :class:`DPSGLD`'s default path with no ``subsample_size``, every row (:math:`q = 1`).
    :param float step_size: :math:`\eta` (SGLD) or :math:`h` (SGNHT), fixed. :class:`DPSGLD`:
        leave it and ``grad_clip`` out for the default path (below).
    :param float grad_clip: :math:`C`, L2 clip of each per-example gradient in unconstrained space.
"""
_PARAMS_TAIL = r"""    :param float noise_multiplier: optional *minimum* noise multiplier (σ/Δ under ``relation``)
        of each release. The kernel uses ``max(Langevin nm, this)`` and adds the difference
        explicitly. Omit it and give ``epsilon``, ``delta``, ``num_iterations`` to calibrate it
        (as Opacus's ``make_private_with_epsilon``); omit all and the run is charged the
        Langevin noise alone ("privacy for free", Wang et al. 2015).
    :param str relation: ``"substitute"`` (default, as every kernel: :math:`N` is public)
        or ``"add_remove"`` (Opacus's), which needs ``public_num_rows``.
    :param int public_num_rows: :math:`M`, under ``relation="add_remove"`` only and required
        there: a public row count you state (e.g. the published size of the data set, or a
        bound), used in place of :math:`N` for :math:`q = b/M`, the scaling and the
        calibration, so that nothing published depends on :math:`N` (module doc: with
        :math:`M \ne N` the estimate stays unbiased, the expected batch is :math:`bN/M`).
    :param str accountant: default ``"pld"`` (``dp_accounting``'s PLD, pessimistic; both
        relations). Under add/remove ``"rdp"``, ``"prv"`` (Opacus's default) and ``"dp_rdp"``
        are accepted too; they are looser (module doc).

    Other keyword arguments are those of :class:`~pyro_dp.kernels.base.DPKernel`
    (``temperature``, ``epsilon``, ``delta``, ``num_iterations``, ``num_chains``, ``seed``,
    ``secure_mode``, ``init_strategy``, ...). Diagnostics: ``"non-private clipped fraction"``
    (only with ``nonprivate_diagnostics=True``; **not covered by ε**), ``"epsilon"``, ``"noise multiplier"``, ``"acceptance rate"`` (= 1).
"""


class DPSGLD(_SGMCMC):
    __doc__ = r"""Differentially private SGLD (Welling & Teh 2011; Wang et al. 2015; Li et al. 2019)
    as a Pyro ``MCMCKernel``: :math:`\theta' = \theta + \frac\eta2\tilde g(\theta)`
    (:func:`sgld_step`).

    **The default path** (``DPSGLD(model, epsilon=ε)``: ``step_size`` and ``grad_clip`` left out,
    #40): every row each iteration (:math:`q = 1`, ``accountant="gdp"``, exact for these
    Gaussians), the noise calibrated to the budget, and at each chain's start
    :class:`~pyro_dp.default_path.tuning.DPAutoTune` with ``whiten=True``; then the clip and the largest
    step whose release noise fits inside Langevin's diffusion ("privacy for free", Wang, Fienberg
    & Smola 2015), capped, the rest of the diffusion data-free
    (:func:`~pyro_dp.default_path.driver.langevin_default`), clipping around a released centre
    where the gradients are skewed (:mod:`~pyro_dp.default_path.centring`); of the MCMC's warmup only a
    burn-in of 0.15 ``num_samples`` releases, the rest idles before the first read (its budget
    goes to the draws). Without an accept test the noise costs step length, not rejected moves
    (``docs/tuning.md``, "Without an accept test", with the measurements on the default suite's
    GLMs). The price: an unadjusted chain, whose step and clip biases nothing corrects.
""" + _PARAMS_HEAD + _PARAMS_TAIL + r"""
    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.kernels.sgmcmc import DPSGLD
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = torch.randn(1000, generator=torch.Generator().manual_seed(0)) + 1.0
    >>> kernel = DPSGLD(model, batch_size=100, step_size=4e-4, grad_clip=5.0,
    ...                 init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=70, warmup_steps=30, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"].mean()) - float(y.mean())) < 0.1
    True
    >>> kernel.noise_multiplier  # b / (T N C sqrt(eta)) = 100 / (1000 * 5 * 0.02) (substitute: Δ = 2C)
    1.0
    >>> kernel.relation, round(kernel.get_epsilon(1e-5), 3)  # 100 Poisson-subsampled Gaussians, q = 0.1, PLD
    ('substitute', 4.368)

    Under add/remove (ε 2.337 here, nm 2.0) the kernel must not read N: state a public count.

    >>> DPSGLD(model, 100, 4e-4, 5.0, relation="add_remove", public_num_rows=1000).public_num_rows
    1000
    >>> DPSGLD(model, 100, 4e-4, 5.0, relation="add_remove")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: DPSGLD: relation='add_remove' makes the number of rows N private ...
    """
    _kind = "sgld"
    whiten_by_default = True  # the default path runs in the private metric's coordinates (docs/tuning.md)
    burn_in_share, centre_by_default = LANGEVIN_BURN_IN, True  # its burn-in; a centred clip ball (DPKernel's default-path settings)
    _chain_attrs = _SGMCMC._chain_attrs + ("step_size", "grad_clip", "diffusion", "langevin_noise_multiplier", "centre")
    centre = None  # the clip ball's centre: the default path's tuner releases it (pyro_dp.default_path.centring)

    noise_limited_alternative = ""  # (diagnostics' advice) it is the kernel the others point to

    def _extra_noise_note(self, kappa2):
        eta = self.step_size / kappa2
        return (f"SGLD then targets roughly the posterior tempered to 1/{kappa2:.3g}; step_size <= {eta:.3g} "
                "would need no extra noise")

    def _init_state(self, z):
        return sgld_init(self.lik, z)

    def _step(self, state):
        return sgld_step(self._noise, state, self.lik, **self._step_kwargs(), diffusion=self.diffusion, rng=self._rng,
                         centre=self.centre)


class DPSGNHT(_SGMCMC):
    __doc__ = r"""Differentially private SG Nosé–Hoover thermostat (Ding et al. 2014, Alg. 1; DP as in
    Li et al. 2019 and the comparison of Räisä et al. 2021) as a Pyro ``MCMCKernel``
    (:func:`sgnht_step`). The momentum and thermostat are internal state (post-processing).
""" + _PARAMS_HEAD + r"""    :param float thermostat: :math:`A`, the injected diffusion of Ding et al. (2014), Alg. 1;
        also the initial :math:`\xi`.
""" + _PARAMS_TAIL + r"""
    Example
    -------
    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro.infer.autoguide.initialization import init_to_mean
    >>> from pyro_dp.kernels.sgmcmc import DPSGNHT
    >>> from pyro_dp.models.examples import normal_mean_model as model  # y_i ~ N(mu, 1), mu ~ N(0, 10^2)
    >>> y = torch.randn(1000, generator=torch.Generator().manual_seed(0)) + 1.0
    >>> kernel = DPSGNHT(model, 100, step_size=3e-3, grad_clip=5.0, thermostat=1.0,
    ...                  init_strategy=init_to_mean, seed=0)
    >>> mcmc = MCMC(kernel, num_samples=60, warmup_steps=40, disable_progbar=True)
    >>> mcmc.run(y)
    >>> abs(float(mcmc.get_samples()["mu"].mean()) - float(y.mean())) < 0.1
    True
    >>> round(kernel.noise_multiplier, 4)  # b sqrt(2A/h) / (2 T N C) (substitute)
    0.2582
    """
    _kind = "sgnht"

    def __init__(self, model, batch_size, step_size, grad_clip, thermostat=1.0, noise_multiplier=None, **kwargs):
        super().__init__(model, batch_size, step_size, grad_clip, noise_multiplier, **kwargs)
        self.thermostat = check_positive("thermostat", thermostat)

    def _thermostat_value(self):
        return self.thermostat

    def _extra_noise_note(self, kappa2):
        return ("the thermostat absorbs the extra diffusion (Ding et al. 2014), but the chain mixes "
                "as with a larger A")

    def _init_state(self, z):
        return sgnht_init(self.lik, z, self._rng, self.thermostat)

    def _step(self, state):
        return sgnht_step(self._noise, state, self.lik, **self._step_kwargs())
