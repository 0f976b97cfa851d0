"""Command line: ``pyro-dp demo`` (also ``python -m pyro_dp ...``).

The paper reproductions are not part of the installed package (issue #63): they live in the
repository's ``experiments/`` folder and run from a checkout with ``python3 -m experiments NAME``.
``pyro-dp experiment ...`` says so and exits with status 2 rather than running them through a shim:
a shim would have to find a checkout from the installed package, and the installed package imports
no reproduction code.

>>> main(["--version"])  # doctest: +ELLIPSIS
pyro_dp ...
0
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .demo import run_demo
from .version import __version__

__all__ = ["main"]

#: What ``pyro-dp experiment ...`` prints (to stderr, exit status 2): the subcommand's new home.
_EXPERIMENT_MOVED = (
    "pyro-dp experiment: the paper reproductions are no longer part of the installed package.\n"
    "Run them from the root of a pyro_dp repository checkout:\n"
    "    python3 -m experiments NAME [--quick] [--out DIR]\n"
    "(python3 -m experiments --help lists the names; docs/results.md has every figure's command)"
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyro-dp", description="Differentially private MCMC for Pyro models.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    sub = p.add_subparsers(dest="command")
    d = sub.add_parser("demo", help="private vs non-private Bayesian logistic regression on built-in data")
    d.add_argument("--n", type=int, default=50000, help="number of rows (default 50000)")
    d.add_argument("--epsilon", type=float, default=4.0, help="privacy budget epsilon (default 4)")
    d.add_argument("--delta", type=float, default=1e-5, help="privacy budget delta (default 1e-5)")
    d.add_argument("--num-samples", type=int, default=2000)
    d.add_argument("--warmup-steps", type=int, default=1000)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    d.add_argument("--no-reference", action="store_true", help="skip the non-private NUTS reference")
    d.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (default 1: fastest for the demo's small per-iteration work, "
                        "above all on a shared machine; 0 keeps torch's default of one per core)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["experiment"]:  # the subcommand before issue #63
        print(_EXPERIMENT_MOVED, file=sys.stderr)
        return 2
    args = _parser().parse_args(argv)
    if args.version:
        print(f"pyro_dp {__version__}")
        return 0
    if args.command == "demo":
        for name in ("n", "num_samples", "warmup_steps", "threads"):
            if getattr(args, name) < (1 if name == "n" else 0):
                _parser().error(f"--{name.replace('_', '-')} must be positive")
        run_demo(
            n=args.n,
            epsilon=args.epsilon,
            delta=args.delta,
            num_samples=args.num_samples,
            warmup_steps=args.warmup_steps,
            seed=args.seed,
            device=args.device,
            reference=not args.no_reference,
            threads=args.threads,
        )
        return 0
    _parser().print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
