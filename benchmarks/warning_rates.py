r"""Issue #40, acceptance 4: how often the warnings are right, counted from the JSON lines of
``benchmarks/unscaled_glms.py`` (one run per line: ``err`` the worst |Δmean| / NUTS sd, ``rmin``
and ``rmax`` the range of sd / NUTS sd, ``warned`` whether a :class:`pyro_dp.SamplingWarning`
fired, ``ess`` the smallest effective sample size estimate).

Each run falls in one band (the default suite's, :mod:`default_suite`): **within 0.5 sd** (every
mean within 0.5 NUTS sd; the acceptance allows at most a fifth of these to warn), **beyond 1 sd**
(some mean beyond 1 sd, or some sd off by more than a factor 2: every one must warn), or
**between**. ``--min-ess X`` also reads each run against a hypothetical threshold: a run counts
as warned when it warned or its smallest ESS estimate is below ``X`` (how ``docs/tuning.md``
read older runs against the margined threshold of 2026-11-29; the check itself reads the
unconstrained coordinates per chain, so this is an approximation for constrained sites).

Run: ``python benchmarks/warning_rates.py RUNS.jsonl [--min-ess 14.3]``, e.g. after
``for s in 0 1 2 3; do python benchmarks/unscaled_glms.py linear DPHMC 2 $s; done > RUNS.jsonl``.
"""
import argparse
import json
import os
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from default_suite import MEAN_TOL, WRONG_MEAN, WRONG_SD  # noqa: E402 (the suite's bands: 0.5 sd, 1 sd, factor 2)

BANDS = ("within 0.5 sd", "between", "beyond 1 sd")


def band(run: dict) -> str:
    """The run's band (module doc; :func:`default_suite.wrong`'s and :data:`default_suite.MEAN_TOL`'s
    lines on a run's worst mean error and sd-ratio range); a NaN error or ratio is beyond 1 sd."""
    err, lo, hi = (float(run[k]) for k in ("err", "rmin", "rmax"))
    if not (err <= WRONG_MEAN and 1.0 / WRONG_SD <= lo and hi <= WRONG_SD):
        return "beyond 1 sd"
    return "within 0.5 sd" if err <= MEAN_TOL else "between"


def warned(run: dict, min_ess=None) -> bool:
    """Whether the run warned, or (``min_ess``) would have under that ESS threshold."""
    return bool(run["warned"]) or (min_ess is not None and not float(run.get("ess", float("nan"))) >= min_ess)


def tally(runs, min_ess=None) -> dict:
    """``{kernel: {band: [runs, warned]}}`` and the total under ``"all"``."""
    out = defaultdict(lambda: {b: [0, 0] for b in BANDS})
    for run in runs:
        b, w = band(run), warned(run, min_ess)
        for key in (run.get("kernel", "?"), "all"):
            out[key][b][0] += 1
            out[key][b][1] += int(w)
    return dict(out)


def verdict(counts: dict) -> str:
    """Acceptance 4 on one tally row: at most a fifth of the runs within 0.5 sd warn, and every
    run beyond 1 sd warns."""
    n_in, w_in = counts["within 0.5 sd"]
    n_out, w_out = counts["beyond 1 sd"]
    ok = w_in <= 0.2 * n_in and w_out == n_out
    return "holds" if ok else "FAILS"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", help="a file of JSON lines from benchmarks/unscaled_glms.py")
    p.add_argument("--min-ess", type=float, default=None, help="also count runs whose smallest ESS is below this")
    a = p.parse_args(argv)
    with open(a.runs) as f:
        runs = [json.loads(line) for line in f if line.strip().startswith("{")]
    rows = tally(runs, a.min_ess)
    print(f"{'kernel':12s} " + " ".join(f"{b + ' (warned/runs)':>28s}" for b in BANDS) + "  acceptance 4")
    for kernel, counts in sorted(rows.items(), key=lambda kv: kv[0] == "all"):
        cells = " ".join(f"{counts[b][1]:>20d} / {counts[b][0]:<5d}" for b in BANDS)
        print(f"{kernel:12s} {cells}  {verdict(counts)}")


if __name__ == "__main__":
    main()
