r"""An ArviZ ``InferenceData`` that may be published — and a warning on the one that may not.

``az.from_pyro(mcmc)`` works with pyro_dp kernels (they report an empty ``"divergences"``
record per chain), but it copies the model's **raw observed data** into
``idata.observed_data`` — the private rows, byte for byte — and can add pointwise
log-likelihoods, which are per-row functions of the data. :func:`to_arviz` is the way to
export a pyro_dp run: it builds the ``InferenceData`` from released quantities only (the
posterior draws, per-chain sample statistics that are post-processing of releases) and puts
the privacy statement in ``attrs``, with the whole :func:`~pyro_dp.privacy_report` as JSON.

**The guard on** ``az.from_pyro``. Because ``az.from_pyro`` is the idiom everyone uses,
``import pyro_dp`` arranges that, when ArviZ's Pyro converter is handed an ``MCMC`` run whose
kernel is a pyro_dp kernel and the result would hold the raw rows (observed data) or per-row
log-likelihoods, it warns with :class:`PrivateDataWarning` (at the caller's line) before
converting, and marks the result: ``idata.attrs["pyro_dp_private_data"]`` says that the
object holds private data not covered by ε, so the mark travels with a saved file.

It warns rather than refuses, deliberately: the data holder may legitimately use ArviZ's full
conversion for their own checks (posterior predictive checks against the observed data);
the rows leak only when the object is published, which pyro_dp cannot see. Make it a refusal
with ``warnings.simplefilter("error", pyro_dp.PrivateDataWarning)`` (the warning is issued
before anything is converted), or silence it with ``"ignore"``. Runs of other kernels (Pyro's
NUTS, ...) are untouched.

How, minimally: ArviZ is never imported by pyro_dp (it is an optional dependency that takes
a second to import). If ``arviz.data.io_pyro`` is already imported when pyro_dp is, its
``PyroConverter.to_inference_data`` is wrapped at once; otherwise one finder on
``sys.meta_path`` waits for that module's import, wraps the method right after the module
has run, and removes itself. Every path to the converter (``az.from_pyro``,
``arviz.data.io_pyro.from_pyro``, ``from arviz import from_pyro``) goes through that method.
Tested with ArviZ 0.23 (``PyroConverter``); a version without that class is left alone.
"""
from __future__ import annotations

import os
import sys
from typing import Optional

import numpy as np

from .kernels.base import NONPRIVATE_PREFIX, DPKernel
from .report import privacy_report
from .run import get_ledger
from .warn import warn_user

__all__ = ["to_arviz", "PrivateDataWarning"]

# per-chain diagnostics that are post-processing of released values (see DPKernel.diagnostics)
_STATS = ("acceptance rate", "private iterations", "budget exhausted", "epsilon", "step size", "mean batch size")


def to_arviz(mcmc, *, delta: Optional[float] = None):
    r"""The publishable ``arviz.InferenceData`` of a pyro_dp ``MCMC`` run.

    Groups: ``posterior`` (draws per chain, constrained) and ``sample_stats`` (per-chain
    acceptance rate, private iterations, whether the budget ran out, the chain's own ε, and
    DP-HMC's step size or DP-Fast MH's mean batch size where present, each repeated over the
    draws). ``attrs``: ``epsilon`` (every release of the kernel object, all chains and runs),
    ``delta``, ``accountant``, ``relation``, ``kernel``, ``private_iterations`` per chain and
    ``num_releases``, and ``privacy_report``: the whole :func:`~pyro_dp.privacy_report` as
    JSON (``pyro_dp.PrivacyReport.from_json(idata.attrs["privacy_report"])`` reads it back); and
    ``approximation`` where the run was the one-release mode (what its draws approximate).
    **No** ``observed_data``, ``constant_data`` or ``log_likelihood`` group: they are
    functions of the raw data. Keys computed from raw data (``"non-private ..."``) are never
    included. This, not ``az.from_pyro``, is the way to export a pyro_dp run (module docstring).

    :param mcmc: a :class:`pyro.infer.MCMC` run with a pyro_dp kernel.
    :param float delta: δ of the reported ε (default: the kernel's ``reference_delta``).
    :raises ImportError: without ArviZ (``pip install "arviz<0.24"``).
    """
    try:
        import arviz as az
    except ImportError as e:  # pragma: no cover - exercised only without arviz
        raise ImportError('pyro_dp.to_arviz needs ArviZ: pip install "arviz>=0.17,<0.24"') from e
    ledger = get_ledger(mcmc)  # refuses a run without a pyro_dp kernel
    kernel = mcmc.kernel
    delta = kernel.reference_delta if delta is None else float(delta)
    report = privacy_report(mcmc, delta=delta)
    samples = {k: v.detach().cpu().numpy() for k, v in mcmc.get_samples(group_by_chain=True).items()}
    num_chains, num_draws = next(iter(samples.values())).shape[:2]
    # kernel.diagnostics() of each chain of the last run (pyro-ppl 1.9): MCMC.diagnostics() merges them
    # with its own statistics and has no public per-chain list
    per_chain = mcmc._diagnostics  # architecture: private-read (pyro's MCMC, third-party)
    stats = {}
    for key in _STATS:
        if all(key in d for d in per_chain):
            vals = np.asarray([float(d[key]) for d in per_chain])
            stats[key.replace(" ", "_")] = np.repeat(vals[:, None], num_draws, axis=1)
    assert not any(k.startswith(NONPRIVATE_PREFIX.strip()) for k in stats)
    attrs = {
        "epsilon": float(report.epsilon),  # pyro_dp.get_epsilon(mcmc, delta)
        "delta": delta,
        "accountant": str(kernel.accountant),
        "relation": str(kernel.relation),
        "kernel": type(kernel).__name__,
        "private_iterations": [int(d["private iterations"]) for d in per_chain],
        "num_releases": int(ledger.num_releases),
        "privacy": "posterior draws and sample_stats are post-processing of the DP releases; no data included",
        "privacy_report": report.to_json(),
    }
    if report.approximation:  # the one-release mode (issue 62): the draws approximate the posterior
        attrs["approximation"] = report.approximation
    return az.from_dict(posterior=samples, sample_stats=stats or None, attrs=attrs)


# --------------------------------------------------------------------------- az.from_pyro


class PrivateDataWarning(UserWarning):
    """An object about to be built holds the raw private data (or per-row functions of it),
    which no ε covers: e.g. ``az.from_pyro`` on a pyro_dp run (use :func:`pyro_dp.to_arviz`).
    ``warnings.simplefilter("error", pyro_dp.PrivateDataWarning)`` makes it a refusal.

    >>> issubclass(PrivateDataWarning, UserWarning)
    True
    """


_ARVIZ_PYRO = "arviz.data.io_pyro"
_MARK = "pyro_dp_private_data"


def _is_private_run(posterior) -> bool:
    return isinstance(getattr(posterior, "kernel", None), DPKernel)


def _guard_converter(module) -> None:
    """Wrap ``module.PyroConverter.to_inference_data`` (once): on a pyro_dp run whose result
    holds observed data or per-row log-likelihoods, warn before converting and mark the result."""
    cls = getattr(module, "PyroConverter", None)
    original = getattr(cls, "to_inference_data", None)
    if original is None or getattr(original, "_pyro_dp_guard", False):
        return
    # ArviZ's own frames are skipped too: the warning names the line that called az.from_pyro
    arviz_dir = os.path.dirname(os.path.dirname(module.__file__)) + os.sep

    def to_inference_data(self, *args, **kwargs):
        posterior = getattr(self, "posterior", None)
        private = _is_private_run(posterior) and (bool(getattr(self, "observations", None))
                                                  or bool(getattr(self, "log_likelihood", False)))
        if private:
            warn_user(
                "arviz.from_pyro is converting a pyro_dp run: its observed_data group is the RAW PRIVATE DATA "
                "(every row, byte for byte) and its log_likelihood group (if any) holds one value per row; "
                "neither is covered by epsilon. Do not publish or share this InferenceData: use "
                "pyro_dp.to_arviz(mcmc), which holds only released quantities and the privacy report "
                "(docs/privacy.md, \"Publishing with ArviZ\")", PrivateDataWarning, skip=(arviz_dir,))
        idata = original(self, *args, **kwargs)
        if private:
            try:
                idata.attrs[_MARK] = ("holds the raw private data (observed_data) and/or per-row log-likelihoods, "
                                      "not covered by epsilon: do not publish; use pyro_dp.to_arviz")
            except (AttributeError, TypeError):  # pragma: no cover - an InferenceData without attrs
                pass
        return idata

    to_inference_data._pyro_dp_guard = True
    to_inference_data.__wrapped__ = original
    to_inference_data.__doc__ = original.__doc__
    cls.to_inference_data = to_inference_data


class _GuardingLoader:
    """The loader of ``arviz.data.io_pyro``, wrapped: runs the module, then guards it."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _remove_finder()
        _guard_converter(module)

    def __getattr__(self, name):  # get_source, get_resource_reader, ...: the real loader's
        return getattr(self._loader, name)


class _ArvizFinder:
    """A ``sys.meta_path`` finder that only wraps the loader of ``arviz.data.io_pyro``."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _ARVIZ_PYRO:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # an unusual loader: import as usual, unguarded
        spec.loader = _GuardingLoader(spec.loader)
        return spec


_FINDER = _ArvizFinder()


def _remove_finder() -> None:
    while _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def install_from_pyro_guard() -> None:
    """Guard ArviZ's Pyro converter now if it is imported, else when it is (module docstring)."""
    module = sys.modules.get(_ARVIZ_PYRO)
    if module is not None:
        _guard_converter(module)
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
