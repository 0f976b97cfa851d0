r"""The model's structure from a trace: the data plate enclosing every observed site, and the
latent and observed site names (:func:`find_data_plate`). Read from a data-free trace
(:class:`~pyro_dp.likelihood.PrivateLikelihood` traces on fake tensors or stand-ins), so no data
value decides a shape. Split out of :mod:`pyro_dp.likelihood` (no file over 700 lines).
"""
from __future__ import annotations

from pyro.poutine.subsample_messenger import _Subsample

__all__ = ["find_data_plate"]


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
