r"""Pieces shared by several kernels: proposals, the released-gradient estimator, integrators
and accept tests.

Accept tests are interchangeable functions of the *released* log acceptance ratio and
its noise variance; none of them touches data. The gradient estimator
(:func:`gradient_release_fn`) reads data only through its release spec.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from ..mechanisms import GaussianReleaseSpec, NoisyRelease, clipped_fraction, gaussian_release_spec
from ..warn import warn_user

__all__ = [
    "penalty_log_accept_threshold",
    "penalty_accept",
    "RandomWalkProposal",
    "random_walk",
    "flip_direction",
    "initial_directions",
    "check_proposal_scale",
    "uniform_log",
    "accept_uniform",
]


def accept_uniform(rng: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """The accept test's ``U ~ Uniform(0, 1)`` (0-d, dtype and device of ``like``), drawn from
    the algorithm's generator (data-free), on the generator's device."""
    return torch.rand((), generator=rng, dtype=like.dtype, device=rng.device).to(like.device)


def uniform_log(rng: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """``log U`` with ``U ~ Uniform(0, 1)`` drawn from the algorithm's generator."""
    return torch.log(accept_uniform(rng, like))


def penalty_log_accept_threshold(lambda_hat: torch.Tensor, noise_var: torch.Tensor) -> torch.Tensor:
    r"""Log acceptance probability of the penalty method, :math:`\min(0, \hat\lambda - \sigma^2/2)`.

    Ceperley & Dewing (1999); Yıldırım & Ermiş (2019) §3.1; Räisä 2021 thesis §3.1:
    with :math:`\hat\lambda = \lambda + \mathcal N(0, \sigma^2)` the chain accepts with
    probability :math:`\min\{1, e^{\hat\lambda - \sigma^2/2}\}`, which satisfies detailed
    balance for the exact target on average over the noise.
    """
    return torch.clamp(lambda_hat - noise_var / 2, max=0.0)


def penalty_accept(rng: torch.Generator, lambda_hat: torch.Tensor, noise_var: torch.Tensor) -> bool:
    """Draw the penalty accept decision (see :func:`penalty_log_accept_threshold`)."""
    return bool(uniform_log(rng, lambda_hat) < penalty_log_accept_threshold(lambda_hat, noise_var))


class RandomWalkProposal(NamedTuple):
    """A random-walk proposal.

    :ivar z: proposed point.
    :ivar coord: index of the coordinate moved (one-component modes) or ``-1``.
    :ivar log_q_ratio: :math:`\\log q(z|z')/q(z'|z)` (0: every mode here is symmetric, or,
        for the guided walk, a deterministic involution on the lifted space).
    """

    z: torch.Tensor
    coord: int
    log_q_ratio: float


def random_walk(
    rng: torch.Generator,
    z: torch.Tensor,
    scale: torch.Tensor,
    mode: str = "full",
    direction: Optional[torch.Tensor] = None,
) -> RandomWalkProposal:
    r"""Gaussian random-walk proposals (Räisä 2021 thesis §3.1; Yıldırım & Ermiş 2019).

    * ``"full"``: :math:`z' = z + s \odot \xi`, :math:`\xi \sim \mathcal N(0, I)`.
    * ``"ocu"`` (one-component update): pick :math:`j` uniformly,
      :math:`z'_j = z_j + s_j \xi`.
    * ``"gwmh"`` (guided walk, Gustafson 1998): pick :math:`j` uniformly,
      :math:`z'_j = z_j + d_j s_j |\xi|` with the direction :math:`d_j \in \{\pm1\}` carried in
      the state; after a rejection :math:`d_j` flips (:func:`flip_direction`). This is a
      lifted, non-reversible chain that leaves :math:`\pi(z)\times\mathrm{Unif}(d)` invariant
      with the ordinary MH/penalty acceptance ratio, because the move
      :math:`(z, d) \to (z', -d)` is an involution with a symmetric step law.

    ``scale`` is a scalar or a length-``D`` tensor. Data-free.
    """
    d = z.numel()
    scale = torch.as_tensor(scale, dtype=z.dtype, device=z.device).expand(d)
    if mode == "full":
        xi = torch.randn(z.shape, generator=rng, dtype=z.dtype, device=z.device)
        return RandomWalkProposal(z + scale * xi, -1, 0.0)
    j = int(torch.randint(d, (), generator=rng, device=z.device))
    xi = torch.randn((), generator=rng, dtype=z.dtype, device=z.device)
    step = scale[j] * xi
    if mode == "gwmh":
        if direction is None:
            raise ValueError("the guided walk needs a direction vector")
        step = direction[j] * step.abs()
    elif mode != "ocu":
        raise ValueError(f"unknown proposal mode {mode!r}")
    z_new = z.clone()
    z_new[j] = z_new[j] + step
    return RandomWalkProposal(z_new, j, 0.0)


def initial_directions(z: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
    """Guided-walk directions for a new chain: independent uniform ±1 per coordinate, the
    stationary law of the direction variables (Gustafson 1998). Data-free."""
    u = torch.rand(z.shape, generator=rng, device=z.device)
    return torch.where(u < 0.5, -torch.ones_like(z), torch.ones_like(z))


def check_proposal_scale(scale, z: torch.Tensor) -> torch.Tensor:
    """``scale`` as a tensor like ``z``: a scalar or one entry per coordinate, else ``ValueError``."""
    scale = torch.as_tensor(scale, dtype=z.dtype, device=z.device)
    if scale.numel() not in (1, z.numel()):
        raise ValueError(f"proposal_scale must be a scalar or have {z.numel()} entries")
    return scale


#: the random-walk kernels' default acceptance target (Roberts, Gelman & Gilks 1997: 0.234 in
#: high dimension; 0.3 is the usual rounding, and what these kernels have always used)
DEFAULT_TARGET_ACCEPT_PROB = 0.3


def pop_target_accept_prob(kwargs: dict, target_accept_prob: Optional[float]) -> float:
    """The acceptance target from a kernel's arguments: ``target_accept_prob`` (Pyro's name, as in
    ``pyro.infer.mcmc.RandomWalkKernel`` and ``HMC``), or the old name ``target_accept`` (popped
    from ``kwargs`` with a ``FutureWarning``); the default when neither is given."""
    if "target_accept" in kwargs:
        old = kwargs.pop("target_accept")
        if target_accept_prob is not None:
            raise TypeError("give target_accept_prob only (target_accept is its old name)")
        warn_user("target_accept is renamed target_accept_prob (Pyro's name for it); the old name "
                  "will be removed", FutureWarning)
        return old
    return DEFAULT_TARGET_ACCEPT_PROB if target_accept_prob is None else target_accept_prob


class ProposalScaleAdaptation:
    r"""Warmup adaptation of a random walk's proposal scale: a part the kernel holds
    (``kernel.walk_scale``, checkpointed with the chain).

    Robbins–Monro on the log scale towards ``target_accept_prob`` (Andrieu & Thoms 2008, Alg. 4;
    gain :math:`t^{-0.6}`), per coordinate for one-component modes. Its only input is the
    accept decision, which is post-processing of released values (Räisä 2021 thesis Thm 3),
    so it costs no privacy; warmup iterations are accounted like any other. The scale is
    frozen after warmup, so the sampling phase is a time-homogeneous MCMC.

    The kernel calls :meth:`start` at a chain's start, uses :attr:`current` in its step and then
    calls :meth:`adapt` with the step's info (``accepted``, ``coord``).

    >>> import torch
    >>> a = ProposalScaleAdaptation(); a.start(0.5, torch.zeros(2)); a.current
    tensor([0.5000, 0.5000])
    """

    def __init__(self):
        self.user_scale: Optional[torch.Tensor] = None
        self.log_scale: Optional[torch.Tensor] = None
        self.adapted = False

    def start(self, proposal_scale, z: torch.Tensor) -> None:
        """A new chain at ``z``: the given scale (``None``: 1, replaced by the tuned one before any step)."""
        scale = 1.0 if proposal_scale is None else proposal_scale
        self.user_scale = check_proposal_scale(scale, z).expand(z.numel()).clone()
        self.log_scale = torch.log(self.user_scale)
        self.adapted = False

    def adapt(self, info, *, iteration: int, target_accept_prob: float, full: bool) -> None:
        """The accept decision of warmup iteration ``iteration`` moves the log scale (all coordinates
        when ``full`` or the step moved all; else the one it moved)."""
        gain = (iteration + 1.0) ** -0.6 * (float(info.accepted) - target_accept_prob)
        if full or info.coord < 0:
            self.log_scale = self.log_scale + gain
        else:
            self.log_scale[info.coord] += gain
        self.adapted = True

    @property
    def current(self) -> torch.Tensor:
        """The proposal scale in use: the given one until warmup adaptation changes it."""
        return torch.exp(self.log_scale) if self.adapted else self.user_scale


def flip_direction(direction: torch.Tensor, coord: int, accepted: bool) -> torch.Tensor:
    """Guided walk: keep :math:`d_j` after an acceptance, flip it after a rejection."""
    if accepted or coord < 0:
        return direction
    out = direction.clone()
    out[coord] = -out[coord]
    return out


# --------------------------------------------------------------------------- Hamiltonian pieces
# (added for DP-HMC, pyro_dp/kernels/hmc.py)


def sample_momentum(rng: torch.Generator, mass_sqrt: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    r""":math:`p \sim \mathcal N(0, M)` for a diagonal (or scalar) mass :math:`M`
    (``mass_sqrt`` :math:`= M^{1/2}`), drawn from the algorithm's generator. Data-free."""
    xi = torch.randn(like.shape, generator=rng, dtype=like.dtype, device=like.device)
    return xi * mass_sqrt


def kinetic_energy(p: torch.Tensor, inv_mass: torch.Tensor) -> torch.Tensor:
    r""":math:`K(p) = \tfrac12 p^\top M^{-1} p` for a diagonal (or scalar) mass (Neal 2011, §5.2;
    Räisä 2021 thesis §4.1). Data-free."""
    return 0.5 * (p * p * inv_mass).sum()


class LeapfrogResult(NamedTuple):
    """End of a leapfrog trajectory.

    :ivar z: final position.
    :ivar p: final momentum.
    :ivar grad: the gradient estimate at ``z`` (the last one ``grad_fn`` returned).
    :ivar aux: tuple of the auxiliary outputs of ``grad_fn``, one per position visited.
    """

    z: torch.Tensor
    p: torch.Tensor
    grad: torch.Tensor
    aux: tuple


def leapfrog(z, p, grad, step_size, num_steps: int, inv_mass, grad_fn) -> LeapfrogResult:
    r"""``num_steps`` leapfrog steps with an injected gradient estimator (BlackJAX-style).

    ``grad`` is the (already computed) estimate of :math:`\nabla\log\pi` at the start ``z``;
    ``grad_fn(z) -> (g, aux)`` returns the estimate at a new position, called exactly once
    per position, ``num_steps`` times. Each estimate is used for both half-steps around its
    position (Räisä 2021 thesis, Alg. 3: :math:`G_{i,j}` enters :math:`p_j` and
    :math:`p_{j+1/2}`), so a noisy estimator releases ``num_steps`` gradients per trajectory:

    .. math::
        p_{j-1/2} = p_{j-1} + \tfrac{\eta}{2} G_{j-1},\quad
        \theta_j = \theta_{j-1} + \eta M^{-1} p_{j-1/2},\quad
        p_j = p_{j-1/2} + \tfrac{\eta}{2} G_j .

    With a stochastic ``grad_fn`` the map is no longer an involution but stays
    *reversible by negating p* and volume preserving (thesis Thm 9; Räisä et al. 2021,
    Thm 3.1), which is what the (penalty) accept test needs.
    """
    half = 0.5 * step_size
    p = p + half * grad
    auxs = []
    for _ in range(int(num_steps)):
        z = z + step_size * inv_mass * p
        grad, aux = grad_fn(z)
        auxs.append(aux)
        p = p + half * grad  # second half-step with G_j; the next first half-step follows
        if len(auxs) < num_steps:
            p = p + half * grad
    return LeapfrogResult(z, p, grad, tuple(auxs))


__all__ += ["sample_momentum", "kinetic_energy", "LeapfrogResult", "leapfrog"]


# --------------------------------------------------------------------------- released gradient
# (DP-HMC's and DP-MALA's noisy clipped gradient, Räisä 2021 thesis Alg. 3)


def gradient_release_fn(lik, temperature, spec: GaussianReleaseSpec, grad_terms, prior_terms, shards=None):
    r"""``gradient(z, b_g, ξ) -> (G(z), ℓ(z) [N], log p(z), SumRelease)``: the release of
    :math:`G(z)` (module docstring) as a pure tensor function of its inputs, the standard normal
    ``ξ`` (shape of ``z``) drawn before it by ``spec.draw``: the clipped per-example gradient sum
    of ``grad_terms`` (``lik.clipped_grad_sum``; inside a graph the compiled likelihood's
    ``clipped_grad_terms``), where the per-row rule replaces a non-finite gradient by zero so the
    sensitivity stays :math:`2b_g` (thesis Thm 11 proof), ``spec``'s noise :math:`\sigma_g\xi`,
    the temperature (post-processing) and the data-free prior gradient of ``prior_terms``."""

    def gradient(z, clip, xi):
        ll, cs = grad_terms(z, clip)  # the per-row rule, the clip to b_g, the sum
        rel = spec.release(cs, clip, xi, shards)  # + sigma_g xi, sigma_g = nm_g 2 b_g
        lp, grad_lp = prior_terms(z)
        # Räisä 2021 thesis Alg. 3 / Räisä et al. 2021 §3: G = T(sum clip(grad l_i) + noise) + grad log p
        return temperature * lik.project(rel.value) + grad_lp, ll, lp, rel  # project: post-processing

    return gradient


def release_gradient(noise, lik, z, *, grad_clip, noise_multiplier):
    r"""Release :math:`G(z)` alone (:func:`gradient_release_fn` run eagerly, its standard normal
    drawn from the secret stream by the release spec): returns ``(G, aux)`` with
    ``aux = (loglik [N], log_prior, NoisyRelease)``."""
    spec = gaussian_release_spec(noise_multiplier)
    xi = spec.draw(noise, z.shape, device=z.device)
    g, ll, lp, rel = gradient_release_fn(lik, lik.temperature, spec, lik.clipped_grad_sum, lik.log_prior_and_grad,
                                         getattr(noise, "shards", None))(z, grad_clip, xi)
    return g, (ll, lp, NoisyRelease(rel.value, spec.event, rel.noise_std,
                                    clipped_fraction(rel.num_clipped, rel.num_rows)))


__all__ += ["gradient_release_fn", "release_gradient"]


# --------------------------------------------------------------------------- Barker test
# (added for DP Barker, pyro_dp/kernels/barker.py)


class GaussianMixtureCorrection(NamedTuple):
    r"""A symmetric Gaussian mixture :math:`V_{\rm corr} = \sum_k \frac{w_k}{2}
    [\mathcal N(\mu_k, s_k^2) + \mathcal N(-\mu_k, s_k^2)]` such that
    :math:`\mathcal N(0, C) + V_{\rm corr} \approx \mathrm{Logistic}(0, 1)`
    (Heikkilä et al. 2019, §3.2 eq. (8) and Supplement; Seita et al. 2017).

    :ivar C: the Gaussian variance :math:`C` the mixture corrects.
    :ivar means: :math:`\mu_k \ge 0` (tensor ``[K]``).
    :ivar variances: :math:`s_k^2 \ge 0` (tensor ``[K]``).
    :ivar weights: :math:`w_k`, summing to one (tensor ``[K]``).
    """

    C: float
    means: torch.Tensor
    variances: torch.Tensor
    weights: torch.Tensor


def sample_correction(rng: torch.Generator, corr: GaussianMixtureCorrection, like: torch.Tensor) -> torch.Tensor:
    """One draw of :math:`V_{\\rm corr}` from the algorithm's generator (data-free)."""
    return _correction_draw(rng, corr, like)


def _correction_draw(rng: torch.Generator, corr: GaussianMixtureCorrection, like: torch.Tensor) -> torch.Tensor:
    """:func:`sample_correction`'s draw: :func:`correction_draws` then :func:`correction_from_draws`."""
    means, sds, weights = correction_tensors(corr, like.dtype, like.device)
    expo, u, xi = correction_draws(rng, corr, like)
    return correction_from_draws(expo.to(like.device), u.to(like.device), xi, means, sds, weights)


def correction_from_draws(expo: torch.Tensor, u: torch.Tensor, xi: torch.Tensor, means: torch.Tensor,
                          sds: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    r"""One :math:`V_{\rm corr}` from its randomness ``(E, u, xi)`` (:func:`correction_draws`), a
    pure tensor function (a traced graph evaluates it; no value leaves it): the component
    :math:`\arg\max_k w_k/E_k` with :math:`E_k \sim \mathrm{Exp}(1)` — Gumbel-max, what
    ``torch.multinomial(weights, 1)`` computes (ATen's one-sample fast path) — then the sign
    :math:`\pm` by ``u < 1/2`` and :math:`\pm\mu_k + s_k\,\xi`. ``means``, ``sds``, ``weights``
    from :func:`correction_tensors`.

    >>> w, m, s = torch.tensor([0.2, 0.8], dtype=torch.float64), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.5])
    >>> float(correction_from_draws(torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor(0.7), torch.tensor(2.0), m, s, w))
    0.0
    """
    k = torch.argmax(weights / expo).reshape(1)  # a tensor index: no value leaves a graph
    sign = torch.where(u < 0.5, 1.0, -1.0).to(means.dtype)
    return (sign * means.index_select(0, k) + sds.index_select(0, k) * xi).reshape(())


def correction_draws(rng: torch.Generator, corr: GaussianMixtureCorrection, like: torch.Tensor):
    r"""The randomness of one :math:`V_{\rm corr}` draw from the algorithm's generator
    (data-free), in its order: ``(E, u, xi)`` with :math:`E_k \sim \mathrm{Exp}(1)` per mixture
    component (float64, on the generator's device; the component is :math:`\arg\max_k w_k/E_k`), the sign's
    uniform ``u`` (float64, likewise) and the standard normal ``xi`` (dtype and device of ``like``). The
    compiled DP Barker step draws them before its graph and evaluates the draw inside it
    (:func:`~pyro_dp.kernels.barker.barker_step_fn`)."""
    weights = correction_tensors(corr, like.dtype, like.device)[2]
    # on the generator's device (the algorithm stream follows the data's device, #17)
    expo = torch.empty(weights.shape, dtype=torch.float64, device=rng.device).exponential_(1.0, generator=rng)
    u = torch.rand((), generator=rng, dtype=torch.float64, device=rng.device)
    xi = torch.randn((), generator=rng, dtype=like.dtype, device=like.device)
    return expo, u, xi


_CORRECTIONS: dict = {}


def correction_tensors(corr: GaussianMixtureCorrection, dtype, device):
    """``(means, standard deviations, float64 weights)`` of ``corr`` in ``dtype`` on ``device``,
    converted once (the standard deviations are ``sqrt`` of the variances in ``dtype``, as a
    per-draw conversion would compute them)."""
    key = (id(corr), dtype, str(device))
    out = _CORRECTIONS.get(key)
    if out is None or out[0] is not corr:
        means = torch.as_tensor(corr.means, dtype=dtype, device=device)
        sds = torch.sqrt(torch.as_tensor(corr.variances, dtype=dtype, device=device))
        out = _CORRECTIONS[key] = (corr, (means, sds, corr.weights.to(dtype=torch.float64, device=device)))
    return out[1]


def barker_accept(rng: torch.Generator, lambda_hat: torch.Tensor, corr: GaussianMixtureCorrection) -> bool:
    r"""The approximate Barker test: accept iff :math:`\hat\lambda + V_{\rm corr} > 0`, where
    :math:`\hat\lambda` already carries Gaussian noise of variance exactly :math:`C` (the
    privacy noise plus, by the CLT, the minibatch error). Since
    :math:`\mathcal N(0, C) + V_{\rm corr} \approx V_{\rm log} \sim \mathrm{Logistic}(0,1)`
    this is the Barker test :math:`\lambda + V_{\rm log} > 0` (Barker 1965; Seita et al. 2017,
    §3; Heikkilä et al. 2019, eqs. (5), (9), (18)), which satisfies detailed balance.
    Data-free."""
    return bool(lambda_hat + _correction_draw(rng, corr, lambda_hat) > 0)


__all__ += ["GaussianMixtureCorrection", "sample_correction", "correction_draws", "correction_from_draws",
            "barker_accept"]


# DP-HMC's optional step-size jitter (added with DP-HMC, pyro_dp/kernels/hmc.py)
__all__ += ["jitter_factor"]

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def jitter_factor(iteration: int) -> float:
    r"""Data-free low-discrepancy step-size multiplier in :math:`(0, 1)` for iteration
    ``iteration`` (0-based): the Weyl sequence :math:`\{(i+1)\varphi^{-1}\}` (fractional part),
    as the DP-HMC paper code multiplies :math:`\eta` by a low-discrepancy number in
    :math:`[0,1)`. A deterministic sequence of step sizes keeps every iteration's kernel
    :math:`\pi`-invariant.

    >>> [round(jitter_factor(i), 4) for i in range(4)]
    [0.618, 0.2361, 0.8541, 0.4721]
    """
    return math.fmod((iteration + 1) * _GOLDEN, 1.0)
