r"""Private starting points: noisy clipped gradient ascent before the first MCMC iteration.

Penalty-type kernels (DP penalty, DP-HMC) pay for a proposal in proportion to its jump
length, so from a start far from the posterior they reject nearly everything. Choosing the
start from a non-private fit would leak; choosing it by hand needs knowledge of the data.
:class:`DPGradientInit` finds a start privately: ``num_steps`` steps of full-batch DP
gradient ascent on the tempered log posterior (DP-GD: Song, Chaudhuri & Sarwate 2013;
Abadi et al. 2016 Alg. 1 without subsampling),

.. math::
    g_t = \sum_{i=1}^N \mathrm{clip}_{C}\big(\nabla\ell_i(z_t)\big) + \mathcal N(0, \sigma^2 I),
    \qquad \sigma = \mathrm{nm}\cdot 2C \ \ (\text{substitute; } C \text{ under add/remove}),

.. math::
    z_{t+1} = z_t + \frac{\eta}{N}\big(T\,g_t + \nabla\log p(z_t)\big),

in the kernel's unconstrained space (:math:`T` the kernel's temperature, :math:`N` the public
number of rows, :math:`\eta` = ``step_size``). Each step is one Gaussian mechanism, recorded
in the chain's ledger as :class:`~pyro_dp.mechanisms.GaussianEvent` ``(nm)``; the prior
gradient is data-free. The kernel runs it lazily, at the first iteration of every chain
(``setup`` stays data-free), and counts its ``num_steps`` releases as fixed events of the
chain's privacy budget and noise calibration.

>>> init = DPGradientInit(num_steps=20, step_size=0.5, grad_clip=1.0, noise_multiplier=5.0)
>>> init.events()
[(GaussianEvent(noise_multiplier=5.0), 20)]
"""
from __future__ import annotations

import numbers
from typing import List, Tuple

import torch

from ..mechanisms import GaussianEvent, NoiseSource, NonPrivateEvent, clipped_sum_with_noise

__all__ = ["DPGradientInit"]


def _positive(name, value, *, integer=False, allow_zero=False):
    ok_type = isinstance(value, numbers.Integral) if integer else isinstance(value, numbers.Real)
    if isinstance(value, bool) or not ok_type:
        raise TypeError(f"{name} must be a{'n integer' if integer else ' real number'}, got {value!r}")
    v = int(value) if integer else float(value)
    if not (v >= 0 if allow_zero else v > 0) or v != v or v == float("inf"):
        raise ValueError(f"{name} must be {'non-negative' if allow_zero else 'positive'} and finite, got {value!r}")
    return v


class DPGradientInit:
    r"""Private initialisation by DP gradient ascent (see the module docstring for the update).

    :param int num_steps: gradient steps (each one release of the clipped gradient sum).
    :param float step_size: :math:`\eta`, applied to the *mean* gradient (sum / N).
    :param float grad_clip: :math:`C`, per-example L2 clip of :math:`\nabla\ell_i`.
    :param float noise_multiplier: :math:`\sigma / \Delta_2` of each release (``0`` only
        with the kernel's ``non_private=True`` test mode).

    Pass it to any kernel as ``init=DPGradientInit(...)``; the kernel starts every chain
    from its ``initial_params`` (or a prior draw) and walks from there.

    >>> import torch, pyro, pyro.distributions as dist
    >>> from pyro_dp import DPPenalty
    >>> def model(y):
    ...     mu = pyro.sample("mu", dist.Normal(torch.tensor(0.0, dtype=y.dtype, device=y.device), 10.0))
    ...     with pyro.plate("data", len(y)) as i:
    ...         pyro.sample("y", dist.Normal(mu, 1.0), obs=y[i])
    >>> y = torch.full((1000,), 2.0, dtype=torch.float64)
    >>> k = DPPenalty(model, 0.05, llr_clip=3.0, noise_multiplier=20.0, seed=0,
    ...               init=DPGradientInit(num_steps=30, step_size=0.5, grad_clip=3.0, noise_multiplier=2.0))
    >>> k.initial_params = {"mu": torch.tensor(-8.0, dtype=torch.float64)}  # far from the data
    >>> k.setup(0, y); out = k.sample(k.initial_params)
    >>> abs(float(out["mu"]) - 2.0) < 0.5, k.ledger.num_releases
    (True, 31)
    """

    def __init__(self, num_steps: int, step_size: float, grad_clip: float, noise_multiplier: float):
        self.num_steps = _positive("num_steps", num_steps, integer=True)
        self.step_size = _positive("step_size", step_size)
        self.grad_clip = _positive("grad_clip", grad_clip)
        self.noise_multiplier = _positive("noise_multiplier", noise_multiplier, allow_zero=True)

    def __repr__(self):
        return (f"DPGradientInit(num_steps={self.num_steps}, step_size={self.step_size}, "
                f"grad_clip={self.grad_clip}, noise_multiplier={self.noise_multiplier})")

    def events(self) -> List[Tuple[object, int]]:
        """The releases it makes, ``[(event, count)]``, for budget planning."""
        ev = NonPrivateEvent() if self.noise_multiplier == 0 else GaussianEvent(self.noise_multiplier)
        return [(ev, self.num_steps)]

    def run(self, lik, z: torch.Tensor, noise: NoiseSource, relation: str = "substitute", record=None):
        """Walk from ``z``; returns ``(z_final, events, mean clipped fraction)``.

        ``events`` lists one event per release. ``record(event)``, if given, is called right
        after each release (a kernel passes its ledger's ``record``, so an exception part-way
        loses no release). The clipped fraction is a data statistic for the user's
        diagnostics only (not private).
        """
        n = getattr(lik, "global_num_rows", lik.num_rows)  # all rows, also when sharded over ranks
        events, clipped = [], 0.0
        z = z.detach().clone()
        for _ in range(self.num_steps):
            _, grads = lik.clipped_grad_sum(z, self.grad_clip)  # reads the data (clipped, summed) ...
            # a non-finite row gradient counts as zero (the per-row rule inside the release, so the
            # sensitivity bound holds): an error here would reveal that such a row exists
            rel = clipped_sum_with_noise(grads, self.grad_clip, self.noise_multiplier, noise, relation)  # ... released here
            events.append(rel.event)
            if record is not None:
                record(rel.event)
            clipped += rel.clipped_fraction
            # DP-GD step on the tempered log posterior (module docstring); the prior is data-free
            step = lik.temperature * lik.project(rel.value) + lik.grad_log_prior(z)
            z = (z + self.step_size / n * step).detach()
            if not bool(torch.isfinite(z).all()):
                raise FloatingPointError(
                    "DPGradientInit diverged (non-finite parameters): lower step_size or raise the noise/clip"
                )
        return z, events, clipped / max(self.num_steps, 1)
