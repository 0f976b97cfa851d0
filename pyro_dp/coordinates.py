r"""Which coordinates of the latent vector the per-example log-likelihood depends on (mixed into
:class:`~pyro_dp.likelihood.PrivateLikelihood`), found **data-free**, and the two places the
kernels use the answer (:meth:`LikelihoodCoordinates.jump_norm`,
:meth:`LikelihoodCoordinates.project`) — both private whatever it says."""
from __future__ import annotations

import warnings
from typing import Optional, Tuple

import pyro.poutine as poutine
import torch

from .arguments import tensor_arguments, with_tensors
from .graphs import ancestors

__all__ = ["LikelihoodCoordinates"]


class LikelihoodCoordinates:
    """The likelihood's coordinates (module docstring)."""

    @property
    def likelihood_mask(self) -> Optional[torch.Tensor]:
        r"""``[D]`` 0/1 in the chain's dtype: the coordinates of the latent sites the per-example
        log-likelihood depends on; ``None`` when it depends on every site (or when that cannot
        be determined): a site that enters only the prior, such as a hierarchical model's
        population mean and scale, is not one of them. **Data-free** (:meth:`likelihood_sites`).

        The kernels use it in two places, both safe whatever the mask says: the norm of a
        move in the ratio clip, :meth:`jump_norm` (the clip is applied to the released ratios,
        so their sensitivity is what the noise assumes), and the released gradients,
        :meth:`project` (post-processing of a release).

        >>> import torch, pyro, pyro.distributions as dist
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> def model(y):
        ...     mu = pyro.sample("mu", dist.Normal(0., 5.))
        ...     theta = pyro.sample("theta", dist.Normal(mu, 1.))  # mu enters only theta's prior
        ...     with pyro.plate("data", len(y)) as i:
        ...         pyro.sample("obs", dist.Normal(theta, 1.), obs=y[i])
        >>> PrivateLikelihood(model, (torch.zeros(4),), seed=0).likelihood_mask
        tensor([0., 1.])
        """
        if not hasattr(self, "_likelihood_mask"):
            sites = self.likelihood_sites()
            mask = None
            if sites is not None and set(sites) != set(self.latent_names):
                mask = torch.cat([torch.full((self._sizes[n],), float(n in sites), dtype=self.dtype,
                                             device=self.device) for n in self.latent_names])
            self._likelihood_mask = mask
        return self._likelihood_mask

    @property
    def likelihood_dim(self) -> int:
        """How many coordinates :attr:`likelihood_mask` keeps (``dim`` when it is ``None``): the
        dimension of a move as :meth:`jump_norm` measures it. Data-free.

        >>> import torch
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> PrivateLikelihood(model, (torch.zeros(3),), seed=0).likelihood_dim
        1
        """
        mask = self.likelihood_mask
        return self.dim if mask is None else int(mask.sum())

    def likelihood_sites(self) -> Optional[Tuple[str, ...]]:
        r"""The latent sites the per-example log-likelihood depends on, from the model's code and
        the shapes of its arguments only, or ``None`` if that cannot be determined.

        The log-likelihood of the observed sites in the data plate is traced into a graph
        (:func:`torch.fx.experimental.proxy_tensor.make_fx`) with every latent site a separate
        input and the model's tensor arguments as **fake tensors** (a shape, a dtype and a
        device, no values, as the compiled path traces them: ``docs/performance.md``); a site
        belongs to the likelihood when its input is an ancestor of the output. No value of the
        data exists during the trace, so the answer cannot depend on one. ``None`` (every site
        counts, as before) when the trace fails (a branch on a value), or when an observed
        value is not a fake tensor (data read from the model's closure, whose values the
        trace would see)."""
        cache = self._jit_cache if self._jit_cache is not None else {}
        key = self._check_key("likelihood_sites") + (tuple(tuple(self._shapes[n]) for n in self.latent_names),)
        if key not in cache:
            cache[key] = self._trace_likelihood_sites()
        return cache[key]

    def _trace_likelihood_sites(self) -> Optional[Tuple[str, ...]]:
        from torch._subclasses.fake_tensor import is_fake
        from torch.fx.experimental.proxy_tensor import make_fx

        leaves, spec, pos = tensor_arguments(self.arguments.args, self.arguments.kwargs)
        data, names = [leaves[i] for i in pos], self.latent_names

        def loglik(*inputs):
            args, kwargs = with_tensors(leaves, spec, pos, inputs[: len(data)])
            values = {n: self.transforms[n].inv(u) for n, u in zip(names, inputs[len(data):])}
            with poutine.block():
                tr = self._run(values, args, kwargs)
                if not all(is_fake(tr.nodes[n]["value"]) for n in self.observed_names):
                    raise ValueError("an observed value is not a model argument")  # closure data: see docstring
                return self._observed_terms(tr)

        units = [self.prototype_params[n] for n in names]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph = make_fx(loglik, tracing_mode="fake", _allow_non_fake_inputs=True)(*data, *units)
        except Exception:  # noqa: BLE001 - undetermined: every site counts (no change)
            return None
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        site_of = {node: name for node, name in zip(placeholders[len(data):], names)}
        seen = ancestors(n for n in graph.graph.nodes if n.op == "output")
        return tuple(n for node, n in site_of.items() if node in seen)

    def jump_norm(self, z_new: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        r""":math:`\|m\odot(\theta'-\theta)\|` with :math:`m` = :attr:`likelihood_mask` (all ones when
        ``None``): the length of a move as the per-example log-likelihood sees it, which scales
        the ratio clip :math:`b\|\theta'-\theta\|` of the penalty kernels (Räisä 2021 thesis
        §3.1, Thm 11). A move in sites that enter only the prior changes no row's likelihood:
        its ratios are exactly zero, and so is its clip and noise. Privacy does not rest on the
        mask being right: the ratios are clipped to this bound, whatever they are.

        >>> import torch
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> lik = PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0)
        >>> float(lik.jump_norm(torch.tensor([3.0]), torch.tensor([-1.0])))
        4.0
        """
        mask = self.likelihood_mask
        return torch.linalg.vector_norm(z_new - z if mask is None else (z_new - z) * mask)

    def project(self, released: torch.Tensor) -> torch.Tensor:
        r"""A released sum of per-example gradients (noise added) restricted to
        :attr:`likelihood_mask`'s coordinates: in the others the clipped sum is exactly zero
        (no row's likelihood depends on them) and what was released there is noise alone.
        Post-processing of the release, so private whatever the mask; unchanged when ``None``.

        >>> import torch
        >>> from pyro_dp.likelihood import PrivateLikelihood
        >>> from pyro_dp.models.examples import normal_mean_model as model
        >>> PrivateLikelihood(model, (torch.tensor([0.0, 3.0]),), seed=0).project(torch.tensor([0.7]))
        tensor([0.7000])
        """
        mask = self.likelihood_mask
        return released if mask is None else released * mask

