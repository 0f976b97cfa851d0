r"""Warnings that point at the user's line.

A warning issued while ``MCMC.run`` drives a kernel is raised many frames below the user's
code: inside pyro_dp, inside Pyro's runner (``pyro/infer/mcmc/api.py``), sometimes inside
torch. A fixed ``stacklevel`` cannot name the user's line from every path (``MCMC.run``, a
direct ``kernel.sample``, ``check_run``), so :func:`warn_user` attributes the warning to the
first frame outside pyro_dp's library, Pyro and torch — the line that called into them (for
pyro_dp's own demo, command line and experiments, their line: :data:`APPLICATIONS`) — as
``warnings.warn(..., skip_file_prefixes=...)`` does on Python 3.12+. On Python 3.9–3.11,
which have no ``skip_file_prefixes``, it walks the stack itself and issues the warning with
:func:`warnings.warn_explicit` at that frame (with that frame's module and warning registry,
so filters by module and "once per location" behave as with ``warnings.warn``).

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     warn_user("hello", UserWarning)
>>> caught[0].filename == __file__ or caught[0].filename.startswith("<doctest")
True
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Tuple, Type

import pyro
import torch

__all__ = ["warn_user", "INTERNAL_PREFIXES", "APPLICATIONS"]


def _package_dir(module) -> str:
    # the module's own spelling of its path: what the code objects' ``co_filename`` hold
    return os.path.dirname(module.__file__) + os.sep


_PACKAGE = os.path.dirname(__file__)

#: pyro_dp's own applications: the demo, the command line and the paper experiments. A warning
#: raised under them points at their line (the demo's ``mcmc.run``), as it would in a user's script.
APPLICATIONS = ("demo.py", "cli.py", "__main__.py", "experiments")


def _library_prefixes() -> Tuple[str, ...]:
    out = []
    for name in sorted(os.listdir(_PACKAGE)):
        if name in APPLICATIONS or name == "__pycache__":
            continue
        path = os.path.join(_PACKAGE, name)
        out.append(path + os.sep if os.path.isdir(path) else path)
    return tuple(out)


#: Source-file prefixes that are never "the user's line": pyro_dp's library modules (every
#: file and sub-package but :data:`APPLICATIONS`), Pyro and torch.
INTERNAL_PREFIXES: Tuple[str, ...] = _library_prefixes() + (_package_dir(pyro), _package_dir(torch))

#: whether ``warnings.warn`` takes ``skip_file_prefixes`` (Python 3.12+); tests switch it off
#: to exercise the fallback
_NATIVE = sys.version_info >= (3, 12)


def _internal(filename: str, prefixes: Tuple[str, ...]) -> bool:
    return filename.startswith(prefixes) or (
        # the import machinery, which ``warnings.warn`` also skips
        "importlib" in filename and "_bootstrap" in filename
    )


def warn_user(message, category: Type[Warning] = UserWarning, *, skip: Tuple[str, ...] = ()) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside pyro_dp,
    Pyro and torch (module docstring) and outside the source-file prefixes in ``skip`` (e.g.
    ArviZ's, for a warning issued from inside it). Every user-facing warning pyro_dp issues
    while a run is going goes through here."""
    prefixes = INTERNAL_PREFIXES + tuple(skip)
    if _NATIVE:
        warnings.warn(message, category, skip_file_prefixes=prefixes)
        return
    frame = sys._getframe(1)
    while frame.f_back is not None and _internal(frame.f_code.co_filename, prefixes):
        frame = frame.f_back
    module_globals = frame.f_globals
    registry = module_globals.setdefault("__warningregistry__", {})
    filename = frame.f_code.co_filename
    # module_globals lets the warning show the source line through the module's loader; code run
    # with `python -c` has no source file (its loader, BuiltinImporter, raises on get_source)
    warnings.warn_explicit(
        message, category, filename, frame.f_lineno,
        module=module_globals.get("__name__", "<string>"), registry=registry,
        module_globals=module_globals if os.path.isfile(filename) else None,
    )
