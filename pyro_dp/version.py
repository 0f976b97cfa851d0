"""The package version, in a module of its own: ``pyro_dp`` re-exports it, and the modules that print
it (``cli``, ``report``) import it from here, not from the package that imports them."""

__version__ = "0.1.0"
