r"""The model's structure from a trace: the data plate enclosing every observed site, and the
latent and observed site names (:func:`find_data_plate`); the latents' transforms, shapes and flat
layout, the chain's dtype and device and the prototype draw (:func:`parse_trace`). Read from a data-free trace
(:class:`~pyro_dp.likelihood.PrivateLikelihood` traces on fake tensors or stand-ins), so no data
value decides a shape. A pure function of the trace, kept apart from :mod:`pyro_dp.likelihood`
so that the likelihood holds evaluation, not parsing.
"""
from __future__ import annotations

import warnings
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import torch
from pyro.poutine.subsample_messenger import _Subsample
from torch.distributions import biject_to

from .isolation import DECLARED_SUBSAMPLE

__all__ = ["ModelStructure", "batch_shape", "find_data_plate", "parse_trace"]


def batch_shape(site) -> torch.Size:
    """Batch shape of an observed site's value (its shape without the event dims)."""
    value = site["value"]
    return value.shape[: value.dim() - site["fn"].event_dim]


def find_data_plate(trace, data_plate):
    """``(name, frame, latents, observed)`` of a model trace: the plate enclosing every observed
    site (or the one named), and the latent and observed site names."""
    latents, observed, plates = [], [], {}
    for name, site in trace.nodes.items():
        if site["type"] == "param":
            raise ValueError(
                f"the model has a pyro.param site {name!r}: a parameter fitted on the private data would "
                "be released without accounting. Pass public values as constants (or model arguments), "
                "or make it a latent with pyro.sample and a prior"
            )
        if site["type"] != "sample":
            continue
        fn = site["fn"]
        if isinstance(fn, _Subsample):
            plates[name] = fn
            continue
        if site["infer"].get("_deterministic"):
            continue  # pyro.deterministic: a function of the latents, not data
        if site["is_observed"]:
            observed.append(name)
        else:
            latents.append(name)
    if not observed:
        raise ValueError("the model has no observed sample site (pass the data with obs=...)")
    if not latents:
        raise ValueError("the model has no latent sample site to infer")

    def frames(name):
        return {f.name: f for f in trace.nodes[name]["cond_indep_stack"]}

    common = None
    for name in observed:
        fr = set(frames(name))
        common = fr if common is None else common & fr
    if data_plate is not None:
        if data_plate not in plates:
            raise ValueError(f"data_plate={data_plate!r} is not a plate of the model (plates: {sorted(plates)})")
        for name in observed:
            if data_plate not in frames(name):
                raise ValueError(f"observed site {name!r} is outside the data plate {data_plate!r}")
    else:
        for name in observed:
            if not frames(name):
                raise ValueError(
                    f"observed site {name!r} is not inside any pyro.plate; put every observed "
                    "site inside one plate over the data rows"
                )
        if not common:
            raise ValueError(
                f"no single plate encloses every observed site ({observed}); "
                "put them in one plate over the rows or pass data_plate="
            )
        if len(common) > 1:
            raise ValueError(
                f"more than one plate encloses every observed site ({sorted(common)}); "
                "choose one with data_plate="
            )
        data_plate = next(iter(common))
    frame = frames(observed[0])[data_plate]
    if not frame.vectorized:
        raise ValueError(f"plate {data_plate!r} is sequential; use a vectorised pyro.plate")
    return data_plate, frame, latents, observed


class ModelStructure(NamedTuple):
    """What :func:`parse_trace` reads from a data-free trace (the fields
    :class:`~pyro_dp.likelihood.PrivateLikelihood` keeps under the same names)."""

    data_plate: str
    num_rows: int
    plate_dim: int
    #: the data plate's declared ``subsample_size`` (SVI's idiom), or ``None``
    declared_subsample_size: Optional[int]
    #: latent sites inside a plate other than the data plate (group effects)
    plated_latents: Tuple[str, ...]
    latent_names: Tuple[str, ...]
    observed_names: Tuple[str, ...]
    transforms: Dict[str, object]
    shapes: Dict[str, torch.Size]
    sizes: Dict[str, int]
    dim: int
    dtype: torch.dtype
    device: torch.device
    prototype_params: Dict[str, torch.Tensor]


def parse_trace(trace, data_plate: Optional[str], transforms: Optional[dict], leaves: Sequence) -> ModelStructure:
    """The model's structure from a data-free ``trace`` (a prior draw on stand-in data): the data
    plate and ``N``, the privacy unit's warning with nested plates, the refusals of per-row and
    discrete latents, scaled or mis-shaped observed sites, and the latents' transforms (``transforms``
    or ``biject_to(support).inv``, as Pyro's HMC), shapes and flat layout. The chain's dtype is the
    latents' promoted with the floating ``leaves`` (the model's arguments: float64 data make a
    float64 chain); its device the latents'. Reads shapes, dtypes and the prior draw only."""
    data_plate, frame, latents, observed = find_data_plate(trace, data_plate)

    def frames(name):
        return {f.name: f for f in trace.nodes[name]["cond_indep_stack"]}

    num_rows, plate_dim = int(frame.size), frame.dim
    # The privacy unit with nested plates: one index of the data plate, across every other
    # plate an observed site sits in (docs/privacy.md, "The privacy unit").
    others = sorted({f for name in observed for f in frames(name)} - {data_plate})
    if others:
        warnings.warn(
            f"the observed sites sit in plates {others} besides the data plate {data_plate!r}: the privacy "
            f"unit (one 'row') is one index of plate {data_plate!r} across all of {others}, i.e. everything "
            f"observed at that index. If one person's data are one cell, not one {data_plate!r} slice, the "
            "guarantee does not protect them as stated: choose the data plate that indexes people",
            UserWarning,
            stacklevel=4,  # parse_trace <- PrivateLikelihood.__init__ <- the kernel's set-up <- the user's call
        )

    for name in latents:
        site = trace.nodes[name]
        if data_plate in frames(name):
            if name.endswith("_unobserved"):
                raise ValueError(
                    f"latent site {name!r} is inside the data plate {data_plate!r}: it looks like pyro.sample(..., "
                    "obs_mask=...), which makes the missing values per-row latents, not supported by DP MCMC. "
                    "Drop the missing observations from the likelihood instead: wrap the site in "
                    "poutine.mask(mask=observed_mask) and pass obs= with any finite fill value"
                )
            raise ValueError(
                f"latent site {name!r} is inside the data plate {data_plate!r}: per-row "
                "(local) latents are not supported by DP MCMC (for missing observations use poutine.mask)"
            )
        fn = site["fn"]
        if fn.has_enumerate_support or getattr(fn.support, "is_discrete", False):
            raise TypeError(f"latent site {name!r} is discrete; pyro_dp kernels need continuous latents")
    for name in observed:
        site = trace.nodes[name]
        if site["scale"] != 1.0:
            raise ValueError(
                f"observed site {name!r} is scaled (poutine.scale); use the kernel's "
                "temperature= instead so that sensitivities stay correct"
            )
        batch = batch_shape(site)
        if len(batch) < -plate_dim or batch[plate_dim] != num_rows:
            raise ValueError(
                f"observed site {name!r} has batch shape {tuple(batch)}, which does not match "
                f"plate {data_plate!r} of size {num_rows} at dim {plate_dim}"
            )

    transforms = dict(transforms or {})
    tfs, shapes, sizes, unconstrained = {}, {}, {}, {}
    for name in latents:
        site = trace.nodes[name]
        tf = transforms.get(name, biject_to(site["fn"].support).inv)
        tfs[name] = tf
        u = tf(site["value"].detach())
        unconstrained[name] = u
        shapes[name] = u.shape
        sizes[name] = u.numel()
    # dtype: the latents' promoted with the data's (float64 data => float64 chain); device: the latents'
    dtype = unconstrained[latents[0]].dtype
    for t in list(unconstrained.values()) + [x for x in leaves if torch.is_tensor(x)]:
        if t.is_floating_point():
            dtype = torch.promote_types(dtype, t.dtype)
    return ModelStructure(
        data_plate=data_plate, num_rows=num_rows, plate_dim=plate_dim,
        declared_subsample_size=DECLARED_SUBSAMPLE.get(data_plate),
        plated_latents=tuple(n for n in latents if set(frames(n)) - {data_plate}),
        latent_names=tuple(latents), observed_names=tuple(observed), transforms=tfs, shapes=shapes, sizes=sizes,
        dim=sum(sizes.values()), dtype=dtype, device=unconstrained[latents[0]].device,
        prototype_params={k: v.to(dtype) for k, v in unconstrained.items()})
