r"""A public affine change of the kernels' coordinates (mixed into
:class:`~pyro_dp.likelihood.PrivateLikelihood`): the chain runs in :math:`u` with

.. math:: z = s + L u,

where :math:`z` is the flat unconstrained latent vector, :math:`s` a shift and :math:`L` a
lower-triangular matrix with a positive diagonal, both **released or data-free** (the default
path's :class:`~pyro_dp.default_path.tuning.DPAutoTune` sets them from its private start and a
private estimate of the posterior's covariance when asked to, ``whiten=True``). With
:math:`LL^\top` close to the posterior covariance the posterior in :math:`u` is close to
isotropic, so every kernel's isotropic moves, clips and step sizes fit it in every direction (a
random walk on a posterior with correlation 0.8 is a different problem from one on an isotropic
posterior; Roberts & Rosenthal 2001 §3, the optimal random-walk covariance is proportional to
the target's).

Privacy does not depend on :math:`(s, L)`: they are public inputs (post-processing of earlier
releases), the per-example terms are those of the same model at :math:`z = s + Lu`, and every
release clips what it sums, whatever the coordinates. The map has a constant Jacobian
:math:`\log|\det L|`, which cancels in every Metropolis–Hastings ratio and is left out of the
log prior (the log prior in :math:`u` differs from the one in :math:`z` by that constant).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

__all__ = ["Preconditioned"]


class Preconditioned:
    """The coordinate change of the module docstring (mixin of the likelihood)."""

    _precond: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    @property
    def preconditioner(self) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
        """``(shift, L)`` of the coordinates the kernels work in, or ``None`` (the flat
        unconstrained latents themselves)."""
        return None if self._precond is None else self._precond[:2]

    def set_preconditioner(self, shift: Optional[torch.Tensor], L: Optional[torch.Tensor] = None) -> None:
        r"""Make the kernels' coordinates :math:`u = L^{-1}(z - s)` (``shift=None``: back to
        :math:`z`). ``shift`` ``[D]`` and ``L`` ``[D, D]`` lower-triangular with a positive,
        finite diagonal; they must be public (released, or data-free). Compiled graphs take
        them as inputs, so a new pair recompiles nothing.

        >>> import torch
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 2.0]),), seed=0)
        >>> before = lik.per_example_loglik(torch.tensor([1.5]))
        >>> lik.set_preconditioner(torch.tensor([1.0]), torch.tensor([[0.5]]))
        >>> from pyro_dp.private import reveal  # the terms are private (a doctest reads them)
        >>> after = lik.per_example_loglik(torch.tensor([1.0]))  # u = (1.5 - 1) / 0.5
        >>> torch.equal(*reveal((after, before), reason="a doctest"))
        True
        >>> lik.flatten({"mu": torch.tensor(1.5)})
        tensor([1.])
        """
        if shift is None:
            self._precond = None
        else:
            d = self.dim
            shift = torch.as_tensor(shift, dtype=self.dtype, device=self.device).reshape(-1)
            L = torch.as_tensor(L, dtype=self.dtype, device=self.device)
            if shift.shape != (d,) or L.shape != (d, d):
                raise ValueError(f"a preconditioner needs shift [{d}] and L [{d}, {d}], got {tuple(shift.shape)} "
                                 f"and {tuple(L.shape)}")
            diag = torch.diagonal(L)
            if not (bool(torch.isfinite(L).all()) and bool(torch.isfinite(shift).all()) and bool((diag > 0).all())
                    and bool(torch.equal(L, torch.tril(L)))):
                raise ValueError("a preconditioner's L must be finite and lower-triangular with a positive diagonal, "
                                 "and its shift finite")
            self._precond = (shift, L, torch.linalg.inv(L))
        compiled = getattr(self, "compiled", None)
        if compiled is not None:
            compiled.rebind()

    def compose_preconditioner(self, shift: torch.Tensor, L: torch.Tensor) -> None:
        r"""Change the kernels' coordinates once more, from the current :math:`u` to
        :math:`u'` with :math:`u = s' + L'u'` (``shift`` and ``L`` given in the current
        coordinates): :math:`z = (s + L s') + (L L')\,u'`, still lower-triangular with a positive
        diagonal. Without a preconditioner, :meth:`set_preconditioner`.

        >>> import torch
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 2.0]),), seed=0)
        >>> lik.set_preconditioner(torch.tensor([1.0]), torch.tensor([[0.5]]))
        >>> lik.compose_preconditioner(torch.tensor([2.0]), torch.tensor([[4.0]]))
        >>> lik.preconditioner  # z = 1 + 0.5 (2 + 4 u')
        (tensor([2.]), tensor([[2.]]))
        """
        if self._precond is None:
            self.set_preconditioner(shift, L)
            return
        s0, L0, _ = self._precond
        shift = torch.as_tensor(shift, dtype=self.dtype, device=self.device).reshape(-1)
        L = torch.as_tensor(L, dtype=self.dtype, device=self.device)
        self.set_preconditioner(s0 + L0 @ shift, L0 @ L)

    def _to_coordinates(self, z: torch.Tensor) -> torch.Tensor:
        """``u`` of the flat unconstrained ``z``."""
        if self._precond is None:
            return z
        shift, _, L_inv = self._precond
        return L_inv @ (z - shift)

    def _from_coordinates(self, u: torch.Tensor) -> torch.Tensor:
        """The flat unconstrained ``z`` of ``u`` (``[D]``, or ``[..., D]``)."""
        if self._precond is None:
            return u
        shift, L, _ = self._precond
        return shift + (L @ u if u.dim() == 1 else u @ L.T)

    def from_unconstrained(self, z: torch.Tensor) -> torch.Tensor:
        """The kernels' coordinates ``u`` of the flat unconstrained latents ``z`` (``[D]``); ``z``
        itself without a preconditioner: the inverse of :meth:`to_unconstrained`."""
        return self._to_coordinates(z)

    def to_unconstrained(self, u: torch.Tensor) -> torch.Tensor:
        """The flat unconstrained latents of the kernels' coordinates ``u`` (``[..., D]``);
        ``u`` itself without a preconditioner. For diagnostics in the model's own coordinates,
        and bit for bit what :meth:`unravel` gives a single point."""
        return self._from_coordinates(u)
