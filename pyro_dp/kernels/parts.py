"""How a kernel's parts are read under the kernel's own names.

A :class:`~pyro_dp.kernels.base.DPKernel` is built from parts that each hold their own state
(``kernel.privacy``, ``kernel.randomness``, ``kernel.likelihood_settings``, ``kernel.processes``,
``kernel.checkpoints``, ``kernel.chain``: docs/architecture.md). A few of their attributes are
also the kernel's public names (``kernel.seed``, ``kernel.temperature``) or what its step
functions draw from (``kernel._noise``); a :class:`PartAttribute` reads and writes them in the
part, so there is one copy of each.

>>> class Part: ...
>>> class Kernel:
...     seed = PartAttribute("part")
...     _noise = PartAttribute("part", "noise")
...     def __init__(self): self.part = Part()
>>> k = Kernel(); k.seed, k._noise = 7, "stream"; (k.part.seed, k.part.noise)
(7, 'stream')
"""
from __future__ import annotations

from typing import Optional

__all__ = ["PartAttribute"]


class PartAttribute:
    """The kernel's attribute ``name`` (default: its own name) of its part ``part`` (the
    kernel's attribute holding it), read and written there."""

    def __init__(self, part: str, name: Optional[str] = None):
        self.part, self.name = part, name

    def __set_name__(self, owner, name):
        self.name = self.name or name

    def __get__(self, kernel, owner=None):
        return self if kernel is None else getattr(getattr(kernel, self.part), self.name)

    def __set__(self, kernel, value):
        setattr(getattr(kernel, self.part), self.name, value)
