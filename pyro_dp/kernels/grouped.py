r"""DP penalty MH with parallel per-group updates of a group site (issue 40: "block updates whose
noise is not charged for the other groups").

A two-level model with :math:`G` group effects inside the likelihood, e.g.
:math:`y_i \sim \mathcal N(a_{g_i} + b x_i, \sigma^2)`, is slow under :class:`~.penalty.DPPenalty`:
a joint random walk over every likelihood coordinate pays penalty noise for the whole move,
:math:`\sigma = \mathrm{nm}\cdot 2b\|\theta'-\theta\|`, while each intercept :math:`a_g` is informed by
only :math:`N/G` rows. Each iteration of :class:`DPGroupedPenalty` makes three moves:

0. **Data-free Metropolis steps on the coordinates that enter only the prior**
   (:func:`~pyro_dp.kernels.prior_sweeps.prior_only_step`,
   :data:`~pyro_dp.kernels.prior_sweeps.PRIOR_SWEEPS` of them; a hierarchical model's population mean
   and scale, :attr:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_mask` 0): their full
   conditional is the prior's, so the test :math:`\log u < \log p(\theta') - \log p(\theta)` is
   exact and releases nothing. (DPPenalty's and DPHMC's default paths do the same since
   2026-11-28; with a given step size they move them inside the joint step.)
1. **An ordinary DP penalty step** (:func:`~.penalty.penalty_release_accept` on the MH core,
   :func:`~.mh.mh_step`) whose random walk leaves the group site's coordinates fixed: one Gaussian
   release with noise multiplier :math:`\mathrm{nm}`, clip :math:`b\|\theta'-\theta\|` over the other
   likelihood coordinates only. Skipped (and not planned) when the group site is the only latent
   in the likelihood.
2. **A grouped step** on the group site's :math:`G` coordinates :math:`a_1..a_G`
   (:func:`grouped_step`): propose :math:`\Delta_g = \pm s\,m_g`, :math:`m_g \sim U(0.75, 1.25)`, for
   every :math:`g` at once (:func:`group_moves`: the algorithm stream, data-free, symmetric), compute
   the per-row ratio matrix

   .. math::
       r_{ig} = \ell_i(\theta + \Delta_g e_g) - \ell_i(\theta), \qquad i = 1..N,\ g = 1..G

   (:math:`G` model evaluations of all rows; a row whose term depends on one group coordinate only
   has one nonzero entry), divide column :math:`g` by :math:`|\Delta_g|` (ratios per unit move,
   :math:`w_{ig} = r_{ig}/|\Delta_g|`), apply the per-row rule (a non-finite row is the zero row),
   clip each row's vector :math:`w_i` to L2 norm :math:`b` (``llr_clip``) and release the
   :math:`G`-vector

   .. math::
       \hat w = \sum_{i=1}^N \mathrm{clip}_b(w_i) + \mathcal N(0, \sigma^2 I_G),
       \qquad \sigma = \mathrm{nm}\cdot 2b

   with one Gaussian release (:class:`~pyro_dp.mechanisms.GaussianReleaseSpec` with vector values);
   :math:`\hat s_g = |\Delta_g|\,\hat w_g` is then :math:`\sum_i r_{ig}` plus
   :math:`\mathcal N(0, \sigma_g^2)`, :math:`\sigma_g = \mathrm{nm}\cdot 2b|\Delta_g|` (post-processing),
   whenever the clip does not bind. Each group is accepted separately by the penalty rule
   (Yıldırım & Ermiş 2019 §3.1):

   .. math::
       \text{accept}_g \iff \log u_g < \min\{0,\ T\hat s_g + \log p(\theta + \Delta_g e_g) - \log p(\theta)
       - (T\sigma_g)^2/2\},

   :math:`u_g` uniform from the algorithm stream, the prior ratio of changing :math:`a_g` alone
   evaluated per :math:`g` on the stand-in row (data-free), and :math:`a_g \leftarrow a_g + \Delta_g`
   for the accepted ones.

   *A change of the decided design, and why*: clipping the raw vector :math:`r_i` to
   :math:`C = b\max_g|\Delta_g|` (noise :math:`\mathrm{nm}\cdot 2C` on every group) makes every group
   pay for the largest of the :math:`G` moves, about :math:`\sqrt{2\ln 2G}\approx 2.7` times its own
   at :math:`G = 20`; dividing by :math:`|\Delta_g|` first (a data-free diagonal rescaling) makes
   each group pay for its own move only, at the same sensitivity. Measured on the two-level model
   (``benchmarks/hierarchical.py``, ``docs/kernels/penalty.md``).

**The group clip.** :math:`b` of the grouped release must bound a row's ratio per unit move of its
own group coordinate. The default path's ``llr_clip`` is a private quantile of the gradient norms
over *every* coordinate, set by the largest (in a normal model the noise scale's, about twice the
intercept's); so on the default path each chain releases, once, a private quantile of the
gradient norms restricted to the group coordinates (:func:`private_group_clip`: the tuner's
``llr_quantile``, one noisy histogram with noise multiplier :math:`\mathrm{nm}/4`,
:data:`GROUP_CLIP_NOISE_RATIO`, planned and calibrated as a once-per-chain release) and uses it,
capped at ``llr_clip``, as the grouped release's :math:`b`; ``group_llr_clip`` sets it by hand.

**Privacy.** The :math:`\Delta_g` come from the public stream, so the rescaling and the clip are
data-free; every row's vector has L2 norm at most :math:`b` after the per-row rule and the clip,
whatever the row holds (NaN, :math:`\pm\infty`, a huge value, a group index out of range, a row that
depends on every group coordinate), so substituting one row moves the clipped sum by at most
:math:`2b` in L2: the release is a Gaussian mechanism with noise multiplier :math:`\mathrm{nm}`
(Räisä 2021 thesis Def. 6–7, Thm 4), one :class:`~pyro_dp.mechanisms.GaussianEvent` — the same noise
multiplier as step 1. An iteration is two Gaussian events (one when step 1 is skipped), composed
adaptively as DPPenalty's (thesis Thm 6), plus, once per chain on the default path, the tuner's
releases and the group clip's histogram (a Gaussian event, sensitivity :math:`\sqrt 2`); step 0
reads no data; :math:`\hat s`, the accept decisions, the scale
adaptation and the cache's use are post-processing or inside the next release. Privacy does not
rest on the assumption below.

**Correctness** rests on one assumption, which the kernel cannot check on the data: **every row's
term depends on at most one coordinate of the group site** (:math:`a_{g_i}`), and the prior of the
group site factorises over its coordinates given the other latents (a plate of independent draws;
checked data-free at set-up). Then, given the other latents, the full conditional of
:math:`(a_1..a_G)` is a product :math:`\prod_g \pi_g(a_g)`, with
:math:`\log\pi_g(a_g + \Delta_g) - \log\pi_g(a_g) = T\sum_i r_{ig} + \log p(\theta + \Delta_g e_g) - \log p(\theta)`.
Coordinate :math:`g` of :math:`\hat s` is :math:`\sum_i r_{ig}` plus independent
:math:`\mathcal N(0,\sigma_g^2)` noise whenever clipping does not bind, so each group's decision is a
penalty MH step for :math:`\pi_g` (its noise independent of the other groups', its variance the
same for the move and its reverse, :math:`|{-\Delta_g}| = |\Delta_g|`), and the product of
:math:`G` such steps, each reversible for its factor, is reversible for the product: the grouped step
leaves the conditional invariant, and with steps 0 and 1 (valid steps on the other coordinates)
the chain targets the exact (tempered) posterior. A row that depends on two group coordinates
breaks the factorisation: the chain is then still private but not exact.

Why it helps: group :math:`g` pays noise :math:`\mathrm{nm}\cdot 2b|\Delta_g|` on a move of
:math:`a_g` alone — a one-component update's price — instead of :math:`\mathrm{nm}\cdot 2b\|\Delta\|`
(about :math:`\sqrt{G + d}` one-coordinate moves' worth) for a joint move, and all :math:`G` groups
move at each iteration for one release. The clip :math:`b` must bound each row's ratio per unit
move of its own group coordinate (a :math:`b`-Lipschitz term in :math:`a_g`), as DPPenalty's does
per unit jump.
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch

from ..mechanisms import clip_and_sum, clipped_fraction, gaussian_event, gaussian_release_spec
from .base import check_positive
from .mh import MHInfo, MHState, mh_step, random_walk_proposal
from .parts import PartAttribute
from .penalty import DPPenalty
from .releases import Budget, ReleasePlan, calibrated_scale, init_events
from .prior_sweeps import PRIOR_SWEEPS, prior_only_step  # noqa: F401 (their home until 2026-11-28)
from .proposals import accept_uniform, penalty_log_accept_threshold, random_walk
from .scales import penalty_jump_length, private_norm_quantiles

__all__ = ["DPGroupedPenalty", "GroupScaleAdaptation", "GroupedInfo", "GROUP_TARGET_ACCEPT_PROB", "group_coordinates", "group_moves",
           "grouped_accept", "grouped_ratio_release", "grouped_step",
           "private_group_clip", "GROUP_CLIP_NOISE_RATIO", "grouped_releases", "group_structure", "group_clip_noise"]


class GroupedInfo(NamedTuple):
    """What one grouped step (:func:`grouped_step`) did.

    :ivar accepted: ``[G]`` bool, each group's accept decision (post-processing of the release).
    :ivar event: the release's privacy event.
    :ivar clipped_fraction: fraction of rows whose ratio vector was clipped (**non-private**).
    :ivar noise_std: the largest :math:`\\sigma_g` of the noise on :math:`\\hat s_g` (data-free).
    """

    accepted: torch.Tensor
    event: object
    clipped_fraction: float
    noise_std: float


def group_coordinates(lik, site: str) -> torch.Tensor:
    """The flat positions of latent ``site``'s coordinates in ``lik``'s vector (data-free), after
    the refusals of :class:`DPGroupedPenalty`: a latent site of the model, in the likelihood
    (:meth:`~pyro_dp.likelihood.PrivateLikelihood.likelihood_sites`), with at least 2 coordinates.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro_dp.likelihood import PrivateLikelihood
    >>> def model(g, y):
    ...     b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))
    ...     a = pyro.sample("a", dist.Normal(torch.zeros(3, dtype=y.dtype), 1.0).to_event(1))
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("y", dist.Normal(a[g] + b, 1.0), obs=y)
    >>> lik = PrivateLikelihood(model, (torch.tensor([0, 2]), torch.zeros(2, dtype=torch.float64)), seed=0)
    >>> group_coordinates(lik, "a")
    tensor([1, 2, 3])
    """
    names = tuple(lik.latent_names)
    if site not in names:
        raise ValueError(f"group_site={site!r} is not a latent site of the model (latent sites: {list(names)})")
    sizes = {n: int(lik.site_sizes[n]) for n in names}
    if sizes[site] < 2:
        raise ValueError(f"group_site={site!r} has {sizes[site]} coordinate(s): a grouped update needs at least 2 "
                         "(use DPPenalty)")
    sites = lik.likelihood_sites()
    if sites is not None and site not in sites:
        raise ValueError(f"group_site={site!r} does not enter the likelihood (it enters only the prior): its moves "
                         "cost no privacy noise under DPPenalty; a grouped update is for group effects in the likelihood")
    start = 0
    for n in names:
        if n == site:
            break
        start += sizes[n]
    return torch.arange(start, start + sizes[site], device=lik.device)


def grouped_ratio_release(lik, spec, z: torch.Tensor, deltas: torch.Tensor, coords: torch.Tensor,
                          ll_old: torch.Tensor, xi: torch.Tensor, llr_clip: float, shards=None):
    r"""The release of one grouped step (module docstring): the per-row ratio matrix
    :math:`r_{ig} = \ell_i(\theta + \Delta_g e_g) - \ell_i(\theta)` (``ll_old`` holds
    :math:`\ell_i(\theta)`) per unit move, :math:`w_{ig} = r_{ig}/|\Delta_g|`, the per-row rule and
    the clip of each row's vector :math:`w_i` to L2 norm :math:`b` (:func:`~pyro_dp.mechanisms.clip_and_sum`),
    and ``spec``'s release of the :math:`G`-vector sum plus :math:`\sigma\xi`,
    :math:`\sigma = \mathrm{nm}\cdot 2b` (``xi``: ``[G]`` standard normals drawn by ``spec.draw``).
    Returns ``(log p(θ + Δ_g e_g) [G], SumRelease, scale [G])``: ``scale`` :math:`= |\Delta_g|`, by which
    the caller multiplies the release's value and noise standard deviation to get :math:`\hat s_g`
    (post-processing). The prior terms come from the same model evaluations, on the stand-in row
    (data-free). **Reads the data**: only the release leaves it."""
    unit = deltas.abs().clamp(min=torch.finfo(deltas.dtype).tiny)  # |Δ_g| > 0: data-free (public stream)
    lls, lps = [], []
    for g in range(int(coords.numel())):  # G evaluations of every row at a one-coordinate move
        z_g = z.clone()
        z_g[coords[g]] = z_g[coords[g]] + deltas[g]
        ll_g, lp_g = lik.loglik_and_prior(z_g)
        lls.append((ll_g - ll_old) / unit[g])
        lps.append(lp_g)
    w = torch.stack(lls, dim=-1)  # [N, G]: each row's ratios per unit move
    cs = clip_and_sum(w, float(llr_clip))  # per-row rule (non-finite row -> zero row), L2 clip to b, sum
    return torch.stack(lps), spec.release(cs, float(llr_clip), xi, shards), unit  # Σ_i clip_b(w_i) + σξ, σ = nm·2b


def grouped_accept(log_u: torch.Tensor, log_ratio: torch.Tensor, prior_ratio: torch.Tensor,
                   noise_var: torch.Tensor) -> torch.Tensor:
    r"""``[G]`` penalty decisions, one per group (module docstring): :math:`\log u_g <
    \min\{0, \hat\lambda_g - (T\sigma)^2/2\}` with :math:`\hat\lambda_g = T\hat s_g + \log p(\theta +
    \Delta_g e_g) - \log p(\theta)` (Yıldırım & Ermiş 2019 §3.1), ANDed with the data-free validity
    check (finite prior and :math:`\hat\lambda_g`, finite noise variance), as
    :func:`~.mh.valid_move` for one move.

    >>> grouped_accept(torch.log(torch.tensor([0.5, 0.5])), torch.tensor([0.0, -5.0]),
    ...                torch.tensor([0.0, float("nan")]), torch.tensor(0.0))
    tensor([ True, False])
    """
    lam = log_ratio + prior_ratio
    ok = torch.isfinite(lam) & torch.isfinite(torch.as_tensor(noise_var))
    return (log_u < penalty_log_accept_threshold(lam, noise_var)) & ok


#: the groups' warmup acceptance target: with moves of nearly fixed length (:func:`group_moves`) in
#: the noise-limited regime (penalty noise ``σ_g = K|Δ_g|`` dominating the log-posterior change), the
#: expected squared jump ``Δ²·2Φ(-K|Δ|/2)`` is largest at ``K|Δ| ≈ 2.4``, acceptance ≈ 0.24
#: (computed for ``m_g ~ U(0.75, 1.25)``; Gaussian moves: 0.74 of that jump at their best)
GROUP_TARGET_ACCEPT_PROB = 0.25


def group_moves(rng: torch.Generator, scale, n_groups: int, like: torch.Tensor) -> torch.Tensor:
    r"""``[G]`` moves :math:`\Delta_g = \pm s\,m_g`, signs fair and :math:`m_g \sim U(0.75, 1.25)`,
    from the algorithm stream (data-free; :func:`~.proposals.accept_uniform` draws, two per group):
    a symmetric proposal, :math:`q(\Delta) = q(-\Delta)`, whose continuous length keeps the chain
    irreducible. Nearly fixed lengths suit the penalty test, whose noise grows with
    :math:`|\Delta_g|`: at their best they make 1.7 times the expected squared jump of Gaussian moves
    (:data:`GROUP_TARGET_ACCEPT_PROB`).

    >>> g = torch.Generator().manual_seed(0)
    >>> d = group_moves(g, 0.1, 1000, torch.zeros((), dtype=torch.float64))
    >>> bool((d.abs() >= 0.075).all() and (d.abs() <= 0.125).all()), abs(float((d > 0).double().mean()) - 0.5) < 0.05
    (True, True)
    """
    u = torch.stack([accept_uniform(rng, like) for _ in range(2 * n_groups)]).reshape(2, n_groups)
    sign = torch.where(u[0] < 0.5, -torch.ones_like(u[0]), torch.ones_like(u[0]))
    return sign * (0.75 + 0.5 * u[1]) * torch.as_tensor(scale, dtype=like.dtype, device=like.device)


def grouped_step(lik, noise, rng: torch.Generator, state: MHState, *, coords: torch.Tensor, scale,
                 llr_clip: float, noise_multiplier: float, accept=grouped_accept):
    r"""One grouped step (module docstring), ``(MHState, GroupedInfo)``. Its randomness in this
    order: the moves :math:`\Delta` (:func:`group_moves`, algorithm stream ``rng``), the
    release's standard normals (secret stream ``noise``, :meth:`~pyro_dp.mechanisms.GaussianReleaseSpec.draw`),
    the uniforms :math:`u_g` (algorithm stream), all drawn whatever the data. ``state.cache`` holds
    :math:`\ell_i(\theta)` (computed here if absent); after an accepted move the cache is recomputed
    at the new point (exact whether or not the module's assumption holds; private, used only inside
    the next release). ``accept`` is :func:`grouped_accept` (injected so a test can swap it)."""
    z = state.z
    spec = gaussian_release_spec(float(noise_multiplier))
    n_groups = int(coords.numel())
    like = z.new_zeros(())
    deltas = group_moves(rng, scale, n_groups, like)  # Δ_g = ±s·m_g (algorithm stream)
    xi = spec.draw(noise, (n_groups,), device=z.device)  # the secret stream
    log_u = torch.log(torch.stack([accept_uniform(rng, like) for _ in range(n_groups)]))  # u_g, algorithm stream
    ll_old = state.cache if state.cache is not None else lik.per_example_loglik(z)
    lp_new, rel, unit = grouped_ratio_release(lik, spec, z, deltas, coords, ll_old, xi, llr_clip,
                                              getattr(noise, "shards", None))
    T = float(lik.temperature)
    # ŝ_g = |Δ_g| x coordinate g of the release (post-processing): Σ_i r_ig + N(0, (nm·2b|Δ_g|)²)
    noise_var = (T * rel.noise_std * unit) ** 2
    accepted = accept(log_u, T * unit * rel.value, lp_new - state.log_prior, noise_var)
    info = GroupedInfo(accepted, spec.event, clipped_fraction(rel.num_clipped, rel.num_rows),
                       float(rel.noise_std * unit.max()))
    if not bool(accepted.any()):
        return state._replace(cache=ll_old), info
    z_new = z.clone()
    z_new[coords] = z_new[coords] + torch.where(accepted, deltas, torch.zeros_like(deltas))
    ll_new, lp = lik.loglik_and_prior(z_new)
    return MHState(z_new, lp, state.direction, ll_new, state.grad), info


def private_group_clip(lik, z: torch.Tensor, coords: torch.Tensor, quantile: float, noise_multiplier: float, noise,
                       relation: str = "substitute"):
    r"""``(clip, event)``: a private upper ``quantile`` of the per-row gradient norms restricted to the
    group coordinates, :math:`\|\nabla_{a}\ell_i(z)\|`, at ``z`` — the clip per unit move of the
    grouped release (module docstring): the tuner's
    :func:`~pyro_dp.kernels.scales.private_norm_quantiles` of these norms (one noisy histogram over
    data-free bins, a non-finite norm in the overflow bin: the per-row rule; Dwork & Lei 2009 §3). Why: the default path's ``llr_clip`` is a quantile of the norms over *every*
    coordinate, set by the largest (in a normal model the noise scale's, about twice the intercept's),
    while a group's ratio per unit move is bounded by its own coordinate's gradient."""
    _, grads = lik.per_example_grad(z)  # reads the data: released only through the histogram
    (clip,), event = private_norm_quantiles(lik, torch.linalg.vector_norm(grads[:, coords], dim=-1), (quantile,),
                                            noise_multiplier, noise, relation)
    return clip, event


#: the group clip's histogram has noise multiplier ``nm / GROUP_CLIP_NOISE_RATIO`` (``nm``: the chain's;
#: one release worth 16 iterations', about 1% of a 1500-iteration run's budget), and its quantile is
#: the tuner's ``llr_quantile`` (0.98), not the raised ``ratio_quantile`` (``1 - 2 nm / N``): measured
#: on the two-level model (N = 2·10^4, nm ≈ 36), reading the quantile where about 72 rows lie above it,
#: the scan from the top stopped at a spurious edge (the summed noise of the empty top bins) in 1 of 3
#: chains with noise ``nm`` and 1 of 2 with ``nm / 4``. A clip at the 0.98 quantile of a group
#: coordinate's gradient clips a few percent of the rows: a Huber-like likelihood for that coordinate
#: (for an intercept with symmetric residuals, its centre unchanged)
GROUP_CLIP_NOISE_RATIO = 4.0


def group_clip_noise(noise_multiplier: float) -> float:
    """The private group clip's noise multiplier for a chain's ``noise_multiplier``."""
    return float(noise_multiplier) / GROUP_CLIP_NOISE_RATIO


def grouped_releases(noise_multiplier: float, *, others: bool, group_clip: bool) -> ReleasePlan:
    """DPGroupedPenalty's releases: per iteration the penalty step on the other likelihood
    coordinates (``others``: if there are any) and the grouped release; once per chain, on the
    default path (``group_clip``), the private group clip's histogram (:func:`private_group_clip`)."""
    once = (gaussian_event(group_clip_noise(noise_multiplier)),) if group_clip else ()
    return ReleasePlan((gaussian_event(float(noise_multiplier)),) * (2 if others else 1), once,
                       ratio_noise_multiplier=noise_multiplier)


def group_structure(lik, site: str):
    """``(coords [G], the other likelihood coordinates [D] 0/1, whether there are any, the coordinates
    that enter only the prior [D] 0/1)`` of ``lik`` for the group site ``site``, checked (data-free)."""
    coords = group_coordinates(lik, site)
    others = torch.ones(lik.dim, dtype=lik.dtype, device=lik.device)
    others[coords] = 0.0
    mask = lik.likelihood_mask
    lik_others = others if mask is None else others * mask  # step 1 moves these
    return coords, lik_others, bool(lik_others.sum() > 0), others - lik_others  # ..., prior-only coordinates


def _refuse_arguments(kwargs: dict, group_site) -> None:
    """DPGroupedPenalty's refusals in ``__init__``: the walk modes it does not offer, a group site
    that is not a name, a whitening tuner."""
    for name in ("one_component", "guided_walk"):
        if kwargs.pop(name, False):
            raise ValueError(f"DPGroupedPenalty does not offer {name}: its first move is a joint random walk on "
                             "the other coordinates, its second the grouped update")
    if not isinstance(group_site, str):
        raise TypeError(f"group_site must be the name of a latent site, got {group_site!r}")
    if getattr(kwargs.get("init"), "whiten", False):  # a DPAutoTune(whiten=True)
        raise ValueError("DPGroupedPenalty cannot whiten (DPAutoTune(whiten=True)): the whitening preconditioner "
                         "mixes the group coordinates with the others; use DPAutoTune(whiten=False)")


def _checked_group_scale(group_scale) -> Optional[float]:
    scale = None if group_scale is None else float(group_scale)
    if scale is not None and not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"group_scale must be positive and finite, got {group_scale!r}")
    return scale


def _start_log_scales(dim: int, proposal_scale, group_scale: Optional[float], coords, prior_only):
    """A chain's starting ``(log group scale, log scale of the prior-only sweeps)``: the group scale
    as given or tuned, else the proposal scale's mean over the group coordinates; the sweeps' the
    proposal scale's mean over the prior-only coordinates (log 1 without a proposal scale)."""
    given = torch.as_tensor(proposal_scale if proposal_scale is not None else 1.0, dtype=torch.float64).expand(dim)
    s = float(given[coords.cpu()].mean()) if group_scale is None else group_scale
    p = given[prior_only.cpu() > 0]
    return math.log(s), (math.log(float(p.mean())) if p.numel() else 0.0)


def _refuse_mixing(preconditioner) -> None:
    """The grouped update needs diagonal coordinates: refuse a preconditioner that mixes them (whitening)."""
    if preconditioner is not None and preconditioner[1] is not None:
        L = preconditioner[1]
        if L.dim() == 2 and bool((L - torch.diag(torch.diagonal(L))).abs().sum() > 0):
            raise ValueError("DPGroupedPenalty needs diagonal coordinates: a preconditioner mixes the group "
                             "coordinates with the others (whitening); use DPAutoTune(whiten=False)")


def _prior_factorises(lik, z: torch.Tensor, coords: torch.Tensor) -> bool:
    """Data-free check at set-up: the prior's change under a joint move of the group coordinates
    equals the sum of its changes under each one-coordinate move (at ``z``, a fixed public draw)."""
    gen = torch.Generator(device=z.device).manual_seed(0)  # a fixed public draw, not the chain's stream
    delta = random_walk(gen, z.new_zeros(int(coords.numel())), torch.tensor(0.1, dtype=z.dtype, device=z.device)).z
    with torch.no_grad():
        lp0 = lik.log_prior(z)
        zj = z.clone()
        zj[coords] = zj[coords] + delta
        joint = lik.log_prior(zj) - lp0
        parts = 0.0
        for g in range(int(coords.numel())):
            zg = z.clone()
            zg[coords[g]] = zg[coords[g]] + delta[g]
            parts = parts + (lik.log_prior(zg) - lp0)
    if not (bool(torch.isfinite(joint)) and bool(torch.isfinite(torch.as_tensor(parts)))):
        return True  # undecidable here (a start at the support's edge): the chain's own checks apply
    return abs(float(joint) - float(parts)) <= 1e-6 * (1.0 + abs(float(joint)))


class GroupScaleAdaptation:
    r"""The grouped step's move length :math:`s` and its private group clip: a part the kernel
    holds (``kernel.group_walk``, checkpointed with the chain), as
    :class:`~.proposals.ProposalScaleAdaptation` is the random walk's.

    :math:`s` is the given ``group_scale``, else :math:`\min\{2.4\,j,\ 2.38\,\mathrm{sd}_g\}` once
    the default path guessed :math:`\mathrm{sd}_g` (:meth:`tune`, again when the group clip
    changes :math:`j`); during warmup Robbins–Monro on :math:`\log s` from the groups' mean
    acceptance towards :data:`GROUP_TARGET_ACCEPT_PROB` (gain :math:`t^{-0.6}`). Its inputs are
    accept decisions and released clips: post-processing, no privacy.

    >>> a = GroupScaleAdaptation(None); _ = a.start(None, 2, torch.tensor([1]), torch.zeros(2))
    >>> a.tune(lambda: 0.1, sd_g=1.0); round(a.scale, 6)
    0.24
    """

    def __init__(self, given: Optional[float]):
        self.given = self.scale = given  # None: tuned (tune) or the proposal scale's mean over the groups
        self.sd_g = self.log_scale = self.clip = None  # clip: the default path's private group clip, once released
        self.accepts = [0.0, 0]

    def start(self, proposal_scale, dim: int, coords, prior_only) -> float:
        """A new chain (:func:`_start_log_scales`): returns the prior-only sweeps' starting log scale."""
        self.log_scale, sweeps = _start_log_scales(dim, proposal_scale, self.scale, coords, prior_only)
        self.accepts, self.clip = [0.0, 0], None
        return sweeps

    def tune(self, jump, sd_g: Optional[float] = None) -> None:
        r""":math:`s = \min\{2.4\,j, 2.38\,\mathrm{sd}_g\}` (``jump()`` gives :math:`j`), unless
        ``group_scale`` was given; ``sd_g``: the default path's new guess (else the last one)."""
        if self.given is None:
            self.sd_g = self.sd_g if sd_g is None else sd_g
            if self.sd_g is not None:
                self.scale = min(2.4 * jump(), 2.38 * self.sd_g)
                self.log_scale = math.log(self.scale)

    def update(self, rate: float, iteration: int, warmup_steps: int, warmup: bool) -> None:
        """The groups' mean acceptance ``rate`` at ``iteration``: adapts during warmup, counted after."""
        if warmup:
            self.log_scale += (iteration + 1.0) ** -0.6 * (rate - GROUP_TARGET_ACCEPT_PROB)
        elif iteration >= warmup_steps:
            self.accepts = [self.accepts[0] + rate, self.accepts[1] + 1]

    @property
    def acceptance_rate(self) -> Optional[float]:
        """The mean of the rates counted after warmup (``None`` before any)."""
        total, count = self.accepts
        return total / count if count else None


class DPGroupedPenalty(DPPenalty):
    r"""DP penalty MH with parallel per-group updates of ``group_site`` (module docstring): each
    iteration data-free Metropolis steps on the sites that enter only the prior, an ordinary
    :class:`~.penalty.DPPenalty` step on the other likelihood coordinates, then one grouped step that
    moves each of the group site's :math:`G` coordinates with its own penalty decision, all from one
    Gaussian release of the :math:`G`-vector of clipped per-row ratio sums.

    **Assumption** (correctness, not privacy): every row's log-likelihood depends on at most one
    coordinate of ``group_site`` (``a[g[i]]``), and its prior factorises over the coordinates given
    the other latents (checked at set-up, data-free). A model that breaks the first gets a private
    but inexact chain.

    :param model: Pyro model with its observed sites in a data plate.
    :param str group_site: the latent site of the group effects (a vector of :math:`G \ge 2`
        coordinates in the likelihood). Refused at set-up, data-free, otherwise.
    :param proposal_scale: random-walk scale of the other coordinates (as DPPenalty's; its entries
        on the group coordinates are ignored). Default: tuned privately.
    :param group_scale: the length :math:`s` of each group's move, :math:`\Delta_g = \pm s\,m_g`
        (:func:`group_moves`). Default: the mean of ``proposal_scale`` over the group coordinates when
        that is given, else set from the private tuning: :math:`\min\{2.4\,j,\ 2.38\,\mathrm{sd}_g\}`
        with :math:`j` the move whose penalty noise has standard deviation 1
        (:func:`~.scales.penalty_jump_length`; :math:`2.4\,j` the noise-limited optimum,
        :data:`GROUP_TARGET_ACCEPT_PROB`) and :math:`\mathrm{sd}_g` a group coordinate's posterior
        scale guessed from the private gradient clip with :math:`N/G` rows. With ``adapt_proposal``
        (the default when the scales are tuned) it adapts during warmup towards
        :data:`GROUP_TARGET_ACCEPT_PROB` (Robbins–Monro on the log scale from the groups' mean
        acceptance, gain :math:`t^{-0.6}`, as :class:`~.proposals.ProposalScaleAdaptation`;
        post-processing, no privacy); ``target_accept_prob`` is step 1's.
    :param llr_clip: :math:`b`, as DPPenalty's (in the likelihood's coordinates); the grouped
        step clips each row's vector of ratios per unit move, :math:`(r_{ig}/|\Delta_g|)_g`, to L2 norm :math:`b`.
    :param group_llr_clip: that clip of the grouped step alone, when it should differ from
        ``llr_clip`` (public knowledge of the group coordinate's per-row gradient, e.g. a bounded
        residual); default ``llr_clip``, which the default path sets from every coordinate's
        gradient and so from the largest (a scale parameter's, in a normal model).
    :param noise_multiplier: of both releases of an iteration. Default: calibrated to the budget
        with two Gaussian releases per iteration (one when ``group_site`` is the only latent).

    The default path is DPPenalty's (:class:`~pyro_dp.default_path.tuning.DPAutoTune`: private start,
    clips, per-coordinate scales, which are diagonal), **without whitening**: a whitening
    preconditioner would mix the group coordinates with the others (``DPAutoTune(whiten=True)`` is
    refused), plus a private group clip per chain (:func:`private_group_clip`). ``one_component``
    and ``guided_walk`` are not offered. Other keyword arguments are DPPenalty's. Measured on a
    two-level model in ``docs/kernels/grouped.md``.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro.infer import MCMC
    >>> from pyro_dp import DPGroupedPenalty
    >>> def model(g, y):
    ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype), 1.0))   # prior only
    ...     with pyro.plate("groups", 3):
    ...         a = pyro.sample("a", dist.Normal(mu, 1.0))                               # the groups
    ...     with pyro.plate("data", len(y)):
    ...         pyro.sample("y", dist.Normal(a[g], 1.0), obs=y)
    >>> g = torch.arange(60) % 3
    >>> y = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)[g]
    >>> k = DPGroupedPenalty(model, 0.1, llr_clip=5.0, noise_multiplier=2.0, group_site="a", group_scale=0.1, seed=0)
    >>> mcmc = MCMC(k, num_samples=20, warmup_steps=5, disable_progbar=True)
    >>> mcmc.run(g, y)
    >>> k.planned_events()  # mu moves data-free: one release per iteration, the grouped one
    ([], [GaussianEvent(noise_multiplier=2.0)])
    """

    runs_control_variate = False  # per-group releases of its own (the plain test on each group's move)
    advises_grouped = False  # (diagnostics' ESS advice) it is the kernel the advice names

    whiten_by_default = False  # whitening would mix the group coordinates with the others
    scale_by_default = True  # per-coordinate scales are diagonal: the groups stay separate
    supports_distributed = False  # the grouped release is not written for sharded rows yet
    _chain_attrs = DPPenalty._chain_attrs + ("group_walk",)
    #: the length :math:`s` of each group's move in use (given, or tuned: :class:`GroupScaleAdaptation`)
    group_scale = PartAttribute("group_walk", "scale")

    def __init__(self, model, proposal_scale=None, llr_clip: Optional[float] = None,
                 noise_multiplier: Optional[float] = None, *, group_site: str, group_scale=None,
                 group_llr_clip: Optional[float] = None, **kwargs):
        _refuse_arguments(kwargs, group_site)
        super().__init__(model, proposal_scale, llr_clip, noise_multiplier, **kwargs)
        self.group_site = group_site
        self.group_walk = GroupScaleAdaptation(_checked_group_scale(group_scale))
        #: the grouped release's clip per unit move as given (``None``: :meth:`_group_clip` decides)
        self.group_llr_clip = None if group_llr_clip is None else check_positive("group_llr_clip", group_llr_clip)
        #: the default path releases a private group clip at each chain's first step (private_group_clip)
        self.auto_group_clip = self.group_llr_clip is None and "llr_clip" in self.auto_tuned

    # ------------------------------------------------------------------ structure (data-free)
    def groups(self):
        """``(coords [G], the other likelihood coordinates [D] 0/1, whether there are any, the coordinates
        that enter only the prior [D] 0/1)`` of the current likelihood, checked (data-free)."""
        cached = self.__dict__.get("_groups_of")
        if cached is None or cached[0] is not self.lik:
            self._groups_of = cached = (self.lik, group_structure(self.lik, self.group_site))
        return cached[1]

    def _calibrate(self):
        others = self.groups()[2]  # refusals first, before any planning or data access
        if self.noise_multiplier is None:
            self.noise_multiplier = calibrated_scale(
                lambda s: grouped_releases(s, others=others, group_clip=self.auto_group_clip), Budget.of(self),
                self.num_iterations, init_events=init_events(self), closed_form=False)

    def releases(self, state=None):
        plan = grouped_releases(self.noise_multiplier, others=self.groups()[2], group_clip=self.auto_group_clip)
        return plan if state is None else plan.first_step(self.auto_group_clip and self.group_walk.clip is None)

    def _check_data(self) -> None:
        super()._check_data()
        self.groups()
        _refuse_mixing(self.lik.preconditioner)

    def _init_state(self, z):
        state = super()._init_state(z)
        coords, _, _, prior_only = self.groups()
        if self.num_setups == 1 and self.chain.iteration == 0 and not _prior_factorises(self.lik, z, coords):
            raise ValueError(f"the prior of group_site={self.group_site!r} does not factorise over its coordinates "
                             "given the other latents: the grouped update assumes independent group effects "
                             "(a plate of independent draws)")
        if self.chain.iteration == 0 or self.group_walk.log_scale is None:  # a new chain: the given or tuned scale
            # (the group clip is released again at this chain's first step on the default path)
            self.prior_sweeps.log_scale = self.group_walk.start(self.proposal_scale, self.lik.dim, coords, prior_only)
        return state

    def guess_group_scale(self, sd_g: float) -> None:
        r"""The default path's guess of the group effects' posterior sd (``sd_g``, from the
        private tuning: post-processing): the group scale is tuned from it
        (:meth:`GroupScaleAdaptation.tune`, again once the group clip is released), unless
        ``group_scale`` was given."""
        self.group_walk.tune(self._group_jump, sd_g)

    def _group_jump(self) -> float:
        return penalty_jump_length(self.noise_multiplier, self._group_clip(), self.lik.temperature)

    # ------------------------------------------------------------------ the iteration
    def _step(self, state):
        coords, lik_others, has_others, prior_only = self.groups()
        events, fracs, moved = [], [], False
        warmup = self.adapt_proposal and self.chain.iteration < self.chain.warmup_steps
        if self.auto_group_clip and self.group_walk.clip is None:  # the chain's first step (declared)
            q = self.init.llr_quantile  # not the raised ratio_quantile: see GROUP_CLIP_NOISE_RATIO
            clip, event = private_group_clip(self.lik, state.z, coords, q, group_clip_noise(self.noise_multiplier),
                                             self._noise, self.relation)
            events.append(event)
            # the group block's norms are at most the full norms: a noisy quantile above the tuner's
            # llr_clip is noise (post-processing)
            self.group_walk.clip = min(clip, float(self.llr_clip))
            self.group_walk.tune(self._group_jump)
        if bool(prior_only.any()):  # step 0: data-free MH on the coordinates that enter only the prior
            state, moved = self.prior_sweeps.run(self.lik, self._rng, state, prior_only, iteration=self.chain.iteration,
                                                 target_accept_prob=self.target_accept_prob, warmup=warmup)
        if has_others:  # step 1: DPPenalty's step on the other likelihood coordinates, the groups held fixed
            scale = self.adapted_proposal_scale * lik_others
            state, info = mh_step(self._rng, self._noise, state, release_accept=self._release_accept,
                                  propose=random_walk_proposal(scale, "full"))
            self._adapt(info)  # warmup only; reads the accept decision (post-processing)
            events.extend(info.events)
            fracs.append(info.clipped_fraction)
            moved = moved or bool(info.accepted)
        state, g = grouped_step(self.lik, self._noise, self._rng, state, coords=coords,
                                scale=math.exp(self.group_walk.log_scale), llr_clip=self._group_clip(),
                                noise_multiplier=self.noise_multiplier)
        events.append(g.event)
        fracs.append(g.clipped_fraction)
        rate = float(g.accepted.to(torch.float64).mean())  # post-processing, as _adapt
        self.group_walk.update(rate, self.chain.iteration, self.chain.warmup_steps, warmup)
        moved = moved or bool(g.accepted.any())
        # accepted: the state moved (either step); the groups' own rate is group_acceptance_rate
        return state, MHInfo(moved, tuple(events), sum(fracs) / len(fracs), g.noise_std, -1, g)

    def _group_clip(self) -> float:
        """The grouped release's clip per unit move: ``group_llr_clip`` if given, else the private
        group clip on the default path (once released), else ``llr_clip``."""
        if self.group_llr_clip is not None:
            return self.group_llr_clip
        if self.auto_group_clip and self.group_walk.clip is not None:
            return self.group_walk.clip
        return self.llr_clip

    @property
    def group_acceptance_rate(self) -> Optional[float]:
        """The groups' mean acceptance rate after warmup in the current chain (post-processing of
        the releases), or ``None`` before any sampling iteration."""
        return self.group_walk.acceptance_rate

    def diagnostics(self):
        out = super().diagnostics()
        rate = self.group_acceptance_rate
        if rate is not None:
            out["group acceptance rate"] = rate
        return out
