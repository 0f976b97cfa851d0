r"""The one hook through which the default path drives a kernel (issue 63).

The default path (:mod:`pyro_dp.default_path`: the private tuning, whitening, centring, private
start and forecasts that set what a user left out) is a layer *above* the kernels: it imports
them and builds and drives them through their public constructor arguments; no module of
:mod:`pyro_dp.kernels` imports it (``tests/test_architecture.py``). A kernel whose settings
are left out asks for them through the object :func:`default_path` returns, a
:class:`DefaultPath`, at five points of its life:

=======================  ==========================================================================
call                     when
=======================  ==========================================================================
``tuner(kernel)``        ``__init__`` of a kernel with settings left out (``kernel.auto_tuned``):
                         the private start that will tune them (its ``init``)
``configure(kernel)``    ``setup``, before the kernel calibrates its noise: the tuner learns the
                         budget (data-free)
``calibrated(kernel,``   ``setup``, after the calibration: the ratio noise the tuner's clip
``ratio_nm)``            quantile balances (data-free)
``take_tuning(kernel,``  a chain's first iteration, after the private start ran: the settings its
``...)``                 result sets on the kernel (post-processing of its releases)
``gradients_pay(``       DP-HMC's default path, before its calibration: whether its gradient
``kernel)``              releases are forecast to pay (data-free)
=======================  ==========================================================================

:mod:`pyro_dp.default_path` registers its implementation when it is imported
(:func:`register_default_path`); ``import pyro_dp`` imports it, and so does any
``from pyro_dp.kernels import ...`` (the parent package is imported first). The base class
below is what a kernel gets with none registered: every setting given runs as before; a
setting left out is refused with its cause. This is the Opacus pattern of
``make_private_with_epsilon`` (the settings come from a function above the optimiser, which
knows nothing of them) and BlackJAX's ``window_adaptation`` (the adaptation drives a kernel
it is handed; ``mcmc/hmc.py`` knows nothing of it).

>>> class Counting(DefaultPath):
...     calls = 0
...     def configure(self, kernel):
...         Counting.calls += 1
>>> previous = register_default_path(Counting())
>>> default_path().configure(None); Counting.calls
1
>>> register_default_path(previous) is not None
True
"""
from __future__ import annotations

import functools
from typing import Optional

__all__ = ["DefaultPath", "default_path", "register_default_path", "check_initialiser", "check_inference", "INFERENCE",
           "route_through", "ROUTED"]

#: The values of every kernel's ``inference=`` (:func:`check_inference`): ``"auto"`` (the default
#: path decides, data-free, before any release: :func:`pyro_dp.default_path.inference.choose_inference`),
#: ``"iterative"`` (the kernel's own chain, always) and ``"one_release"`` (the default path's
#: one-release mode, :class:`~pyro_dp.default_path.noise_aware.OneReleaseMode`).
INFERENCE = ("auto", "iterative", "one_release")

#: What a part attached by :func:`route_through` takes over from the kernel: the kernel's name
#: and the part's method (called with the kernel first).
ROUTED = (("_calibrate", "calibrate"), ("releases", "releases"), ("_init_state", "init_state"), ("_step", "step"),
          ("diagnostics", "diagnostics"), ("logging", "logging"))


class DefaultPath:
    """What a kernel asks of the default path (module docstring); this base class is the answer
    when none is registered. ``names``: the public names the default path adds to
    :mod:`pyro_dp.kernels` (``DPAutoTune``, ``DPGradientInit``), for the imports written
    before they moved."""

    names: dict = {}

    def tuner(self, kernel):
        """The private start (``init``) that tunes the settings ``kernel.auto_tuned`` left out."""
        names = ", ".join(kernel.auto_tuned)
        raise ValueError(f"{type(kernel).__name__}: {names} left out are tuned privately by the default path, "
                         f"which is not loaded: import pyro_dp (or pyro_dp.default_path), or give {names}")

    def configure(self, kernel) -> None:
        """At set-up, before the kernel calibrates its noise: the tuner learns the budget."""

    def calibrated(self, kernel, ratio_noise_multiplier: Optional[float]) -> None:
        """At set-up, after the kernel calibrated its noise (``ratio_noise_multiplier``: its
        ratio release's, ``None`` where no ratio clip is tuned)."""

    def take_tuning(self, kernel, *, first_chain: bool, ratio_noise_multiplier: Optional[float]) -> None:
        """At a chain's first iteration, after ``kernel.init`` ran: the settings its result sets
        (``first_chain``: whether warnings said once per run are said now)."""

    def gradients_pay(self, kernel) -> bool:
        """DP-HMC's default path: whether its gradient releases are forecast to pay (else a walk)."""
        return True


_REGISTERED = [DefaultPath()]


def default_path() -> DefaultPath:
    """The registered :class:`DefaultPath` (the base class's answers when none is)."""
    return _REGISTERED[0]


def register_default_path(path: DefaultPath) -> DefaultPath:
    """Make ``path`` the default path every kernel asks; returns the one it replaces."""
    if not isinstance(path, DefaultPath):
        raise TypeError(f"the default path must be a DefaultPath, got {type(path).__name__}")
    previous, _REGISTERED[0] = _REGISTERED[0], path
    return previous


def check_initialiser(init, non_private: bool):
    """A kernel's ``init=`` (its private start, e.g. a
    :class:`~pyro_dp.default_path.private_init.DPGradientInit` or the default path's tuner),
    checked when the kernel is built: ``None``, or an object with ``run`` and ``events``, whose
    ``noise_multiplier`` is not 0 outside the ``non_private`` test mode.

    >>> check_initialiser(None, non_private=False) is None
    True
    >>> check_initialiser(object(), non_private=False)
    Traceback (most recent call last):
    ...
    TypeError: init must be a private initialiser such as DPGradientInit, got <object object at ...>
    """
    if init is not None and not (callable(getattr(init, "run", None)) and callable(getattr(init, "events", None))):
        raise TypeError(f"init must be a private initialiser such as DPGradientInit, got {init!r}")
    if init is not None and getattr(init, "noise_multiplier", None) == 0 and not non_private:
        raise ValueError("init with noise_multiplier=0 is only allowed with non_private=True")
    return init


def check_inference(inference) -> str:
    """A kernel's ``inference=`` (:data:`INFERENCE`), checked when the kernel is built.

    >>> check_inference("auto")
    'auto'
    >>> check_inference("one-release")
    Traceback (most recent call last):
    ...
    ValueError: inference must be one of 'auto', 'iterative', 'one_release', got 'one-release'
    """
    if not isinstance(inference, str) or inference not in INFERENCE:
        raise ValueError(f"inference must be one of {', '.join(map(repr, INFERENCE))}, got {inference!r}")
    return inference


def route_through(kernel, part) -> None:
    """Attach ``part`` to ``kernel`` as ``kernel.one_release`` and route the kernel's
    :data:`ROUTED` calls through it: ``kernel._step(state)`` becomes ``part.step(kernel, state)``,
    and so on (instance attributes, which the kernel's lifecycle reads before its class's
    methods). Decision (issue 62): the one-release computation is a *part* that any kernel of the
    default path can run instead of its own chain, and :class:`~pyro_dp.default_path.noise_aware.DPNoiseAware`
    is a kernel that runs nothing else; routing here, outside the kernel classes, keeps their
    code as it is (issue 63's size budget) and their chains unchanged where no part is attached.
    The part must pickle (it travels with the kernel into ``MCMC`` workers); its methods are
    called with the kernel, so it holds no reference to it."""
    kernel.one_release = part
    for name, method in ROUTED:
        setattr(kernel, name, functools.partial(getattr(part, method), kernel))
