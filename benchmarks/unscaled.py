r"""Covariates on their own scales (#40): logistic regression, d = 3, features with correlation 0.8
in the unit ball, then multiplied by column scales 1, 30 and 1 000 (``SCALED=1`` in the
environment: scales 1, 1, 1), N = 5·10⁴, the card's line with ``epsilon=`` only; against the
Laplace reference, as ``benchmarks/whitening.py`` (whose data set ``unscaled`` this is, and whose
modes it takes: ``plain``, ``scale``, ``private``, ``none``, ``oracle``). Results: ``docs/tuning.md``,
"Columns on their own scales".

Run: ``python benchmarks/unscaled.py EPS KERNEL MODE SEED`` (e.g. ``8 DPPenalty plain 0``).
"""
import os
import runpy
import sys

args = sys.argv[1:5]
args += ["8", "DPPenalty", "plain", "0"][len(args):]  # whitening.py's defaults, so the data set lands fifth
sys.argv = sys.argv[:1] + args + ["scaled3" if os.environ.get("SCALED") else "unscaled"]
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "whitening.py"), run_name="__main__")
