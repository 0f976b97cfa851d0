r"""The data plate's ``subsample_size``: honoured as the batch size, or refused — never ignored.

A model written for SVI declares its minibatch on the data plate,
``pyro.plate("data", N, subsample_size=b)``. The declaration is a constant of the model's code,
public like ``N``, and pyro_dp reads it **data-free**, from the structure trace that finds the
data plate (:attr:`pyro_dp.likelihood.PrivateLikelihood.declared_subsample_size`, recorded by
:func:`pyro_dp.isolation.kernel_chooses_rows`); it never depends on a row's value.

What a kernel does with it (``docs/privacy.md``, "Model idioms"):

* **kernels that read a batch per iteration** (:class:`~pyro_dp.kernels.minibatch_penalty.DPMinibatchPenalty`,
  :class:`~pyro_dp.kernels.barker.DPBarker`, :class:`~pyro_dp.kernels.sgmcmc.DPSGLD`,
  :class:`~pyro_dp.kernels.sgmcmc.DPSGNHT`) take :math:`b` as ``batch_size`` when the user
  passes ``batch_size=None``; the privacy accounting is then that of batch size :math:`b`
  (the sampling rate :math:`q = b/N` of the Poisson-subsampled Gaussian, DP Barker's RDP curve
  of batch :math:`b`), because it is computed from ``batch_size`` after this step. A
  ``batch_size`` the user gives is used as given, with a warning if it differs from :math:`b`
  (an explicit argument wins, and the user is told);
* **every other kernel reads every row in each release** (or, for DP-Fast MH, a random batch
  whose size the algorithm sets) and refuses a declared :math:`b < N` with a
  ``ValueError`` that says what to do. A declared :math:`b \ge N` is no subsampling (Pyro's
  plate then uses every row too) and is accepted everywhere.

The row *choice* stays the kernel's (from the secret stream), never Pyro's.
"""
from __future__ import annotations

from typing import Optional

from ..warn import warn_user

__all__ = ["take_declared_subsample", "MINIBATCH_KERNELS"]

#: The kernels that take the plate's ``subsample_size`` as their batch size (named in refusals).
MINIBATCH_KERNELS = "DPMinibatchPenalty, DPBarker, DPSGLD or DPSGNHT"


def _declared(lik) -> Optional[int]:
    """The data plate's declared ``subsample_size`` when it subsamples (``b < N``), else ``None``."""
    b = getattr(lik, "declared_subsample_size", None)
    if b is None or int(b) >= lik.num_rows:
        return None
    return int(b)


def take_declared_subsample(kernel, *, first_setup: bool) -> None:
    """Apply the module's rule to ``kernel`` (called by ``DPKernel.setup`` right after the
    likelihood is built, before any noise is calibrated; data-free).

    Kernels that take it have ``takes_plate_batch = True`` and a ``batch_size`` attribute that
    is ``None`` when the user left it to the plate (``batch_size_given`` records which);
    others may set ``plate_batch_refusal`` to their own sentence.
    """
    b = _declared(kernel.lik)
    name, plate = type(kernel).__name__, kernel.lik.data_plate
    if not getattr(kernel, "takes_plate_batch", False):
        if b is None:
            return
        reason = getattr(kernel, "plate_batch_refusal", None) or (
            f"{name} uses every row in each release, so it cannot honour subsample_size={b}")
        raise ValueError(
            f"the data plate {plate!r} declares subsample_size={b} (of N = {kernel.lik.num_rows} rows), but {reason}. "
            f"Remove subsample_size from the plate to use {name}, or use a kernel that reads a batch per "
            f"iteration ({MINIBATCH_KERNELS}, e.g. DPMinibatchPenalty(model, batch_size=None, ...)): it takes "
            f"b = {b} as its batch size, with the privacy accounting of that batch size (docs/privacy.md)")
    if not kernel.batch_size_given:
        if b is None and getattr(kernel, "full_batch_default", False):
            kernel.batch_size = kernel.lik.num_rows  # the default path: every row, q = 1 (N public)
            return
        if b is None:
            raise ValueError(
                f"{name}: batch_size=None takes the batch size from the data plate's subsample_size, but the plate "
                f"{plate!r} declares none (or one of at least N = {kernel.lik.num_rows}): give batch_size=, or "
                f"declare pyro.plate({plate!r}, N, subsample_size=b)")
        kernel.batch_size = kernel.check_plate_batch_size(b)
        return
    if b is not None and b != kernel.batch_size and first_setup:
        warn_user(
            f"{name}: batch_size={kernel.batch_size} is used (it is accounted for), not the data plate {plate!r}'s "
            f"subsample_size={b}. Pass batch_size=None to use the plate's, or make them agree", UserWarning)
