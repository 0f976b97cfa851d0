r"""The claim tables of ``docs/results.md``, recomputed from the shipped CSVs (issue #41).

Run ``python benchmarks/claims.py`` (a second, no torch) to print every claim table as markdown;
``python benchmarks/claims.py --check`` exits non-zero when a table in ``docs/results.md`` is not
what the shipped CSVs in ``docs/_static/results/`` give (``tests/test_claims.py`` runs that check).

**Beyond the claim tables** (issue #60), ``--check`` also compares: the generated number tables of
:data:`NUMBER_TABLES` (the same ``<!-- claims:NAME -->`` markers); every ``z = …`` quoted in a
section's prose against that section's generated tables (:func:`prose_z_problems`); every cell of
the hand-written MMD tables of :data:`VALUE_TABLE_CSVS` (:func:`value_table_problems`), of their
superseded n = 10⁴ runs (:func:`n1e4_table_problems`, :func:`fig63_n1e4_problems`) and of Zhang &
Zhang's Figs 1 and 3 (:func:`fig1_value_table_problems`, :func:`fig3_value_table_problems`,
:func:`fig3_k_value_table_problems`); and every
``mean ± s.e.`` quoted in the prose of the :data:`PM_CHECKED` sections (:func:`prose_pm_problems`).
Every other number of the page outside the generated tables (prose, headings, hand-written tables)
is sorted by :func:`prose_numbers` into *checked* (a value of a recomputed table of its section, a
value printed in a CSV its section names, or a number of a :data:`PROSE_QUOTES` sentence computed
from the CSVs), *exempt* (not a measurement: the rules of :data:`PROSE_EXEMPT`, one table with
the reason for each) or *untraced* (listed per section in :data:`UNTRACED_FILE`); an unlisted
untraced number, or a listed one that is gone, fails ``--check`` (:func:`prose_number_problems`),
and ``--prose`` prints the sorting. A setting is exempt as a *code setting* only through
:data:`CODE_SETTINGS`, each phrase checked against a snippet of the code that runs it
(:func:`code_setting_problems`). Every section that prints ε in a table must state its
neighbouring relation, and one whose tables print ε under add/remove and substitution must say
that it mixes the two (:func:`relation_problems`, acceptance 2 of issue #60). Where a second set
of seeds exists (:data:`REPLICATION`), the verdict column follows :func:`replicated_verdict`.

**The test behind every row.** A claim "A is lower than B" (MMD, an error, a clipped fraction) is
judged on the *paired differences* ``d_r = metric_B(r) − metric_A(r)`` over the repeats ``r`` that
both cells ran (the same repeat index: the same seed and, for the thesis grids, the same data). We
report ``z = mean(d) / s.e.(d)`` with ``s.e.(d) = sd(d)/√n`` and the two-sided p of the paired
t-test (Student t with n − 1 degrees of freedom; at 20 repeats ``|z| ≥ 2.09`` is ``p < 0.05``).
Positive z favours the claim. A difference is *detected* when ``p < 0.05``; each row is a separate
test (no correction for the many rows, so read a lone ``p ≈ 0.04`` as weak). At 2 repeats
(Zhang & Zhang's Fig. 1 and the p² check, as shipped) the t-test has one
degree of freedom and detects only ``|z| ≥ 12.7``: such rows are descriptive, and say so.

Where a table has fewer than 5 repeats it adds a *sign test* pooled over its levels: the number of
pairs (every level and repeat, each pair from its own chains) with ``d > 0`` and the two-sided
binomial p. Six of six pairs in one direction give p = 0.031.

A claim that a fraction stays below 10 % is the one-sample version on the cell's repeats:
``z = (0.10 − mean) / s.e.``, reported for the worst cell.

Verdict words follow the test and nothing else: "supported" (detected, in the claimed direction, at
every level listed), "supported at ε = …" (detected at those levels only; at the others no
difference is detected), "not detected" (no level detects it), "reversed at …" (detected in the
opposite direction). A claim of *equality* cannot be proved by a test; its rows say "no difference
detected" or "differ at …".
"""
from __future__ import annotations

import argparse
import csv
import functools
import math
import pathlib
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "docs" / "_static" / "results"
RESULTS_MD = ROOT / "docs" / "results.md"
LEVEL = 0.05

NAMES = {
    "dp_penalty": "DP penalty", "dp_penalty_ocu_gwmh": "OCU+GWMH", "dp_hmc": "DP-HMC", "dp_barker": "DP Barker",
    "minibatch_dp_penalty": "minibatch penalty", "minibatch_dp_penalty_ocu_gwmh": "minibatch OCU+GWMH",
    "dp_sgld": "DP-SGLD", "dp_sgnht": "DP-SGNHT", "rwmh": "RWMH",
    "hmc": "HMC", "dp_fast_mh_full": "DP-Fast MH (full batch)", "dp_fast_mh_pff_k60": "DP-Fast MH, K = 60 (opt-in)",
    "dp_fast_mh": "DP-Fast MH (K = εN)", "dp_sgld_authors": "authors' SGLD update", "exact": "exact draws",
    "dp_fast_mh_full_pff": "DP-Fast MH (full batch, privacy for free, opt-in)",
}


def load(name: str, results_dir: pathlib.Path = SHIPPED) -> List[dict]:
    """The rows of ``<results_dir>/<name>.csv`` as dicts of strings (fresh copies of a read cached
    by the file's path, size and modification time)."""
    path = pathlib.Path(results_dir) / f"{name}.csv"
    st = path.stat()
    return [dict(r) for r in _read_csv(str(path), st.st_size, st.st_mtime_ns)]


@functools.lru_cache(maxsize=64)
def _read_csv(path: str, size: int, mtime_ns: int) -> Tuple[dict, ...]:
    with open(path, newline="") as fh:
        return tuple(csv.DictReader(fh))


class Paired(NamedTuple):
    """A paired comparison: ``mean`` ± ``se`` of ``d = B − A`` over ``n`` repeats, ``z = mean/se``
    and the two-sided paired-t ``p``."""
    n: int
    mean: float
    se: float
    z: float
    p: float


def t_two_sided_p(z: float, dof: int) -> float:
    """Two-sided p of Student's t with ``dof`` degrees of freedom at ``|z|``.

    >>> round(t_two_sided_p(2.093, 19), 3)
    0.05
    >>> round(t_two_sided_p(12.706, 1), 3)
    0.05
    """
    if not math.isfinite(z):
        return 0.0 if dof >= 1 else math.nan
    try:
        from scipy import stats

        return float(2 * stats.t.sf(abs(z), dof))
    except ImportError:  # normal approximation
        return math.erfc(abs(z) / math.sqrt(2))


def paired_from_values(a: Dict[str, float], b: Dict[str, float]) -> Paired:
    """Paired test of ``B − A`` over the repeat keys both dicts hold (repeat -> value).

    >>> t = paired_from_values({"0": 1.0, "1": 2.0, "2": 3.0}, {"0": 1.5, "1": 2.4, "2": 3.7})
    >>> round(t.mean, 3), round(t.se, 4), round(t.z, 2)
    (0.533, 0.0882, 6.05)
    """
    keys = sorted(set(a) & set(b), key=lambda k: int(float(k)))
    d = [b[k] - a[k] for k in keys]
    n = len(d)
    if n < 2:
        return Paired(n, d[0] if d else math.nan, math.nan, math.nan, math.nan)
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    z = m / se if se > 0 else (0.0 if m == 0 else math.copysign(math.inf, m))
    return Paired(n, m, se, z, t_two_sided_p(z, n - 1) if se > 0 else (1.0 if m == 0 else 0.0))


def sign_test(diffs: Sequence[float]) -> Tuple[int, int, float]:
    """Two-sided sign test: (pairs with d > 0, pairs with d ≠ 0, p).

    >>> sign_test([1.0] * 6)[2]
    0.03125
    """
    nz = [d for d in diffs if d != 0]
    m, k = len(nz), sum(d > 0 for d in nz)
    if m == 0:
        return 0, 0, 1.0
    tail = sum(math.comb(m, i) for i in range(max(k, m - k), m + 1)) / 2 ** m
    return k, m, min(1.0, 2 * tail)


def one_sample_below(values: Sequence[float], bound: float) -> Paired:
    """``z = (bound − mean)/s.e.`` and its two-sided t p: is the mean below ``bound``?"""
    n = len(values)
    m = sum(values) / n
    se = math.sqrt(sum((x - m) ** 2 for x in values) / (n - 1) / n) if n > 1 else math.nan
    z = (bound - m) / se if se > 0 else math.copysign(math.inf, bound - m)
    return Paired(n, bound - m, se, z, t_two_sided_p(z, n - 1))


def values(rows, *, problem=None, algorithm, metric, level_col="epsilon", level=None, **eq) -> Dict[str, float]:
    """repeat -> float(metric) for the rows matching ``problem``, ``algorithm``, ``level`` and ``eq``."""
    out = {}
    for r in rows:
        if r["algorithm"] != algorithm or (problem is not None and r["problem"] != problem):
            continue
        if level is not None and not math.isclose(float(r[level_col]), float(level), rel_tol=1e-9):
            continue
        if any(str(r[k]) != str(v) for k, v in eq.items()):
            continue
        if r.get(metric, "") in ("", "nan", None):
            continue
        out[r["repeat"]] = float(r[metric])
    return out


def paired(rows, *, problem, a, b, metric, level, level_col="epsilon", b_level=None, **eq) -> Paired:
    """Paired test of ``metric`` of ``b`` minus ``a`` at ``level`` (``b_level``: B's level, when the
    comparison is across levels of one algorithm, e.g. a clip bound against no clipping)."""
    va = values(rows, problem=problem, algorithm=a, metric=metric, level_col=level_col, level=level, **eq)
    vb = values(rows, problem=problem, algorithm=b, metric=metric, level_col=level_col,
                level=level if b_level is None else b_level, **eq)
    return Paired(*paired_from_values(va, vb))


def fmt_level(x) -> str:
    """A level as the tables print it: ``%g``, and whole millions as ``6·10⁶`` (run lengths).

    >>> fmt_level(0.5), fmt_level(20000.0), fmt_level(6e6), fmt_level(5e5)
    ('0.5', '20000', '6·10⁶', '500000')
    """
    x = float(x)
    if x >= 1e6 and x % 1e6 == 0:
        return f"{x / 1e6:g}·10⁶"
    return f"{x:g}"


def fmt_z(t: Paired) -> str:
    if not math.isfinite(t.z):
        return "—" if math.isnan(t.z) else ("+∞" if t.z > 0 else "−∞")
    s = f"{t.z:+.1f}" if abs(t.z) < 100 else ("> +100" if t.z > 0 else "< −100")
    s = s.replace("-", "−")
    return f"**{s}**" if t.p < LEVEL else s


def verdict(levels: Sequence, tests: Sequence[Paired], *, equality: bool = False, name: str = "ε") -> str:
    """The verdict words of the module docstring for one row."""
    lv = [fmt_level(x) for x in levels]
    pos = [lv[i] for i, t in enumerate(tests) if t.p < LEVEL and t.z > 0]
    neg = [lv[i] for i, t in enumerate(tests) if t.p < LEVEL and t.z < 0]
    n = min(t.n for t in tests)
    small = n < 5
    if equality:
        det = [lv[i] for i, t in enumerate(tests) if t.p < LEVEL]
        out = f"differ at {name} = {', '.join(det)}" if det else "no difference detected"
    elif pos and not neg and len(pos) == len(lv):
        out = "supported"
    elif pos and not neg:
        out = f"supported at {name} = {', '.join(pos)} only"
    elif not pos and not neg:
        out = "not detected"
    else:
        out = (f"supported at {name} = {', '.join(pos)}; " if pos else "") + f"reversed at {name} = {', '.join(neg)}"
    if small:
        out += f" ({n} repeats: descriptive only)"
    return out


class Claim(NamedTuple):
    """One row: the claim, ``B − A`` compared (positive z favours it), at ``levels``."""
    claim: str
    csv: str
    problem: Optional[str]
    a: str  # claimed lower
    b: str
    metric: str
    levels: Tuple
    level_col: str = "epsilon"
    equality: bool = False
    b_level: Optional[float] = None
    eq: Tuple = ()
    #: (level, kernels): read these kernels at this level whatever the row's level — a reference
    #: whose chains are compared with every level of the other kernel (the DP-HMC paper's SG chains
    #: used it while they were capped at one length; they now run per ε)
    fixed: Tuple = ()


MMD = "mmd"

FIG63 = [
    Claim(f"no effect but at the lowest bounds ({NAMES[k]}, {p.split('-')[-1]})", "fig63", p, k, k, MMD,
          (0.5, 1.0, 2.0), "clip_bound", True, 1000.0)
    for p in ("flat-banana-2d", "flat-banana-10d") for k in ("rwmh", "hmc")
]

E6 = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
_MB_OCU = "minibatch_dp_penalty_ocu_gwmh"
FIG64 = [
    Claim("flat: penalty beats HMC", "fig64", "flat-banana-2d", "dp_penalty", "dp_hmc", MMD, E6),
    Claim("flat: penalty beats HMC", "fig64", "flat-banana-2d", "dp_penalty_ocu_gwmh", "dp_hmc", MMD, E6),
    Claim("flat: penalty beats HMC", "fig64", "flat-banana-10d", "dp_penalty", "dp_hmc", MMD, E6),
    Claim("flat: penalty beats HMC", "fig64", "flat-banana-10d", "dp_penalty_ocu_gwmh", "dp_hmc", MMD, E6),
    Claim("tempered: HMC beats penalty", "fig64", "tempered-banana-2d", "dp_hmc", "dp_penalty", MMD, E6),
    Claim("tempered: HMC beats penalty", "fig64", "tempered-banana-2d", "dp_hmc", "dp_penalty_ocu_gwmh", MMD, E6),
    Claim("tempered: HMC beats penalty", "fig64", "tempered-banana-10d", "dp_hmc", "dp_penalty", MMD, E6),
    Claim("tempered: HMC beats penalty", "fig64", "tempered-banana-10d", "dp_hmc", "dp_penalty_ocu_gwmh", MMD, E6),
    Claim("flat: minibatch not useful", "fig64", "flat-banana-2d", "dp_penalty", "dp_barker", MMD, E6),
    Claim("flat: minibatch not useful", "fig64", "flat-banana-2d", "dp_penalty", "minibatch_dp_penalty", MMD,
          (3.0, 4.0, 5.0, 6.0)),
    Claim("except DP Barker in 10-d (Barker beats penalty)", "fig64", "flat-banana-10d", "dp_barker", "dp_penalty",
          MMD, E6),
    Claim("except DP Barker in 10-d (Barker beats minibatch penalty)", "fig64", "flat-banana-10d", "dp_barker",
          "minibatch_dp_penalty", MMD, (3.0, 4.0, 5.0, 6.0)),
    Claim("tempered: minibatch close to full-data penalty", "fig64", "tempered-banana-2d", "dp_barker", "dp_penalty",
          MMD, E6, equality=True),
    Claim("tempered: minibatch close to full-data penalty", "fig64", "tempered-banana-10d", "dp_barker",
          "dp_penalty", MMD, E6, equality=True),
    # the thesis's minibatch OCU+GWMH (code ``mdppa``), against its full-data counterpart, at the ε where its
    # valid accountant allows a chain (the plain minibatch penalty's levels above; ε ≥ 2 on the tempered 10-d)
    Claim("flat: minibatch not useful (OCU+GWMH variant)", "fig64", "flat-banana-2d", "dp_penalty_ocu_gwmh", _MB_OCU,
          MMD, (3.0, 4.0, 5.0, 6.0)),
    Claim("flat: minibatch not useful (OCU+GWMH variant)", "fig64", "flat-banana-10d", "dp_penalty_ocu_gwmh",
          _MB_OCU, MMD, (3.0, 4.0, 5.0, 6.0)),
    Claim("tempered: minibatch close to full-data penalty (OCU+GWMH variant)", "fig64", "tempered-banana-2d",
          "dp_penalty_ocu_gwmh", _MB_OCU, MMD, E6, equality=True),
    Claim("tempered: minibatch close to full-data penalty (OCU+GWMH variant)", "fig64", "tempered-banana-10d",
          "dp_penalty_ocu_gwmh", _MB_OCU, MMD, E6[1:], equality=True),
    # no claim of the thesis (§6.4 lumps the minibatch algorithms together): a two-sided comparison, negative z =
    # OCU+GWMH lower
] + [
    Claim("minibatch OCU+GWMH vs plain minibatch penalty (no thesis claim)", "fig64", p, "minibatch_dp_penalty",
          _MB_OCU, MMD, lv, equality=True)
    for p, lv in (("flat-banana-2d", (3.0, 4.0, 5.0, 6.0)), ("tempered-banana-2d", E6),
                  ("flat-banana-10d", (3.0, 4.0, 5.0, 6.0)), ("tempered-banana-10d", E6[1:]))
]

FIG65 = [
    Claim("correlated Gaussian: DP-HMC beats penalty", "fig65", "correlated-gauss", "dp_hmc", "dp_penalty", MMD, E6),
    Claim("correlated Gaussian: DP-HMC beats penalty", "fig65", "correlated-gauss", "dp_hmc", "dp_penalty_ocu_gwmh",
          MMD, E6),
    Claim("narrow banana: all approximately equal", "fig65", "narrow-banana", "dp_penalty", "dp_hmc", MMD, E6,
          equality=True),
    Claim("narrow banana: all approximately equal", "fig65", "narrow-banana", "dp_penalty", "dp_penalty_ocu_gwmh",
          MMD, E6, equality=True),
    Claim("narrow banana: OCU+GWMH clips more than DP penalty (Fig. 6.7)", "fig65", "narrow-banana", "dp_penalty",
          "dp_penalty_ocu_gwmh", "clipped_fraction", E6),
    Claim("30-d Gaussian: OCU+GWMH beats the others", "fig65", "gauss-30d", "dp_penalty_ocu_gwmh", "dp_penalty", MMD,
          E6),
    Claim("30-d Gaussian: OCU+GWMH beats the others", "fig65", "gauss-30d", "dp_penalty_ocu_gwmh", "dp_hmc", MMD, E6),
    Claim("30-d Gaussian: DP-HMC narrowly beats DP penalty", "fig65", "gauss-30d", "dp_hmc", "dp_penalty", MMD, E6),
    Claim("circle: HMC slightly beats DP penalty at ε = 0.5 (MMD)", "fig65", "circle", "dp_hmc", "dp_penalty", MMD,
          (0.5, 0.75, 1.0)),
    Claim("circle: same, mean error (Fig. 6.9)", "fig65", "circle", "dp_hmc", "dp_penalty", "mean_error",
          (0.5, 0.75, 1.0)),
]

#: the ε of the DP-HMC paper's grid that the shipped run covers (10 repeats each): all seven
E_DPHMC = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 15.0)
_B, _G = "dphmc-banana-2d", "dphmc-gauss-10d"
DPHMC = [
    Claim("banana: DP-HMC and DP penalty roughly equal", "dphmc_fig1", _B, "dp_hmc", "dp_penalty", MMD, E_DPHMC,
          equality=True),
    Claim("banana: same, mean error", "dphmc_fig1", _B, "dp_hmc", "dp_penalty", "mean_error", E_DPHMC,
          equality=True),
    Claim("banana: DP-SGLD worse (than DP-HMC)", "dphmc_fig1", _B, "dp_hmc", "dp_sgld", MMD, E_DPHMC),
    Claim("banana: DP-SGLD worse (than DP penalty)", "dphmc_fig1", _B, "dp_penalty", "dp_sgld", MMD, E_DPHMC),
    Claim("banana: DP-SGNHT worse (than DP-HMC)", "dphmc_fig1", _B, "dp_hmc", "dp_sgnht", MMD, E_DPHMC),
    Claim("banana: DP-SGNHT worse (than DP penalty)", "dphmc_fig1", _B, "dp_penalty", "dp_sgnht", MMD, E_DPHMC),
    Claim("Gaussian: DP-SGLD best (vs DP-HMC)", "dphmc_fig1", _G, "dp_sgld", "dp_hmc", MMD, E_DPHMC),
    Claim("Gaussian: DP-SGLD best (vs DP-SGNHT)", "dphmc_fig1", _G, "dp_sgld", "dp_sgnht", MMD, E_DPHMC),
    Claim("Gaussian: DP-SGLD best (vs DP penalty)", "dphmc_fig1", _G, "dp_sgld", "dp_penalty", MMD, E_DPHMC),
    Claim("Gaussian: DP-HMC and DP-SGNHT mostly equal", "dphmc_fig1", _G, "dp_hmc", "dp_sgnht", MMD, E_DPHMC,
          equality=True),
    Claim("Gaussian: DP penalty worst (vs DP-HMC)", "dphmc_fig1", _G, "dp_hmc", "dp_penalty", MMD, E_DPHMC),
    Claim("Gaussian: DP penalty worst (vs DP-SGNHT)", "dphmc_fig1", _G, "dp_sgnht", "dp_penalty", MMD, E_DPHMC),
]

FASTMH = [
    Claim("full-batch DP-Fast MH beats penalty (a), t = 10⁴", "fastmh_fig1", None, "dp_fast_mh_full", "dp_penalty",
          "sym_kl", (0.01, 0.05, 0.2, 0.5), eq=(("iterations", "10000"),)),
    Claim("DP-Fast MH (K = 60) beats penalty (a), t = 10⁴", "fastmh_fig1", None, "dp_fast_mh_pff_k60", "dp_penalty",
          "sym_kl", (0.01, 0.05), eq=(("iterations", "10000"),)),
    Claim("Barker unable to converge (worse than penalty), t = 10⁴", "fastmh_fig1", None, "dp_penalty", "dp_barker",
          "sym_kl", (0.2, 0.5), eq=(("iterations", "10000"),)),
]

# Zhang & Zhang Fig. 3(a)(b) (fastmh_fig3.csv, DP-Fast MH at §6.2's K only: ROW_FILTERS)
E_FIG3 = (0.01, 0.05, 0.2, 0.5)
FIG3 = [
    Claim("DP-Fast MH (K = ⌈εN/6⌉) more accurate than penalty (a)", "fastmh_fig3", None, "dp_fast_mh", "dp_penalty",
          "test_error", E_FIG3),
    Claim("full-batch DP-Fast MH more accurate than penalty (a)", "fastmh_fig3", None, "dp_fast_mh_full",
          "dp_penalty", "test_error", E_FIG3),
    Claim("full batch, privacy for free (opt-in) more accurate than penalty (a)", "fastmh_fig3", None,
          "dp_fast_mh_full_pff", "dp_penalty", "test_error", E_FIG3),
    Claim("DP-Fast MH (K = ⌈εN/6⌉) reads fewer rows than full batch (b)", "fastmh_fig3", None, "dp_fast_mh",
          "dp_fast_mh_full", "rows_read", E_FIG3),
]

# the same claims on the paper's full MNIST (fastmh_fig3_mnist.csv, N = 12 214, 4·10⁴ iterations)
# At N = 12 214 DP Barker has an (ε, 10⁻⁵)-DP batch at ε = 0.2 and 0.5 (2 000 and 5 000 rows), so the
# paper's "previous methods" include it there.
_E_BARKER = (0.2, 0.5)
FIG3_MNIST = [c._replace(csv="fastmh_fig3_mnist") for c in FIG3] + [
    Claim("DP-Fast MH (K = ⌈εN/6⌉) more accurate than DP Barker (a)", "fastmh_fig3_mnist", None, "dp_fast_mh",
          "dp_barker", "test_error", _E_BARKER),
    Claim("full-batch DP-Fast MH more accurate than DP Barker (a)", "fastmh_fig3_mnist", None, "dp_fast_mh_full",
          "dp_barker", "test_error", _E_BARKER),
    Claim("DP-Fast MH (K = ⌈εN/6⌉) reads fewer rows than DP Barker (b)", "fastmh_fig3_mnist", None, "dp_fast_mh",
          "dp_barker", "rows_read", _E_BARKER),
]


_SGLD_LINES = (("dp_sgld_authors", "authors' update"), ("dp_sgld", "eq. 4"))

# Heikkilä Fig. 3, DP Barker: the error at t = 20 000 against the error at smaller t, the same chains.
HEIKKILA = [
    Claim(f"accuracy improves with t ({m.replace('_', ' ')})", "heikkila_fig23", None, "dp_barker", "dp_barker", m,
          (20000.0,), "iterations", False, None) for m in ("mean_error", "variance_error", "sym_kl")
]

# Heikkilä Fig. 3 and §6 ("DP SGLD converges quickly towards the posterior mean, but does not properly
# capture posterior variance"): DP-SGLD's 6·10⁶-iteration chains, scored at t, against DP Barker's
# chains at t = 20 000 (ε = 0.82 under substitution, start included). Under substitution (one relation
# for both kernels: heikkila_fig23_relations.csv, PLD) DP-SGLD has spent ε 0.49 / 0.71 / 1.04 / 1.51 /
# 1.88 at these t: only t ≤ 10⁶ is at or below Barker's ε (the relations table says which).
_T_SGLD = (500_000.0, 1_000_000.0, 2_000_000.0, 4_000_000.0, 6_000_000.0)
_BARKER_T = (20000.0, ("dp_barker",))
HEIKKILA_SGLD = [
    Claim(f"DP-SGLD does not capture the variance ({what})", "heikkila_fig23", None, "dp_barker", line,
          "variance_error", _T_SGLD, "iterations", fixed=_BARKER_T) for line, what in _SGLD_LINES
] + [
    Claim(f"DP-SGLD converges quickly towards the mean ({what})", "heikkila_fig23", None, line, "dp_barker",
          "mean_error", _T_SGLD, "iterations", fixed=_BARKER_T) for line, what in _SGLD_LINES
]

SGLD_CHECK = [
    Claim("eq. 4 captures the variance, the authors' update does not", "heikkila_fig23_sgld_check", None, "dp_sgld",
          "dp_sgld_authors", "variance_error", (4000.0,), "iterations"),
]

TABLES = {"fig63": FIG63, "fig64": FIG64, "fig65": FIG65, "dphmc_fig1": DPHMC, "fastmh_fig1": FASTMH,
          "heikkila_fig23": HEIKKILA, "heikkila_fig3_sgld": HEIKKILA_SGLD, "heikkila_sgld_check": SGLD_CHECK,
          "fastmh_fig3": FIG3, "fastmh_fig3_mnist": FIG3_MNIST}


def run_claim(c: Claim, rows) -> List[Paired]:
    eq = dict(c.eq)
    if c.csv == "heikkila_fig23" and not c.fixed:  # error at an earlier t minus the error at the last t, per chain
        out = []
        for t0 in (2000.0, 5000.0, 10000.0):
            va = values(rows, algorithm=c.a, metric=c.metric, level_col="iterations", level=20000.0)
            vb = values(rows, algorithm=c.b, metric=c.metric, level_col="iterations", level=t0)
            out.append(paired_from_values(va, vb))
        return out
    if c.b_level is not None:  # one kernel, a level against the reference level: d = metric(level) − metric(ref)
        return [paired_from_values(
            values(rows, problem=c.problem, algorithm=c.a, metric=c.metric, level_col=c.level_col, level=c.b_level),
            values(rows, problem=c.problem, algorithm=c.b, metric=c.metric, level_col=c.level_col, level=lv))
            for lv in c.levels]
    if c.fixed:
        at = lambda k, lv: c.fixed[0] if k in c.fixed[1] else lv  # noqa: E731
        return [paired_from_values(
            values(rows, problem=c.problem, algorithm=c.a, metric=c.metric, level_col=c.level_col, level=at(c.a, lv),
                   **eq),
            values(rows, problem=c.problem, algorithm=c.b, metric=c.metric, level_col=c.level_col, level=at(c.b, lv),
                   **eq)) for lv in c.levels]
    return [paired(rows, problem=c.problem, a=c.a, b=c.b, metric=c.metric, level=lv, level_col=c.level_col,
                   **eq) for lv in c.levels]


def claim_diffs(c: Claim, rows) -> List[float]:
    """Every paired difference of the claim (all levels pooled), positive favouring it."""
    eq = dict(c.eq)
    out = []
    for lv in c.levels:
        fx = (lambda k: c.fixed[0] if k in c.fixed[1] else lv) if c.fixed else (lambda k: lv)
        va = values(rows, problem=c.problem, algorithm=c.a, metric=c.metric, level_col=c.level_col,
                    level=fx(c.a) if c.b_level is None else c.b_level, **eq)
        vb = values(rows, problem=c.problem, algorithm=c.b, metric=c.metric, level_col=c.level_col,
                    level=fx(c.b), **eq)
        out += [vb[k] - va[k] for k in sorted(set(va) & set(vb))]
    return out


#: display names that differ in one CSV (Fig. 3's DP-Fast MH line uses §6.2's K)
CSV_NAMES = {"fastmh_fig3": {"dp_fast_mh": "DP-Fast MH (K = ⌈εN/6⌉)"},
             "fastmh_fig3_mnist": {"dp_fast_mh": "DP-Fast MH (K = ⌈εN/6⌉)"}}


def _comparison(c: Claim) -> str:
    names = dict(NAMES, **CSV_NAMES.get(c.csv, {}))
    where = f"{c.problem}: " if c.problem else ""
    if c.b_level is not None:
        return f"{where}MMD(b) − MMD(b = {fmt_level(c.b_level)}), {NAMES[c.a]}"
    if c.csv == "heikkila_fig23" and not c.fixed:
        return f"{c.metric.replace('_', ' ')}(t) − {c.metric.replace('_', ' ')}(20 000)"
    m = {"mmd": "MMD", "mean_error": "mean error", "clipped_fraction": "clipped fraction",
         "sym_kl": "sym. KL", "variance_error": "variance error", "test_error": "test error",
         "rows_read": "rows read per iteration"}[c.metric]

    def name(k):
        if c.fixed and k in c.fixed[1]:
            return names[k] + (f" (t = {fmt_level(c.fixed[0])})" if c.level_col == "iterations"
                               else f" (ε = {fmt_level(c.fixed[0])} chains)")
        return names[k]
    return f"{where}{m}: {name(c.b)} − {name(c.a)}"


def table(name: str, results_dir: pathlib.Path = SHIPPED) -> str:
    """The markdown claim table ``name`` (a key of :data:`TABLES`), recomputed from the CSVs."""
    claims = TABLES[name]
    rows = load(claims[0].csv, results_dir)
    rows = ROW_FILTERS.get(name, lambda r: r)(rows)
    if name == "heikkila_fig23":
        levels, lname = (2000.0, 5000.0, 10000.0), "t"
    elif name == "fig63":
        levels, lname = claims[0].levels, "b"
    else:
        levels = tuple(sorted({lv for c in claims for lv in c.levels}))
        lname = "t" if name in ("heikkila_sgld_check", "heikkila_fig3_sgld") else "ε"
    small = any(run_claim(c, rows)[0].n < 5 for c in claims)
    head = "| claim | compared (paired over repeats) | n | " + " | ".join(
        f"z, {lname} = {fmt_level(x)}" for x in levels) + (" | sign test, all levels pooled" if small else "") \
        + " | verdict |"
    lines = [head, "|" + "---|" * 3 + "---:|" * len(levels) + ("---|" if small else "") + "---|"]
    for c in claims:
        tests = run_claim(c, rows)
        cl = levels if name in ("heikkila_fig23", "fig63") else c.levels
        by = dict(zip([float(x) for x in cl], tests))
        cells = [fmt_z(by[float(x)]) if float(x) in by else "" for x in levels]
        n = min(t.n for t in tests)
        v = verdict(cl, tests, equality=c.equality, name=lname)
        if small:
            k, m, p = sign_test(claim_diffs(c, rows))
            cells.append(f"{k} of {m} pairs > 0, p = {p:.2g}")
            if p < LEVEL:
                v += ("; pooled over ε the sign test detects a difference" if c.equality
                      else "; pooled over ε the sign test supports it" if 2 * k > m
                      else "; pooled over ε the sign test reverses it")
        lines.append(f"| {c.claim} | {_comparison(c)} | {n} | " + " | ".join(cells) + " | " + v + " |")
    return "\n".join(lines)


def clipping_table(csvname: str, results_dir: pathlib.Path = SHIPPED) -> str:
    """Fig. 6.6 / 6.7: per problem and kernel, the mean ratio clipped fraction (range over ε), the
    worst cell's one-sample z against 10 %, and the verdict."""
    lines = ["| problem | kernel | mean clipped fraction (range over ε) | chains above 10 % | worst cell: z vs 10 % "
             "| mean below 10 %? |", "|---|---|---|---:|---:|---|"]
    for csvname in (csvname,):
        rows = load(csvname, results_dir)
        probs = list(dict.fromkeys(r["problem"] for r in rows))
        algs = list(dict.fromkeys(r["algorithm"] for r in rows if r["algorithm"] != "exact"))
        for p in probs:
            for a in algs:
                cells = {}
                for r in rows:
                    if r["problem"] == p and r["algorithm"] == a and r["clipped_fraction"] not in ("", "nan"):
                        cells.setdefault(float(r["epsilon"]), []).append(float(r["clipped_fraction"]))
                if not cells:
                    continue
                means = {e: sum(v) / len(v) for e, v in cells.items()}
                worst = max(means, key=means.get)
                t = one_sample_below(cells[worst], 0.10)
                lo, hi = min(means.values()), max(means.values())
                rng = f"{100 * lo:.2g}–{100 * hi:.2g} %" if f"{100 * lo:.2g}" != f"{100 * hi:.2g}" else f"{100 * lo:.2g} %"
                z = fmt_z(t)
                if t.p < LEVEL and t.z > 0:
                    v = "yes, every ε"
                elif t.p < LEVEL:
                    v = f"no: above 10 % (ε = {fmt_level(worst)})"
                else:
                    v = f"not detected (ε = {fmt_level(worst)})"
                above = sum(x > 0.10 for v_ in cells.values() for x in v_)
                total = sum(len(v_) for v_ in cells.values())
                lines.append(f"| {p} | {NAMES[a]} | {rng} | {above} of {total} | {z} | {v} |")
    return "\n".join(lines)


def welch(a: Sequence[float], b: Sequence[float]) -> Paired:
    """Two-sample (unpaired) test of mean(b) − mean(a) with Welch's degrees of freedom, for
    cells that share no repeats (different data sets)."""
    def mv(x):
        m = sum(x) / len(x)
        return m, sum((v - m) ** 2 for v in x) / (len(x) - 1) / len(x)
    (ma, va), (mb, vb) = mv(a), mv(b)
    se = math.sqrt(va + vb)
    z = (mb - ma) / se if se > 0 else math.copysign(math.inf, mb - ma)
    dof = (va + vb) ** 2 / ((va ** 2 / (len(a) - 1) if va else 0) + (vb ** 2 / (len(b) - 1) if vb else 0) or 1e-300)
    return Paired(min(len(a), len(b)), mb - ma, se, z, t_two_sided_p(z, max(1, int(dof))))


def yildirim_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Yıldırım & Ermiş Thm 1 on the Gaussian mean (benchmarks/yildirim_thm1.py): the deterministic
    quantities per n, and Welch tests of the chain's quality at n = 10³ against n = 10⁵."""
    with open(pathlib.Path(results_dir) / "yildirim_thm1.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    ns = sorted({int(r["n"]) for r in rows})

    def col(c, n):
        return [float(r[c]) for r in rows if int(r["n"]) == n]

    def per_n(c, f="{:.3g}"):
        return ", ".join(f.format(sum(col(c, n)) / len(col(c, n))) for n in ns)

    lines = ["| claim | quantity at n = " + ", ".join(f"{n:,}" for n in ns) + " | test | z, p | verdict |",
             "|---|---|---|---|---|"]
    lines.append(f"| k(n) = ⌊n / log n⌋ iterations fit the budget | iterations {per_n('k', '{:.0f}')}; ledger ε "
                 f"{per_n('epsilon_ledger')} | deterministic (the accountant; the same in every repeat) | — | "
                 "supported |")
    lines.append(f"| the noise variance does not grow with n | noise sd on a typical move {per_n('sigma_typical')} "
                 "nats | deterministic (the calibration) | — | supported "
                 f"({100 * (sum(col('sigma_typical', ns[-1])) / sum(col('sigma_typical', ns[0])) - 1):+.0f} % over "
                 f"{ns[-1] // ns[0]}× n) |")
    lines.append(f"| ε = O(1) (eq. 3) | Thm 1's bound at that noise {per_n('epsilon_thm1')} | deterministic | — | "
                 f"supported, and {min(col('epsilon_thm1', ns[-1])) / max(col('epsilon_ledger', ns[-1])):.0f}× the ledger's "
                 "ε (advanced composition) |")
    for c, what, claim in (("acceptance", "acceptance rate", "the acceptance rate does not fall with n"),
                           ("mean_error_sd", "mean error (exact sds)", "the accuracy does not degrade with n"),
                           ("sd_ratio", "sd ratio", "the accuracy does not degrade with n")):
        t = welch(col(c, ns[0]), col(c, ns[-1]))
        z = f"z = {t.z:+.2f}, p = {t.p:.2g}".replace("-", "−")
        if t.p >= LEVEL:
            v = "no difference detected"
        else:
            worse = (t.z < 0) if c != "mean_error_sd" else (t.z > 0)
            v = "degrades (detected)" if worse else "improves (detected)"
        lines.append(f"| {claim} | {what} {per_n(c)} | Welch t, n = {ns[0]:,} against {ns[-1]:,} "
                     f"({len(col(c, ns[0]))} + {len(col(c, ns[-1]))} repeats) | {z} | {v} |")
    return "\n".join(lines)


# Zhang & Zhang Fig. 2 (fastmh_fig2.csv): one ε per line, every line paired over the same seeds.
FIG2 = [  # (claim, metric, a = claimed lower, b)
    ("DP-Fast MH (K = εN) closer to the truth than penalty", "sym_kl", "dp_fast_mh", "dp_penalty"),
    ("DP-Fast MH (K = εN) closer to the truth than penalty", "mode_weight_error", "dp_fast_mh", "dp_penalty"),
    ("full-batch DP-Fast MH closer to the truth than penalty", "sym_kl", "dp_fast_mh_full", "dp_penalty"),
    ("full-batch DP-Fast MH closer to the truth than penalty", "mode_weight_error", "dp_fast_mh_full", "dp_penalty"),
    ("DP-Fast MH, K = 60 (opt-in) closer to the truth than penalty", "sym_kl", "dp_fast_mh_pff_k60", "dp_penalty"),
    ("DP-Fast MH, K = 60 (opt-in) closer to the truth than penalty", "mode_weight_error", "dp_fast_mh_pff_k60",
     "dp_penalty"),
    ("penalty misses the modes' relative weights (vs the exact-draw floor)", "mode_weight_error", "exact",
     "dp_penalty"),
    ("full-batch DP-Fast MH misses them too (vs the exact-draw floor)", "mode_weight_error", "exact",
     "dp_fast_mh_full"),
    ("Barker (ε = 0.2) failed: worse than penalty (ε = 0.05)", "sym_kl", "dp_penalty", "dp_barker"),
    ("Barker (ε = 0.2) failed: worse than penalty (ε = 0.05)", "mode_weight_error", "dp_penalty", "dp_barker"),
]
_METRIC = {"sym_kl": "sym. KL", "mode_weight_error": "mode-weight error", "test_error": "test error",
           "rows_read": "rows read per iteration"}


def _single_level_row(claim, metric, a, b, rows, unit=""):
    t = paired_from_values(values(rows, algorithm=a, metric=metric), values(rows, algorithm=b, metric=metric))
    v = verdict((0.0,), [t]).replace(" at ε = 0", "")  # one level: the verdict words without it
    mean = f"{t.mean:+.3g}{unit} ± {t.se:.2g}".replace("-", "−")
    return f"| {claim} | {_METRIC[metric]}: {NAMES[b]} − {NAMES[a]} | {t.n} | {mean} | {fmt_z(t)} | {t.p:.2g} | {v} |"


def fig2_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Zhang & Zhang Fig. 2: paired differences over the seeds at t = 10⁴ (sym. KL; the mode
    weight's absolute error against 2·10⁵ exact draws)."""
    rows = load("fastmh_fig2", results_dir)
    lines = ["| claim | compared (paired over repeats) | n | mean d ± s.e. | z | p | verdict |",
             "|---|---|---|---:|---:|---:|---|"]
    lines += [_single_level_row(c, m, a, b, rows) for c, m, a, b in FIG2]
    return "\n".join(lines)


def _fig3_main_rows(rows):
    """Fig. 3(a)(b)'s rows: every line, DP-Fast MH at §6.2's K = ⌈εN/6⌉ only (the K sweep of (c)
    shares its key columns but for K)."""
    out = []
    for r in rows:
        if r["algorithm"] == "dp_fast_mh":
            k = max(1, math.ceil(float(r["epsilon"]) * int(r["num_train"]) / 6.0 - 1e-9))
            if int(r["K"]) != k:
                continue
        out.append(r)
    return out


def fig3_k_table(results_dir: pathlib.Path = SHIPPED, name: str = "fastmh_fig3") -> str:
    """Fig. 3(c) (§6.2: "the test accuracy and the batch size both increase when K decreases"):
    at each ε of panel (c), DP-Fast MH at the smallest K of the sweep whose ledger records the
    target (ε, δ) per iteration in every seed (a smaller K the kernel cannot certify, Thm 2 failing,
    is left out) against the largest K, paired over the seeds; then Fig. 3(b)'s "less than 20 % of
    the data" as a one-sample test of the rows read per iteration / N against 0.2, at §6.2's K."""
    rows = load(name, results_dir)
    fm = [r for r in rows if r["algorithm"] == "dp_fast_mh"]
    k_eps = sorted(e for e in {float(r["epsilon"]) for r in fm}
                   if len({r["K"] for r in fm if float(r["epsilon"]) == e}) > 2)
    lines = ["| claim | ε | compared (paired over repeats) | n | mean d ± s.e. | z | p | verdict |",
             "|---|---:|---|---|---:|---:|---:|---|"]
    for e in k_eps:
        at = [r for r in fm if float(r["epsilon"]) == e]
        ks = sorted({int(r["K"]) for r in at})
        ok = [k for k in ks if all(float(r["step_epsilon_ledger"] or "inf") <= e * (1 + 1e-9)  # '': no guarantee
                                   for r in at if int(r["K"]) == k)]
        lo, hi = str(min(ok)), str(ks[-1])
        for claim, metric, a_k, b_k in (("accuracy increases as K decreases (c)", "test_error", lo, hi),
                                        ("batch size increases as K decreases (c)", "rows_read", hi, lo)):
            t = paired_from_values(values(at, algorithm="dp_fast_mh", metric=metric, K=a_k),
                                   values(at, algorithm="dp_fast_mh", metric=metric, K=b_k))
            mean = f"{t.mean:+.3g} ± {t.se:.2g}".replace("-", "−")
            lines.append(f"| {claim} | {fmt_level(e)} | {_METRIC[metric]}: K = {b_k} − K = {a_k} | {t.n} | {mean} | "
                         f"{fmt_z(t)} | {t.p:.2g} | {verdict((0.0,), [t]).replace(' at ε = 0', '')} |")
    main = _fig3_main_rows(rows)
    eps = sorted({float(r["epsilon"]) for r in main if r["algorithm"] == "dp_fast_mh"})
    lines.append("")
    lines.append("| claim | tested | n | " + " | ".join(f"z, ε = {fmt_level(e)}" for e in eps) + " | verdict |")
    lines.append("|---|---|---|" + "---:|" * len(eps) + "---|")
    tests = []
    for e in eps:
        share = [float(r["rows_read"]) / int(r["num_train"]) for r in main
                 if r["algorithm"] == "dp_fast_mh" and float(r["epsilon"]) == e and r["rows_read"] not in ("", "nan")]
        tests.append(one_sample_below(share, 0.2))
    lines.append("| DP-Fast MH reads less than 20 % of the data per iteration (b) | mean rows read / N against 0.2, "
                 f"one-sample t | {min(t.n for t in tests)} | " + " | ".join(fmt_z(t) for t in tests)
                 + f" | {verdict(eps, tests)} |")
    return "\n".join(lines)


# ------------------------------------------------------------------ replication (issue #60)

#: the DP-HMC paper's Fig. 1 on a second set of seeds (repeats 10–19; the shipped grid is 0–9):
#: a verdict word needs both sets to detect the same direction (LEVEL each)
REPLICATION = {"dphmc_fig1": "dphmc_fig1_replication"}


def _replicated(t1: Paired, t2: Optional[Paired]) -> bool:
    return (t2 is not None and t1.p < LEVEL and t2.p < LEVEL and math.isfinite(t1.z) and math.isfinite(t2.z)
            and (t1.z > 0) == (t2.z > 0))


def replicated_verdict(levels: Sequence, tests: Sequence[Paired], second: Dict[float, Paired], *,
                       equality: bool = False, name: str = "ε") -> str:
    """Verdict words from the detections that a second set of seeds repeats (same direction, each
    p < LEVEL); what the first set alone detects is added after a semicolon, marked unreplicated.

    >>> P = Paired
    >>> replicated_verdict((2, 4), (P(10, 1, .3, 3.0, .01), P(10, 1, .3, 3.0, .01)), {2.0: P(10, 1, .3, 2.5, .03)})
    'supported at ε = 2 only (replicated at ε = 2; second set at ε = 2); seeds 0–9 alone: supported'
    >>> replicated_verdict((2,), (P(10, 1, .4, 2.4, .04),), {2.0: P(10, -.1, .3, -0.4, .7)}, equality=True)
    'no difference detected (nothing replicated; second set at ε = 2); seeds 0–9 alone: differ at ε = 2'
    """
    lv = [float(x) for x in levels]
    rep = [_replicated(t, second.get(x)) for x, t in zip(lv, tests)]
    keep = [t if r else Paired(t.n, t.mean, t.se, 0.0, 1.0) for t, r in zip(tests, rep)]
    words = verdict(levels, keep, equality=equality, name=name)
    where = ", ".join(fmt_level(x) for x, r in zip(lv, rep) if r)
    ran = ", ".join(fmt_level(x) for x in lv if x in second)
    if not ran:
        out = f"{words} (no second set of seeds)"
    elif not where:
        out = f"{words} (nothing replicated; second set at {name} = {ran})"
    else:
        out = f"{words} (replicated at {name} = {where}; second set at {name} = {ran})"
    alone = verdict(levels, tests, equality=equality, name=name)
    if alone != words:
        out += f"; seeds 0–9 alone: {alone}"
    return out


def replication_table(name: str = "dphmc_fig1", results_dir: pathlib.Path = SHIPPED) -> str:
    """Each claim of ``name`` at the levels the second seed set ran: z in the shipped seeds, z in
    the second set, z over both sets paired together (one test over all seeds), and whether the
    detection replicates."""
    rows1 = load(TABLES[name][0].csv, results_dir)
    rows2 = load(REPLICATION[name], results_dir)
    levels = sorted({float(r["epsilon"]) for r in rows2})
    lines = ["| claim | compared (paired over repeats) | ε | z, seeds 0–9 (n) | z, seeds 10–19 (n) | "
             "z, all seeds (n) | replicated? |", "|---|---|---:|---:|---:|---:|---|"]
    for c in TABLES[name]:
        have = {r["algorithm"] for r in rows2 if r["problem"] == c.problem}
        if not {c.a, c.b} <= have:
            continue
        for lv in levels:
            if lv not in [float(x) for x in c.levels]:
                continue
            t1 = paired(rows1, problem=c.problem, a=c.a, b=c.b, metric=c.metric, level=lv)
            t2 = paired(rows2, problem=c.problem, a=c.a, b=c.b, metric=c.metric, level=lv)
            both = rows1 + rows2
            t3 = paired(both, problem=c.problem, a=c.a, b=c.b, metric=c.metric, level=lv)
            if _replicated(t1, t2):
                v = "yes: detected in both sets, same direction"
            elif t1.p < LEVEL or t2.p < LEVEL:
                v = "no: detected in one set only"
            else:
                v = "nothing to replicate (detected in neither set)"
            if t3.p < LEVEL and not _replicated(t1, t2):
                v += "; the test over all seeds detects it"
            lines.append(f"| {c.claim} | {_comparison(c)} | {fmt_level(lv)} | {fmt_z(t1)} ({t1.n}) | {fmt_z(t2)} ({t2.n}) "
                         f"| {fmt_z(t3)} ({t3.n}) | {v} |")
    return "\n".join(lines)


def replicated_table(name: str, results_dir: pathlib.Path = SHIPPED) -> str:
    """:func:`table` with :func:`replicated_verdict` in its verdict column."""
    base = table(name, results_dir).split("\n")
    claims = TABLES[name]
    rows1 = load(claims[0].csv, results_dir)
    rows2 = load(REPLICATION[name], results_dir)
    out = base[:2]
    for c, line in zip(claims, base[2:]):
        tests = run_claim(c, rows1)
        second = {float(lv): paired(rows2, problem=c.problem, a=c.a, b=c.b, metric=c.metric, level=lv)
                  for lv in c.levels if any(float(r["epsilon"]) == float(lv) and r["problem"] == c.problem
                                            and r["algorithm"] in (c.a, c.b) for r in rows2)}
        second = {k: v for k, v in second.items() if v.n >= 2}
        head = line.rsplit(" | ", 1)[0]
        out.append(f"{head} | {replicated_verdict(c.levels, tests, second, equality=c.equality)} |")
    return "\n".join(out)


# ------------------------------------------------------------- number tables (issue #60)

def fmt_pm(m: float, se: float) -> str:
    """``mean ± s.e.``, the s.e. to one significant digit (two when it starts with 1), the mean to
    the same decimals (at least two).

    >>> fmt_pm(0.7504, 0.0812), fmt_pm(0.0729, 0.0101), fmt_pm(0.01234, 0.0041)
    ('0.75 ± 0.08', '0.073 ± 0.010', '0.012 ± 0.004')
    """
    if not (math.isfinite(se) and se > 0):
        return f"{m:.3g}"
    s1 = float(f"{se:.1g}")  # the s.e. to one significant digit, rounding carried
    d = -math.floor(math.log10(s1))
    if f"{s1:.1e}".startswith("1"):
        d += 1
    d = max(2, d)
    return f"{m:.{d}f} ± {se:.{d}f}"


def _mse(v: Sequence[float]) -> Tuple[float, float, int]:
    n = len(v)
    m = sum(v) / n
    se = math.sqrt(sum((x - m) ** 2 for x in v) / (n - 1) / n) if n > 1 else math.nan
    return m, se, n


def dphmc_values_table(results_dir: pathlib.Path = SHIPPED, name: str = "dphmc_fig1", metric: str = "mmd") -> str:
    """The DP-HMC paper's Fig. 1 values: mean ± s.e. (repeats) per problem, ε and kernel."""
    rows = load(name, results_dir)
    algs = [a for a in ("dp_hmc", "dp_penalty", "dp_sgld", "dp_sgnht", "exact") if any(r["algorithm"] == a for r in rows)]
    lines = ["| problem | ε | " + " | ".join(NAMES[a] for a in algs) + " |", "|---|---:|" + "---:|" * len(algs)]
    for p in dict.fromkeys(r["problem"] for r in rows):
        for e in sorted({float(r["epsilon"]) for r in rows if r["problem"] == p}):
            cells = []
            for a in algs:
                v = [float(r[metric]) for r in rows if r["problem"] == p and r["algorithm"] == a
                     and float(r["epsilon"]) == e and r[metric] not in ("", "nan")]
                cells.append(f"{fmt_pm(*_mse(v)[:2])} ({len(v)})" if v else "")
            lines.append(f"| {p} | {fmt_level(e)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _thou(x: float) -> str:
    """A count with a space between thousands: ``2 000``, ``6 000 000``."""
    return f"{x:,.0f}".replace(",", " ")


def _heikkila_cells(rows, a, t):
    sel = [r for r in rows if r["algorithm"] == a and float(r["iterations"]) == float(t)]
    col = lambda c: _mse([float(r[c]) for r in sel])  # noqa: E731
    return sel, col


def heikkila_barker_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Heikkilä Fig. 3, DP Barker: per t, ε (substitution, start included), errors (mean ± s.e.)."""
    rows = load("heikkila_fig23", results_dir)
    lines = ["| t | ε (substitution, start incl., δ = 2·10⁻⁶) | mean error | variance error | variances (θ1, θ2) "
             "| sym. KL |", "|---:|---:|---:|---:|---:|---:|"]
    for t in sorted({float(r["iterations"]) for r in rows if r["algorithm"] == "dp_barker"}):
        sel, col = _heikkila_cells(rows, "dp_barker", t)
        lines.append(f"| {_thou(t)} | {float(sel[0]['epsilon_exact']):.3f} | {fmt_pm(*col('mean_error')[:2])} | "
                     f"{fmt_pm(*col('variance_error')[:2])} | {col('var1')[0]:.3f}, {col('var2')[0]:.3f} | "
                     f"{fmt_pm(*col('sym_kl')[:2])} |")
    return "\n".join(lines)


def _relations(results_dir):
    return {float(r["iterations"]): r for r in load("heikkila_fig23_relations", results_dir)}


def heikkila_sgld_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Heikkilä Fig. 3, the two DP-SGLD lines at the paper's settings: ε under both relations."""
    rows = load("heikkila_fig23", results_dir)
    rel = _relations(results_dir)
    lines = ["| line | t | ε, add/remove (RDP, as run) | ε, substitution (PLD) | mean error | variance error vs p "
             "| variance error vs p² | variances (θ1, θ2) | sym. KL |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for a, label in (("dp_sgld", "`dp_sgld` (eq. 4)"), ("dp_sgld_authors", "`dp_sgld_authors`")):
        for i, t in enumerate(_T_SGLD):
            sel, col = _heikkila_cells(rows, a, t)
            lines.append(f"| {label if i == 0 else ''} | {_thou(t)} | {float(sel[0]['epsilon_exact']):.3f} | "
                         f"{float(rel[t]['epsilon_substitute_pld']):.3f} | {fmt_pm(*col('mean_error')[:2])} | "
                         f"{fmt_pm(*col('variance_error')[:2])} | {fmt_pm(*col('variance_error_p2')[:2])} | "
                         f"{col('var1')[0]:.3f}, {col('var2')[0]:.3f} | {fmt_pm(*col('sym_kl')[:2])} |")
    sel, col = _heikkila_cells(rows, "dp_barker", 20000)
    e = float(sel[0]["epsilon_exact"])
    lines.append(f"| DP Barker | 20 000 | (not analysed) | {e:.3f} (RDP) | {fmt_pm(*col('mean_error')[:2])} | "
                 f"{fmt_pm(*col('variance_error')[:2])} | | {col('var1')[0]:.3f}, {col('var2')[0]:.3f} | "
                 f"{fmt_pm(*col('sym_kl')[:2])} |")
    return "\n".join(lines)


def heikkila_p2_check_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """The p² check (ε ≈ 60, not private): both SGLD lines at t = 4 000, mean ± s.e. (2 repeats)."""
    rows = load("heikkila_fig23_sgld_check", results_dir)
    lines = ["| line | t | variances (θ1, θ2) | variance error vs p | variance error vs p² | mean error | sym. KL |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for a, label in (("dp_sgld", "`dp_sgld` (eq. 4, η = 4η')"), ("dp_sgld_authors", "`dp_sgld_authors` (θ += η'ĝ + N(0, η'))")):
        t = max(float(r["iterations"]) for r in rows if r["algorithm"] == a)
        sel, col = _heikkila_cells(rows, a, t)
        lines.append(f"| {label} | {_thou(t)} | {col('var1')[0]:.3f}, {col('var2')[0]:.3f} | "
                     f"{fmt_pm(*col('variance_error')[:2])} | {fmt_pm(*col('variance_error_p2')[:2])} | "
                     f"{fmt_pm(*col('mean_error')[:2])} | {fmt_pm(*col('sym_kl')[:2])} |")
    return "\n".join(lines)


def heikkila_relations_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """The DP-SGLD chains' ε at each scored t under both relations, against DP Barker's."""
    rows = load("heikkila_fig23", results_dir)
    barker = float(_heikkila_cells(rows, "dp_barker", 20000)[0][0]["epsilon_exact"])
    lines = ["| t | add/remove, RDP (as run, the authors' accounting) | add/remove, PLD | substitution, PLD "
             "(the kernels' accountant) | RDP at half the noise multiplier (the issue's estimate) "
             f"| substitution ε (PLD) ≤ DP Barker's {barker:.3f}? |", "|---:|---:|---:|---:|---:|---|"]
    for t, r in sorted(_relations(results_dir).items()):
        sub = float(r["epsilon_substitute_pld"])
        lines.append(f"| {_thou(t)} | {float(r['epsilon_add_remove_rdp']):.3f} | {float(r['epsilon_add_remove_pld']):.3f} | "
                     f"{sub:.3f} | {float(r['epsilon_substitute_rdp_group']):.2f} | "
                     f"{'yes' if sub <= barker else 'no (' + format(sub / barker, '.1f') + '×)'} |")
    return "\n".join(lines)


def fastmh_fig4_table(results_dir: pathlib.Path = SHIPPED, eps: float = 0.05, n: int = 50_000) -> str:
    """Zhang & Zhang App. Fig. 4 from the Fig. 1 CSV: rows read per iteration, rows read by
    t = 10⁴ and the sym. KL there (each repeat), at ε = ``eps`` (DP Barker at 0.2)."""
    rows = load("fastmh_fig1", results_dir)
    lines = ["| line (ε) | rows read per iteration (repeat 0 / 1) | rows read by t = 10⁴ (repeat 0) | "
             "sym. KL at t = 10⁴ (repeat 0 / 1) |", "|---|---:|---:|---:|"]
    for a in ("exact", "dp_fast_mh", "dp_fast_mh_pff", "dp_fast_mh_pff_k60", "dp_fast_mh_full", "dp_penalty",
              "dp_barker"):
        e = 0.2 if a == "dp_barker" else eps
        sel = sorted((r for r in rows if r["algorithm"] == a and float(r["epsilon"]) == e
                      and int(r["iterations"]) == 10000 and r["sym_kl"] not in ("", "nan")), key=lambda r: r["repeat"])
        if not sel:
            continue
        if a == "exact":
            rate = "– (exact draws)"
            total = "–"
        else:
            rr = [_rows_read(r, n) for r in sel]
            rate = " / ".join(_thou(x) for x in rr)
            total = _sci(10000 * rr[0])
        kl = " / ".join(f"{float(r['sym_kl']):.2f}" for r in sel)
        lines.append(f"| {NAMES.get(a, a) if a != 'dp_fast_mh_pff' else 'DP-Fast MH (K = εN, privacy for free, opt-in)'} "
                     f"({fmt_level(e) if a != 'exact' else '–'}) | {rate} | {total} | {kl} |")
    return "\n".join(lines)


def _sci(x: float) -> str:
    """``3.5·10⁸`` (two significant digits).

    >>> _sci(348300000.0), _sci(50000000.0)
    ('3.5·10⁸', '5.0·10⁷')
    """
    e = math.floor(math.log10(x))
    m = round(x / 10 ** e, 1)
    if m >= 10:
        m, e = m / 10, e + 1
    return f"{m:.1f}·10" + "".join("⁰¹²³⁴⁵⁶⁷⁸⁹"[int(c)] for c in str(e))


def _rows_read(row: dict, n: int) -> float:
    """experiments.fastmh.rows_read_per_iteration, without importing torch."""
    b = float(row["batch_size"])
    f = row.get("full_batch_fraction", "")
    if row["algorithm"].startswith("dp_fast_mh") and row["algorithm"] != "dp_fast_mh_full" and f not in ("", "nan"):
        return (1 - float(f)) * b + float(f) * n
    return b


def heikkila_fig1_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Heikkilä Fig. 1(a)(b) at the panels' end points: total ε at δ = 1/N."""
    rows = load("heikkila_fig1", results_dir)
    pick = [("a", "q", 0.002), ("a", "q", 0.01), ("b", "iterations", 20000), ("b", "iterations", 100000)]
    lines = ["| N | " + " | ".join(f"({p}) {'q' if c == 'q' else 'T'} = {_thou(v) if v > 1 else fmt_level(v)}"
                                  for p, c, v in pick)
             + " |", "|---:|" + "---:|" * len(pick)]
    for n in sorted({int(r["n"]) for r in rows}):
        cells = []
        for p, c, v in pick:
            r = next(r for r in rows if r["panel"] == p and int(r["n"]) == n and float(r[c]) == float(v))
            cells.append(f"{float(r['epsilon_mironov']):.2f} ({float(r['epsilon_improved']):.2f})")
        lines.append(f"| 10{'⁵⁶⁷'[round(math.log10(n)) - 5]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fig63_values_table(problem: str, results_dir: pathlib.Path = SHIPPED) -> str:
    """Thesis Fig. 6.3, one problem: per clip bound b and kernel, MMD mean ± s.e. (repeats), the
    mean fraction of ratios clipped and the mean acceptance rate."""
    rows = [r for r in load("fig63", results_dir) if r["problem"] == problem]
    lines = ["| b | RWMH MMD | RWMH clipped | RWMH acc. | HMC MMD | HMC clipped | HMC acc. |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for b in sorted({float(r["clip_bound"]) for r in rows if r["algorithm"] != "exact"}):
        cells = []
        for a in ("rwmh", "hmc"):
            sel = [r for r in rows if r["algorithm"] == a and float(r["clip_bound"]) == b]
            m, se, n = _mse([float(r["mmd"]) for r in sel])
            clipped = sum(float(r["clipped_fraction"]) for r in sel) / n
            acc = sum(float(r["acceptance"]) for r in sel) / n
            cells += [f"{m:.3f} ± {se:.3f} ({n})", f"{100 * clipped:.2g} %", f"{acc:.2f}"]
        lines.append(f"| {fmt_level(b)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fig63_paired_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Thesis Fig. 6.3: paired differences MMD(b) − MMD(b = 1000) over the same repeats."""
    rows = load("fig63", results_dir)
    lines = ["| problem | kernel | b = 0.5 | b = 1 | b = 2 |", "|---|---|---:|---:|---:|"]
    for p in ("flat-banana-2d", "flat-banana-10d"):
        for a in ("rwmh", "hmc"):
            ref = values(rows, problem=p, algorithm=a, metric="mmd", level_col="clip_bound", level=1000.0)
            cells = []
            for b in (0.5, 1.0, 2.0):
                t = paired_from_values(ref, values(rows, problem=p, algorithm=a, metric="mmd",
                                                   level_col="clip_bound", level=b))
                cells.append(f"{t.mean:+.3f} ± {t.se:.3f}".replace("-", "−"))
            lines.append(f"| {p.split('-')[-1].replace('d', '-d')} | {NAMES[a]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fastmh_fig2_values_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Zhang & Zhang Fig. 2, per line over the seeds: the range of the sym. KL and of the mode
    weight, the mean mode-weight error and the mean acceptance rate (a range where it is below 1 %)."""
    rows = load("fastmh_fig2", results_dir)
    exact_w = {float(r["exact_mode_weight"]) for r in rows}
    lines = [f"| line (ε) | sym. KL at 10⁴ | weight of (0, 1) (exact: {exact_w.pop():.3f}) | mean weight error | "
             "acc. (mean) |", "|---|---|---|---:|---:|"]
    labels = {"exact": "exact draws, 10⁴ (floor)", "dp_fast_mh": "`dp_fast_mh`, K = εN (0.05)",
              "dp_fast_mh_pff_k60": "`dp_fast_mh_pff_k60`, opt-in (0.05; ledger ({e}, {d}) per iteration)",
              "dp_fast_mh_full": "`dp_fast_mh_full` (0.05)", "dp_penalty": "`dp_penalty` (0.05)",
              "dp_barker": "`dp_barker` (0.2)"}
    for a, label in labels.items():
        sel = [r for r in rows if r["algorithm"] == a]
        kl = [float(r["sym_kl"]) for r in sel]
        w = [float(r["mode_weight"]) for r in sel]
        err = sum(float(r["mode_weight_error"]) for r in sel) / len(sel)
        acc = [float(r["acceptance"]) for r in sel if r["acceptance"] not in ("", "nan")]
        dk = 1 if max(kl) - min(kl) > 1 else 2  # a wide range to one decimal

        def rng(v, d, what=""):
            lo, hi = f"{min(v):.{d}f}", f"{max(v):.{d}f}"
            return f"{lo} in every seed{what}" if lo == hi else f"{lo}–{hi}"
        if a == "exact":
            ks, ws, accs = rng(kl, 2), rng(w, 3), "–"
        else:
            ks = rng(kl, dk)
            ws = rng(w, 2, " (never leaves the origin)" if min(w) == 1.0 else "")
            accs = f"{min(acc):.4f}–{max(acc):.4f}" if max(acc) < 0.01 else f"{sum(acc) / len(acc):.2f}"
        if "{e}" in label:
            label = label.format(e=f"{float(sel[0]['step_epsilon_ledger']):.2f}",
                                 d=f"{float(sel[0]['step_delta_ledger']):.3f}")
        lines.append(f"| {label} | {ks} | {ws} | {err:.3f} | {accs} |")
    return "\n".join(lines)


def _fig62(results_dir):
    """(algorithm, accounting) -> ε -> iterations, from ``fig62.csv``."""
    out: Dict[Tuple[str, str], Dict[float, int]] = {}
    for r in load("fig62", results_dir):
        out.setdefault((r["algorithm"], r["accounting"]), {})[round(float(r["epsilon"]), 6)] = int(r["iterations"])
    return out


def fig62_table(results_dir: pathlib.Path = SHIPPED, eps=(0.5, 1.0, 2.0, 4.0, 6.0)) -> str:
    """Thesis Fig. 6.2 at five ε: iterations allowed per accounting method, and tight over zCDP."""
    it = _fig62(results_dir)
    lines = ["| ε | penalty zCDP (Thm 5) | penalty tight (Thm 6) | ratio | HMC zCDP (Thm 10) | HMC tight (Thm 11) | "
             "ratio | minibatch RDP (Thm 8) | minibatch RDP (WBK19 Thm 27) | minibatch Fourier (thesis; reference only) |",
             "|---:|" + "---:|" * 9]
    for e in eps:
        cells = []
        for a in ("dp_penalty", "dp_hmc"):
            z, t = it[a, "zcdp"][e], it[a, "tight_gdp"][e]
            cells += [str(z), str(t), f"{t / z:.2f}×"]
        cells += [str(it["minibatch_dp_penalty", k][e]) for k in ("rdp", "rdp_wbk", "fourier_reference")]
        lines.append(f"| {fmt_level(e)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fig62_minibatch_ratios(d) -> str:
    it = _fig62(d)
    r = [it["minibatch_dp_penalty", "rdp_wbk"][e] / it["minibatch_dp_penalty", "rdp"][e] for e in (4.0, 6.0)]
    return f"the tighter RDP analysis allows {r[0]:.2g}× (ε = 4) and {r[1]:.3g}× (ε = 6) more"


def fig65_clipping_values_table(results_dir: pathlib.Path = SHIPPED) -> str:
    """Thesis Fig. 6.7/6.8: per problem and kernel, the range over ε of the mean share of ratios
    clipped and the largest chain's (:func:`_clip`); DP-HMC's gradients: the range of the mean and
    of the s.d. over repeats."""
    rows = load("fig65", results_dir)
    lines = ["| problem | dp_penalty | dp_penalty_ocu_gwmh | dp_hmc (ratio) | dp_hmc (gradient, Fig. 6.8) |",
             "|---|---|---|---|---|"]

    def rng(v, f):
        lo, hi = f(min(v)), f(max(v))
        return lo if lo == hi else f"{lo}–{hi}"
    for p in dict.fromkeys(r["problem"] for r in rows):
        cells = []
        for a in ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc"):
            eps = sorted({float(r["epsilon"]) for r in rows if r["problem"] == p and r["algorithm"] == a})
            r_, m_ = _clip(results_dir, p, a, eps, name="fig65")
            cells.append(f"{r_} (max {m_})")
        means, sds = [], []
        for e in sorted({float(r["epsilon"]) for r in rows if r["problem"] == p and r["algorithm"] == "dp_hmc"}):
            v = [100 * float(r["grad_clipped_fraction"]) for r in rows if r["problem"] == p
                 and r["algorithm"] == "dp_hmc" and float(r["epsilon"]) == e]
            m = sum(v) / len(v)
            means.append(m)
            sds.append(math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)))
        cells.append(f"{rng(means, lambda x: f'{x:.1f}' if x < 20 else f'{x:.0f}')} % (s.d. over repeats "
                     f"{rng(sds, lambda x: f'{x:.2g}')} %)")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: generated number tables (``<!-- claims:NAME -->`` markers, like the claim tables)
NUMBER_TABLES = {
    "dphmc_fig1_mmd": lambda d: dphmc_values_table(d),
    "dphmc_fig1_replication": lambda d: replication_table("dphmc_fig1", d),
    "heikkila_barker": heikkila_barker_table,
    "heikkila_sgld": heikkila_sgld_table,
    "heikkila_relations": heikkila_relations_table,
    "heikkila_p2_check": heikkila_p2_check_table,
    "heikkila_fig1": heikkila_fig1_table,
    "fastmh_fig4": fastmh_fig4_table,
    "fig63_flat_banana_10d": lambda d: fig63_values_table("flat-banana-10d", d),
    "fig63_flat_banana_2d": lambda d: fig63_values_table("flat-banana-2d", d),
    "fig63_paired": fig63_paired_table,
    "fastmh_fig2_values": fastmh_fig2_values_table,
    "fig62": fig62_table,
    "fig65_clipping_values": fig65_clipping_values_table,
}

#: hand-written value tables checked cell by cell (section title prefix -> CSV): tables whose header
#: is ``| problem | ε | <algorithm codes> |`` with cells ``mean ± s.e. [iterations]`` (MMD, two decimals)
VALUE_TABLE_CSVS = {"Thesis Figs 6.4": "fig64", "Thesis Figs 6.5": "fig65"}
_CELL = __import__("re").compile(r"^(\d+\.\d+) ± (\d+\.\d+)(?: \[(\d+)\])?$")


def value_table_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """Each cell ``m ± s [k]`` of the hand-written MMD tables of :data:`VALUE_TABLE_CSVS` (the
    thesis-scale subsection; the superseded n = 10⁴ one is skipped) against its CSV: ``m`` and
    ``s`` as the repeats' mean and s.e. at the printed decimals, ``k`` as the cell's iterations.
    Returns ``"section: problem, ε, algorithm: printed ≠ computed"`` for each mismatch."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        name = next((v for k, v in VALUE_TABLE_CSVS.items() if title.startswith(k)), None)
        if name is None:
            continue
        sec = sec.split("### Earlier run at n = 10⁴", 1)[0]
        rows = load(name, results_dir)
        algs = {r["algorithm"] for r in rows}
        lines = sec.split("\n")
        for i, line in enumerate(lines):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            if head[:2] != ["problem", "ε"] or not set(head[2:]) <= algs:
                continue
            for row in lines[i + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                prob, eps = cells[0], float(cells[1])
                metric = "mmd"
                if prob.endswith(", mean error (Fig. 6.9)"):  # the same table's mean-error rows
                    prob, metric = prob.split(",")[0], "mean_error"
                for a, cell in zip(head[2:], cells[2:]):
                    m = _CELL.match(cell)
                    na = _re.fullmatch(r"n/a \((\d+) it\.\)", cell)
                    if na:  # too few iterations for an MMD: the count must be the cell's
                        its = {r["iterations"] for r in rows if r["problem"] == prob and r["algorithm"] == a
                               and math.isclose(float(r["epsilon"]), eps)}
                        if its != {na.group(1)}:
                            bad.append(f"{title[:40]}: {prob}, ε = {fmt_level(eps)}, {a}: {cell} ≠ {'/'.join(sorted(its))}")
                        continue
                    if not m:
                        continue
                    sel = [r for r in rows if r["problem"] == prob and r["algorithm"] == a
                           and math.isclose(float(r["epsilon"]), eps) and r[metric] not in ("", "nan")]
                    if not sel:
                        bad.append(f"{title[:40]}: {prob}, ε = {fmt_level(eps)}, {a}: no rows")
                        continue
                    mean, se, _ = _mse([float(r[metric]) for r in sel])
                    d = len(m.group(1).split(".")[1])
                    want = f"{mean:.{d}f} ± {se:.{d}f}"
                    its = {r["iterations"] for r in sel}
                    if f"{m.group(1)} ± {m.group(2)}" != want or (m.group(3) and its != {m.group(3)}):
                        bad.append(f"{title[:40]}: {prob}, ε = {fmt_level(eps)}, {a}: {cell} ≠ {want} [{'/'.join(sorted(its))}]")
    return bad


#: sections whose prose ``mean ± s.e.`` quotes must each be in a checked table of the section
#: (generated, or a value table of :func:`value_table_problems`); the text before a superseded
#: subsection only
PM_CHECKED = ("Thesis Figs 6.4", "Thesis Figs 6.5", "DP-HMC paper", "Heikkilä et al. 2019, Figs", "Zhang & Zhang 2023, App")
_PM = __import__("re").compile(r"(\d+\.\d+) ± (\d+\.\d+)")


def prose_pm_problems(text: str, tables: Dict[str, str]) -> List[str]:
    """``"section: a ± b"`` for each ``a ± b`` quoted in the prose of a :data:`PM_CHECKED` section
    that none of its checked tables holds."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        if not title.startswith(PM_CHECKED):
            continue
        sec = sec.split("### Earlier run at n = 10⁴", 1)[0]
        checked = "\n".join(tables.get(n, "") for n in re.findall(r"<!-- claims:(\w+) -->", sec))
        if title.startswith(("Thesis Figs 6.4", "Thesis Figs 6.5")):  # their value tables are checked cell by cell
            checked += "\n" + "\n".join(line for line in sec.split("\n") if line.lstrip().startswith("|"))
        prose = "\n".join(line for line in sec.split("\n") if not line.lstrip().startswith("|"))
        for m in _PM.finditer(prose):
            if m.group(0) not in checked:
                bad.append(f"{title[:60]}: {m.group(0)}")
    return bad


#: Zhang & Zhang Fig. 3's hand-written accuracy tables (section title prefix -> CSV)
FIG3_VALUE_TABLE_CSVS = {"Zhang & Zhang 2023, Fig. 3(a)–(c): logistic regression on MNIST": "fastmh_fig3_mnist",
                         "Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset": "fastmh_fig3"}
_FIG3_HEAD = "| line | ε = 0.01 | ε = 0.05 | ε = 0.2 | ε = 0.5 | rows read / iteration (ε = 0.01, 0.05, 0.2, 0.5) |"


def fig3_value_table_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """Zhang & Zhang Fig. 3's per-line tables, cell by cell: each ``m ± s`` test accuracy (per ε; "(no ε)"
    lines over all their rows), each line's rows read per iteration (integers, per ε) and its
    acceptance (two decimals, at the ε its header names), against the section's CSV (DP-Fast MH at
    §6.2's K, :func:`_fig3_main_rows`). Returns ``"section: line, column: printed ≠ computed"``."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        name = next((v for k, v in FIG3_VALUE_TABLE_CSVS.items() if title.startswith(k)), None)
        if name is None or _FIG3_HEAD not in sec:
            continue
        rows = _fig3_main_rows(load(name, results_dir))
        lines = sec.split(_FIG3_HEAD, 1)[1].split("\n")
        acc_eps = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", lines[0].split("acceptance at", 1)[1])]
        for row in lines[2:]:
            if not row.lstrip().startswith("|"):
                break
            cells = [c.strip() for c in row.strip().strip("|").split("|")]
            m = re.match(r"`(\w+)`", cells[0])
            if not m:
                continue
            a = m.group(1)
            mine = [r for r in rows if r["algorithm"] == a]

            def at(e):
                return [r for r in mine if e is None or math.isclose(float(r["epsilon"]), e)]

            def cmp(col, printed, computed):
                if printed != computed:
                    bad.append(f"{title[:40]}: {a}, {col}: {printed} ≠ {computed}")

            for e, cell in zip((0.01, 0.05, 0.2, 0.5), cells[1:5]):
                mm = re.match(r"(\d+\.\d+) ± (\d+\.\d+)( \(no ε\))?", cell)
                if not mm:
                    continue
                sel = at(None if mm.group(3) else e)
                mean, se, _ = _mse([float(r["test_accuracy"]) for r in sel])
                d = len(mm.group(1).split(".")[1])
                cmp(f"accuracy at ε = {fmt_level(e)}", f"{mm.group(1)} ± {mm.group(2)}", f"{mean:.{d}f} ± {se:.{d}f}")
            read = [x.strip() for x in cells[5].split(",")]
            if all(x.isdigit() for x in read):
                eps = (None,) if len(read) == 1 else (0.01, 0.05, 0.2, 0.5)
                for e, x in zip(eps, read):
                    v = [float(r["rows_read"]) for r in at(e) if r["rows_read"] not in ("", "nan")]
                    cmp(f"rows read at ε = {fmt_level(e) if e else 'all'}", x, f"{sum(v) / len(v):.0f}")
            accs = [x.strip() for x in cells[6].split(",")]
            if all(re.fullmatch(r"\d\.\d+", x) for x in accs):
                eps = (None,) if len(accs) == 1 and len(acc_eps) != 1 else acc_eps
                if a in ("mh", "tunamh"):
                    eps = (None,)
                for e, x in zip(eps, accs):
                    v = [float(r["acceptance"]) for r in at(e)]
                    cmp(f"acceptance at ε = {fmt_level(e) if e else 'all'}", x, f"{sum(v) / len(v):.{len(x) - 2}f}")
    return bad


_K_HEAD = __import__("re").compile(r"^\| ε \| K = .*\|$")


def fig3_k_value_table_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """Zhang & Zhang Fig. 3(c)'s hand-written K tables (full MNIST and the subset), cell by cell:
    ``accuracy mean ± s.e.; mean rows read; ledger ε per iteration`` of DP-Fast MH at that ε and K
    (the header's K, or the cell's ``(K = …)``), against the section's CSV at the printed precision."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        name = next((v for k, v in FIG3_VALUE_TABLE_CSVS.items() if title.startswith(k)), None)
        lines = sec.split("\n")
        heads = [i for i, line in enumerate(lines) if _K_HEAD.match(line)]
        if name is None or not heads:
            continue
        rows = [r for r in load(name, results_dir) if r["algorithm"] == "dp_fast_mh"]
        for i in heads:
            ks = [re.match(r"K = (\d+)", c.strip()) for c in lines[i].strip().strip("|").split("|")[1:]]
            for row in lines[i + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                e = float(cells[0])
                for k, cell in zip(ks, cells[1:]):
                    own = re.match(r"\(K = (\d+)\) ", cell)
                    kk = own.group(1) if own else (k.group(1) if k else None)
                    m = re.search(r"(\d+\.\d+) ± (\d+\.\d+); (\d+); (\d+(?:\.\d+)?)$", cell)
                    if kk is None or m is None:
                        continue
                    sel = [r for r in rows if r["K"] == kk and math.isclose(float(r["epsilon"]), e)]
                    if not sel:
                        bad.append(f"{title[:40]}: K = {kk}, ε = {fmt_level(e)}: no rows")
                        continue
                    mean, se, _ = _mse([float(r["test_accuracy"]) for r in sel])
                    d = len(m.group(1).split(".")[1])
                    want = f"{mean:.{d}f} ± {se:.{d}f}"
                    read = sum(float(r["rows_read"]) for r in sel) / len(sel)
                    led = {float(r["step_epsilon_ledger"]) for r in sel if r["step_epsilon_ledger"] not in ("", "nan")}
                    if (f"{m.group(1)} ± {m.group(2)}" != want or m.group(3) != f"{read:.0f}"
                            or not led or not all(_rounds_to(m.group(4), x) for x in led)):
                        bad.append(f"{title[:40]}: K = {kk}, ε = {fmt_level(e)}: {m.group(0)} ≠ {want}; {read:.0f}; "
                                   f"{'/'.join(f'{x:.3g}' for x in sorted(led))}")
    return bad


#: the superseded n = 10⁴ tables of Figs 6.4 and 6.5: column name -> algorithm
_N1E4_COLS = {"penalty": "dp_penalty", "OCU+GWMH": "dp_penalty_ocu_gwmh", "DP-HMC": "dp_hmc", "Barker": "dp_barker",
              "minibatch": "minibatch_dp_penalty", "exact": "exact"}
_N1E4_CELL = __import__("re").compile(r"^(\d+\.\d+) ± (\d+\.\d+)(?: \((\d+) %\))?$")


def _n1e4_table_lines(sec: str) -> List[str]:
    body = sec.split("### Earlier run at n = 10⁴", 1)[1] if "### Earlier run at n = 10⁴" in sec else ""
    lines = body.split("\n")
    out = []
    for i, line in enumerate(lines):
        head = [c.strip() for c in line.strip().strip("|").split("|")]
        if head[:2] == ["problem", "ε"] and set(head[2:]) <= set(_N1E4_COLS):
            for row in lines[i + 2:]:
                if not row.lstrip().startswith("|"):
                    break
                out.append((head, row))
    return out


def n1e4_table_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """The superseded n = 10⁴ tables of Figs 6.4 and 6.5, cell by cell against ``fig64_n1e4.csv`` and
    ``fig65_n1e4.csv``: ``m ± s (c %)`` (MMD mean and s.e., the mean share of ratios clipped), a
    lone ``m`` (the exact column, or ``a / b / c`` at the row's ε list), at the printed precision;
    rows ``circle (MMD)`` and ``circle (mean error)`` read those metrics of the circle."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        name = next((v for k, v in VALUE_TABLE_CSVS.items() if title.startswith(k)), None)
        if name is None:
            continue
        rows = load(f"{name}_n1e4", results_dir)
        for head, row in _n1e4_table_lines(sec):
            cells = [c.strip().replace("**", "") for c in row.strip().strip("|").split("|")]
            prob, metric = cells[0], "mmd"
            if prob.startswith("circle ("):
                prob, metric = "circle", "mean_error" if "mean error" in cells[0] else "mmd"
            eps = [float(x) for x in cells[1].split(" / ")]
            for col, cell in zip(head[2:], cells[2:]):
                a = _N1E4_COLS[col]

                def sel(e):
                    return [r for r in rows if r["problem"] == prob and r["algorithm"] == a
                            and math.isclose(float(r["epsilon"]), e) and r[metric] not in ("", "nan")]
                m = _N1E4_CELL.match(cell)
                if m:
                    v = sel(eps[0])
                    mean, se, _ = _mse([float(r[metric]) for r in v]) if v else (math.nan, math.nan, 0)
                    ok = _rounds_to(m.group(1), mean) and _rounds_to(m.group(2), se)
                    if m.group(3) is not None:
                        cf = [100 * float(r["clipped_fraction"]) for r in v if r["clipped_fraction"] not in ("", "nan")]
                        ok = ok and bool(cf) and _rounds_to(m.group(3), sum(cf) / len(cf))
                    if not ok:
                        bad.append(f"{title[:40]}, n = 10⁴: {cells[0]}, ε = {cells[1]}, {a}: {cell} ≠ {mean:.3f} ± {se:.3f}")
                    continue
                parts = cell.split(" / ")
                if all(re.fullmatch(r"\d+\.\d+", x) for x in parts):
                    at = eps if len(parts) == len(eps) else [eps[0]] * len(parts)
                    for e, x in zip(at, parts):
                        v = [float(r[metric]) for r in sel(e)]
                        if not v or not _rounds_to(x, sum(v) / len(v)):
                            bad.append(f"{title[:40]}, n = 10⁴: {cells[0]}, ε = {fmt_level(e)}, {a}: {x} ≠ "
                                       f"{(sum(v) / len(v)) if v else 'none'}")
    return bad


_FIG63_N1E4_HEAD = "| b | RWMH MMD | RWMH clipped | HMC MMD | HMC clipped |"


def fig63_n1e4_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """Fig. 6.3's superseded n = 10⁴ table (one chain per bound) against ``fig63_n1e4.csv``: each MMD
    and clipped share at the printed precision."""
    if _FIG63_N1E4_HEAD not in text:
        return []
    rows = load("fig63_n1e4", results_dir)
    bad = []
    for row in text.split(_FIG63_N1E4_HEAD, 1)[1].split("\n")[2:]:
        if not row.lstrip().startswith("|"):
            break
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        b = float(cells[0])
        for a, mmd, clipped in (("rwmh", cells[1], cells[2]), ("hmc", cells[3], cells[4])):
            r = next((r for r in rows if r["algorithm"] == a and float(r["clip_bound"]) == b), None)
            if r is None or not _rounds_to(mmd, float(r["mmd"])) or not _rounds_to(
                    clipped.rstrip(" %"), 100 * float(r["clipped_fraction"])):
                bad.append(f"Fig. 6.3 n = 10⁴ table: b = {cells[0]}, {a}: {mmd}, {clipped} ≠ "
                           f"{'none' if r is None else r['mmd'][:6] + ', ' + format(100 * float(r['clipped_fraction']), '.3g')}")
    return bad


_FIG1_HEAD = "| line | ε | sym. KL | B (Alg. 1) | acc. |"


def fig1_value_table_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """Zhang & Zhang Fig. 1's hand-written table: each ``a / b`` sym. KL (repeat 0 / 1 at t = 10⁴)
    against ``fastmh_fig1.csv`` at the printed decimals (a range of ε, "0.01–0.5 … (all ε)": at
    every ε of the grid; the exact draws at ε = 0.01's rows)."""
    import re

    if _FIG1_HEAD not in text:
        return []
    rows = [r for r in load("fastmh_fig1", results_dir) if int(r["iterations"]) == 10000]
    grid = sorted({float(r["epsilon"]) for r in rows})
    bad, a = [], None
    for row in text.split(_FIG1_HEAD, 1)[1].split("\n")[2:]:
        if not row.lstrip().startswith("|"):
            break
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        m = re.match(r"`(\w+)`", cells[0])
        a = m.group(1) if m else ("exact" if cells[0].startswith("exact") else (a if not cells[0] else None))
        kl = re.match(r"(\d+\.\d+) / (\d+\.\d+)", cells[2])
        if a is None or not kl:
            continue
        if cells[1] in ("–", "0.01–0.5"):
            eps = grid[:1] if a == "exact" else grid
        elif re.fullmatch(r"\d+(\.\d+)?", cells[1]):
            eps = [float(cells[1])]
        else:
            continue
        for e in eps:
            got = []
            for rep, printed in (("0", kl.group(1)), ("1", kl.group(2))):
                v = [float(r["sym_kl"]) for r in rows if r["algorithm"] == a and r["repeat"] == rep
                     and math.isclose(float(r["epsilon"]), e)]
                got.append(f"{v[0]:.{len(printed.split('.')[1])}f}" if v else "none")
            if got != [kl.group(1), kl.group(2)]:
                bad.append(f"Zhang & Zhang Fig. 1 table: {a}, ε = {fmt_level(e)}: {kl.group(0)} ≠ {' / '.join(got)}")
            if a == "exact":
                continue
            r0 = next((r for r in rows if r["algorithm"] == a and r["repeat"] == "0"
                       and math.isclose(float(r["epsilon"]), e)), None)
            bad += [f"Zhang & Zhang Fig. 1 table: {a}, ε = {fmt_level(e)}: {p}" for p in _fig1_row_problems(cells, r0, grid, rows, a)]
    return bad


def _rounds_to(printed: str, value: float) -> bool:
    """Whether ``value`` rounds to ``printed`` at the printed precision (decimals, or the trailing zeros
    of an integer: ``2 370`` is 2 365–2 375); ``∞`` is infinity and ``10⁻⁵`` is 1e-5.

    >>> _rounds_to("2 370", 2365.7), _rounds_to("0.049", 0.04877), _rounds_to("0.75", 0.7509), _rounds_to("83.6", 83.52)
    (True, True, True, False)
    """
    p = printed.replace(" ", "").replace("*", "")
    if p == "∞":
        return math.isinf(value)
    if p.startswith("10") and p[2:] and all(ch in _SUP for ch in p[2:]):
        return math.isclose(value, 10 ** int(p[2:].translate(str.maketrans(_SUP, "-0123456789"))), rel_tol=1e-9)
    if "." in p:
        unit = 10 ** -len(p.split(".")[1])
    else:
        unit = 10 ** (len(p) - len(p.rstrip("0"))) if p.rstrip("0") else 1
    return abs(value - float(p)) <= unit / 2 + 1e-12


def _fig1_row_problems(cells, r0, grid, rows, a) -> List[str]:
    """Zhang & Zhang Fig. 1's other columns, repeat 0 at t = 10⁴: B (``batch_size``), acc.
    (``acceptance``), full-batch / un-noised share, the ledger's per-iteration (ε, δ) and the total ε."""
    if r0 is None or len(cells) < 8:
        return []
    num = r"\d[\d ]*(?:\.\d+)?(?![\d.])|∞|10[" + _SUP + "]+"
    bad = []

    def cmp(what, printed, col, row=r0):
        v = row.get(col, "")
        if v in ("", "nan"):
            bad.append(f"{what}: {printed} printed, the CSV has none")
        elif not _rounds_to(printed, float(v)):
            bad.append(f"{what}: {printed} ≠ {v}")
    for what, cell, cols in (("B", cells[3], ("batch_size",)), ("acc.", cells[4], ("acceptance",)),
                             ("shares", cells[5], ("full_batch_fraction", "free_fraction")),
                             ("total ε", cells[7], ("epsilon_total",))):
        for x, col in zip(_re.findall(num, cell.replace("*", "")), cols):
            cmp(what, x.strip(), col)
    ledger = cells[6].replace("*", "")
    if ":" in ledger:  # "(ε, 1 − e^{−ε}): δ at each ε of the grid"
        for e, x in zip(grid, _re.findall(num, ledger.split(":", 1)[1])):
            re0 = next(r for r in rows if r["algorithm"] == a and r["repeat"] == "0" and math.isclose(float(r["epsilon"]), e))
            cmp(f"δ at ε = {fmt_level(e)}", x.strip(), "step_delta_ledger", re0)
    else:
        m = _re.fullmatch(r"\((" + num + r"|ε), (" + num + r")\)", ledger)
        if m:
            if m.group(1) != "ε":
                cmp("ledger ε", m.group(1), "step_epsilon_ledger")
            cmp("ledger δ", m.group(2), "step_delta_ledger")
    return bad


_Z_PROSE = __import__("re").compile(r"z\s*=\s*\**([+−-]?)(\d+\.\d+)")
_Z_TABLE = __import__("re").compile(r"([+−-]?)(\d+\.\d+)")


def prose_z_problems(text: str, tables: Dict[str, str]) -> List[str]:
    """Every ``z = …`` quoted in a section's prose (lines outside tables) must be a value of one
    of that section's generated tables (same digits; the same sign where the prose gives one).
    Returns ``"section: quoted z"`` for each one that is not."""
    import re

    bad = []
    for sec in re.split(r"(?m)^## ", text)[1:]:
        title = sec.split("\n", 1)[0].strip()
        vals = set()
        for name in re.findall(r"<!-- claims:(\w+) -->", sec):
            for m in _Z_TABLE.finditer(tables.get(name, "")):
                vals.add((m.group(1).replace("−", "-").replace("+", ""), m.group(2)))
        prose = "\n".join(line for line in sec.split("\n") if not line.lstrip().startswith("|"))
        for m in _Z_PROSE.finditer(prose):
            sign, digits = m.group(1).replace("−", "-").replace("+", ""), m.group(2)
            ok = (sign, digits) in vals if m.group(1) else any(d == digits for _, d in vals)
            if not ok:
                bad.append(f"{title[:60]}: z = {m.group(1)}{digits}")
    return bad


# ------------------------------------------------------------- every prose number (issue #60)
#
# ``--check`` reads every number of the page outside the generated tables (prose, headings aside,
# and the hand-written tables) and sorts it, first rule first, into one of three kinds:
#
# * **checked**: a ``z = …`` or ``mean ± s.e.`` quote of a checked section (the checks above); a
#   value of a table of its section that ``--check`` recomputes (the generated tables and the
#   value tables checked cell by cell), at the printed digits or rounded from them (two significant
#   digits at least; one for a ``p = …``); a value of a CSV its section names, as the CSV prints it
#   (three significant digits or more); a cell that a value check compares; or a number of a
#   :data:`PROSE_QUOTES` sentence, computed from the CSVs;
# * **exempt**: a number that is not a measurement, by the rules of :data:`PROSE_EXEMPT` (each with
#   its reason);
# * **untraced**: everything else. These are listed, per section, in :data:`UNTRACED_FILE` (the
#   page's "Not yet reproduced" says why they are not yet checked); a number that is none of the
#   three, or a listed one that is gone, fails the check, so that every edit of a number on the
#   page is seen: a changed checked number no longer matches its table, a changed untraced one is
#   not on the list.

import collections as _collections
import json as _json
import re as _re

_SUP = "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"
#: a number as the page prints it: a sign, thousands separated by spaces or not, decimals, a power of ten
_NUMBER = _re.compile(r"(?<![\w.·" + _SUP + r"])([+−-]?)((?:\d{1,3}(?: \d{3})+(?![\d.])|\d+(?:\.\d+)?)"
                      r"(?:·10[" + _SUP + r"]+|[" + _SUP + r"]+)?)")
UNTRACED_FILE = pathlib.Path(__file__).resolve().with_name("claims_untraced.json")

#: (name, what the rule matches, reason): numbers that are not measurements. A rule is a regex on the
#: 40 characters before the number (``before``), the number itself (``number``) or the 25 after it
#: (``after``); a number in a list (``2, 6, 15``, ``27 / 94``, ``1–6``) takes the kind of the first.
PROSE_EXEMPT = (
    ("code", "inside `…`, a fenced or an indented code block, a link target",
     "a command, a file, an identifier or a flag: code, not a result"),
    ("heading or figure", "a heading line or an image line (``![…](…)``)", "a title or a figure's file name"),
    ("reference", r"before: Fig./Figs/Table/eq./Thm/Theorem/Lemma/§/Alg./ch./Section/App./issue/#/PR/"
     r"Definition/panel/version/SHA-/l./line …", "a reference to a figure, an equation, a theorem, a section or an issue"),
    ("date", "a date YYYY-MM-DD, a clock time, or a year 1990–2029",
     "when something ran or was published"),
    ("setting", "before: ε/δ/n/N/K/k/t/T/q/η/τ/L/b/c/B/σ/λ/a/d/m/A/r/M with =, ≤, ≥, <, >; p with <, ≥, > "
     "(a test's level, not a p-value); after: ``)-DP`` (the δ of a privacy level written (ε, δ)-DP); the label "
     "cells of a value table",
     "a setting of a run (privacy level, data size, batch, step, bound, budget, test level), an input"),
    ("design", "after: -d, repeats, chains, seeds, threads, workers, cores, × (in 4 × 10), -core",
     "the design of a run (dimension, repeats, chains, seeds, threads), an input"),
    ("seed range", "before: seeds/repeats/repeat …", "which seeds ran: an input"),
    ("paper value", "inside a phrase of :data:`PAPER_QUOTES`", "a value quoted from a paper or its code"),
    ("code setting", "inside a phrase of :data:`CODE_SETTINGS` (each checked against a snippet of the code that runs it)",
     "a setting of a run or a model, as the code sets it"),
)

def _cell_hours(results_dir) -> Dict[str, float]:
    """CSV name -> the chains' own times (column ``seconds``) summed, in hours."""
    out = {}
    for path in sorted(pathlib.Path(results_dir).glob("*.csv")):
        rows = load(path.stem, results_dir)
        if rows and "seconds" in rows[0]:
            out[path.stem] = sum(float(r["seconds"]) for r in rows if r["seconds"] not in ("", "nan")) / 3600
    return out


def _top_hours(d) -> str:
    h = _cell_hours(d)
    total = sum(h.values())
    return (f"add up to **about {total:.0f} cell-hours** — Fig. 6.4 {h['fig64']:.1f}, Fig. 6.5 {h['fig65']:.1f}, "
            f"Fig. 6.3 {h['fig63']:.1f}, the DP-HMC paper's Fig. 1 {h['dphmc_fig1']:.1f}, Heikkilä et al.'s Figs 2–3 "
            f"{h['heikkila_fig23']:.1f}, Zhang & Zhang's Fig. 3 on full MNIST {h['fastmh_fig3_mnist']:.1f} (compiled), "
            f"Fig. 1 {h['fastmh_fig1']:.1f} (Figs 2 and 3 on the subset: {h['fastmh_fig2']:.1f} and "
            f"{h['fastmh_fig3']:.1f}), the rest under an hour each — so **about {total / 2:.0f} hours of wall time with "
            "`--workers 2` on this")


def _second_set_hours(d) -> str:
    h = _cell_hours(d)
    rest = sum(v for k, v in h.items() if not k.startswith("dphmc_fig1") and not k.endswith("_n1e4"))
    return f"a second set costs what the first did, about {rest:.0f} cell-hours in all, about {rest / 2:.0f} h of wall time"


def _dphmc_lengths(problem: str, a: str, b: str, d) -> str:
    rows = load("dphmc_fig1", d)

    def its(k):
        out = []
        for e in E_DPHMC:
            v = {r["iterations"] for r in rows if r["problem"] == problem and r["algorithm"] == k
                 and float(r["epsilon"]) == e}
            out.append("/".join(sorted(v)))
        return " / ".join(out)
    where = "banana" if "banana" in problem else "Gaussian"
    return f"{where} {NAMES[a]} {its(a)} and {NAMES[b]} {its(b)}"


def _heikkila_barker_clipping(d) -> str:
    rows = [r for r in load("heikkila_fig23", d) if r["algorithm"] == "dp_barker" and float(r["iterations"]) == 20000]
    acc = sum(float(r["acceptance"]) for r in rows) / len(rows)
    cf = [100 * float(r["clipped_fraction"]) for r in rows]
    return f"DP Barker's acceptance rate is {acc:.2f}, and {min(cf):.2f}–{max(cf):.2f} % of the"


def _dphmc_ledgers(d) -> str:
    rows = [r for r in load("dphmc_fig1", d) if r["epsilon_ledger"] not in ("", "nan")]
    dev = max(abs(float(r["epsilon_ledger"]) - float(r["epsilon"])) for r in rows)
    sgld = {float(r["epsilon"]): float(r["epsilon_ledger"]) for r in rows
            if r["problem"] == _G and r["algorithm"] == "dp_sgld" and r["repeat"] == "0"}
    return (f"are within {math.ceil(dev * 1e4)}·10⁻⁴ of the target (e.g. the Gaussian's DP-SGLD {sgld[2.0]:.5f} "
            f"at ε = 2, {sgld[15.0]:.5f} at ε = 15)")


def _fastmh_fig1_curves(d) -> str:
    rows = [r for r in load("fastmh_fig1", d) if r["repeat"] == "0" and float(r["epsilon"]) == 0.05]

    def kl(a):
        return [float(r["sym_kl"]) for t in (1000, 2000, 4000, 6000, 10000) for r in rows
                if r["algorithm"] == a and int(r["iterations"]) == t]

    def wall(a):
        return next(float(r["wall_seconds"]) for r in rows if r["algorithm"] == a and int(r["iterations"]) == 10000)
    out = "exact " + " / ".join(f"{x:.2f}" for x in kl("exact"))
    for a in ("dp_penalty", "dp_fast_mh_pff_k60", "dp_fast_mh_full"):
        out += f"; `{a}` " + " / ".join(f"{x:.2f}" for x in kl(a)) + f" ({wall(a):.0f} s)"
    stuck = {f"{x:.1f}" for a in ("dp_fast_mh", "dp_fast_mh_pff") for x in kl(a)}
    walls = " and ".join(dict.fromkeys(f"{wall(a):.0f}" for a in ("dp_fast_mh", "dp_fast_mh_pff")))
    return out + f"; `dp_fast_mh` and `dp_fast_mh_pff` {'/'.join(sorted(stuck))} throughout ({walls} s)"


def _clip(d, problem: str, a: str, eps, col: str = "clipped_fraction", name: str = "fig64") -> Tuple[str, str]:
    """The range over ``eps`` of a kernel's mean clipped share per cell, and the largest chain's,
    in % (one decimal below 20 %, none above): ``("0.6–2.0 %", "6.5 %")``."""
    rows = load(name, d)
    means, top = [], 0.0
    for e in eps:
        v = [100 * float(r[col]) for r in rows if r["problem"] == problem and r["algorithm"] == a
             and float(r["epsilon"]) == float(e) and r[col] not in ("", "nan")]
        if v:
            means.append(sum(v) / len(v))
            top = max(top, max(v))
    f = lambda x: f"{x:.1f}" if x < 20 else f"{x:.0f}"  # noqa: E731
    lo, hi = f(min(means)), f(max(means))
    return (lo if lo == hi else f"{lo}–{hi}") + " %", f"{f(top)} %"


def _clip_means(d, problems, algs, name: str = "fig64", eps=(1, 2, 3, 4, 5, 6)) -> str:
    """The range of the cells' mean clipped share over ``problems`` × ``algs`` × ``eps``, in % at
    :func:`_clip`'s rule (one decimal below 20 %, none above)."""
    means = []
    for p in problems:
        for a in algs:
            for e in eps:
                v = [100 * float(r["clipped_fraction"]) for r in load(name, d) if r["problem"] == p
                     and r["algorithm"] == a and float(r["epsilon"]) == float(e) and r["clipped_fraction"] not in ("", "nan")]
                if v:
                    means.append(sum(v) / len(v))
    f = lambda x: f"{x:.1f}" if x < 20 else f"{x:.0f}"  # noqa: E731
    lo, hi = f(min(means)), f(max(means))
    return (lo if lo == hi else f"{lo}–{hi}") + " %"


def _clip_fig64_summary(d) -> str:
    """Fig. 6.6's clipped shares per kernel and problem, the ranges of the cell means over ε = 1–6."""
    F2, T2, F10, T10 = "flat-banana-2d", "tempered-banana-2d", "flat-banana-10d", "tempered-banana-10d"
    full = ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc")
    mb, mo = "minibatch_dp_penalty", "minibatch_dp_penalty_ocu_gwmh"
    c = lambda p, *a: _clip_means(d, (p,), a)  # noqa: E731
    b10 = _clip_means(d, (F10,), ("dp_barker",)).replace(" %", "")
    per_eps = [_clip_means(d, (F10,), ("dp_barker",), eps=(e,)) for e in (1, 2, 3, 4, 5, 6)]
    lo = min(float(x[:-2]) for x in per_eps)
    hi = max(float(x[:-2]) for x in per_eps)
    rows = [r for r in load("fig64", d) if r["problem"] == F10 and r["algorithm"] == "dp_barker"]
    cells = {}
    for r in rows:
        cells.setdefault(r["epsilon"], []).append(100 * float(r["clipped_fraction"]))
    means = [sum(v) / len(v) for v in cells.values()]
    return (f"In 2-d, the mean ratio clipped fraction per cell is {c(F2, *full)} for the full-data kernels on the "
            f"flat banana and {c(T2, *full)} on the tempered one; the minibatch penalty clips {c(F2, mb)} (flat) and "
            f"{c(T2, mb)} (tempered), the minibatch OCU+GWMH {c(F2, mo)} and {c(T2, mo)}. In 10-d: DP penalty "
            f"{c(F10, 'dp_penalty')} (flat) and {c(T10, 'dp_penalty')} (tempered), OCU+GWMH "
            f"{c(F10, 'dp_penalty_ocu_gwmh')} and {c(T10, 'dp_penalty_ocu_gwmh')}, DP-HMC {c(F10, 'dp_hmc')} and "
            f"{c(T10, 'dp_hmc')} of its ratios, the minibatch penalty {c(F10, mb)} and {c(T10, mb)}, the minibatch "
            f"OCU+GWMH {c(F10, mo)} and {c(T10, mo)}. DP Barker clips {c(F2, 'dp_barker')} (flat 2-d), {b10} % (flat "
            f"10-d; {min(means):.1f}–{max(means):.1f} % per ε) and {_clip_means(d, (T2, T10), ('dp_barker',))} "
            "(tempered): its bound is fixed by its privacy proof.")


def _clip_f10_6(d) -> Tuple[str, str]:
    F10 = "flat-banana-10d"
    c = lambda a, col="clipped_fraction", eps=(6,): _clip(d, F10, a, eps, col)  # noqa: E731
    (p, pm), (o, _), (h, _), (g, _), (b, _) = (c("dp_penalty"), c("dp_penalty_ocu_gwmh"), c("dp_hmc"),
                                               c("dp_hmc", "grad_clipped_fraction"), c("minibatch_dp_penalty"))
    bk = _cell_means("fig64", d, "clipped_fraction", scale=100)
    per_eps = [v for (p_, a, _), v in bk.items() if p_ == F10 and a == "dp_barker"]
    return (f"Clipping as at ε ≤ 5: {p} (max {pm}) and {o} for the penalty kernels, DP-HMC {h} of its ratios and "
            f"{g} of its gradients, DP Barker {bk[(F10, 'dp_barker', 6.0)]:.1f} %, the minibatch penalty {b}.",
            f"DP Barker's ratio bound clips {min(per_eps):.1f}–{max(per_eps):.1f} % of the batch ratios there at every ε.")


def _clip_t10_more(d) -> Tuple[str, str]:
    T10 = "tempered-banana-10d"
    (m, mm) = _clip(d, T10, "minibatch_dp_penalty", (4,))
    (h, _), (g, _) = _clip(d, T10, "dp_hmc", (5, 6)), _clip(d, T10, "dp_hmc", (5, 6), "grad_clipped_fraction")
    return (f"{m} of its ratios clipped (max {mm})", f"(DP-HMC\nclips {h} of its ratios and {g} of its gradients)")


def _clip_t10_low(d) -> str:
    c = lambda a, col="clipped_fraction": _clip(d, "tempered-banana-10d", a, (1, 2, 3), col)  # noqa: E731
    (p, pm), (o, om), (h, hm), (g, gm), (b, bm), (k, km) = (c("dp_penalty"), c("dp_penalty_ocu_gwmh"), c("dp_hmc"),
                                                            c("dp_hmc", "grad_clipped_fraction"),
                                                            c("minibatch_dp_penalty"), c("dp_barker"))
    return (f"Clipping: DP penalty {p} of the ratios (max {pm}), OCU+GWMH {o} (max {om}), DP-HMC {h} of its ratios "
            f"(max {hm}) and {g} of its gradients (max {gm}), the minibatch penalty {b} (max {bm}), DP Barker {k} "
            f"(max {km}).")


def _clip_t10_4(d) -> str:
    c = lambda a, col="clipped_fraction": _clip(d, "tempered-banana-10d", a, (4,), col)  # noqa: E731
    (p, pm), (o, om), (h, hm), (g, gm), (k, km) = (c("dp_penalty"), c("dp_penalty_ocu_gwmh"), c("dp_hmc"),
                                                   c("dp_hmc", "grad_clipped_fraction"), c("dp_barker"))
    return (f"Clipping: DP penalty {p} of the ratios (max {pm}), OCU+GWMH {o} (max {om}), DP-HMC {h} (max {hm}) and "
            f"{g} of its gradients (max {gm}), DP Barker {k} (max {km}).")


def _clip_t10_high(d) -> str:
    c = lambda a, eps=(5, 6): _clip(d, "tempered-banana-10d", a, eps)  # noqa: E731
    (p, pm), (o, om), (b, bm), (k, km) = (c("dp_penalty", (3, 4, 5, 6)), c("dp_penalty_ocu_gwmh"),
                                          c("minibatch_dp_penalty"), c("dp_barker"))
    return (f"{p} of its ratios clipped, max {pm}), while the other three"), \
        (f"Clipping at ε = 5–6: OCU+GWMH {o} of the ratios (max {om}), the minibatch penalty {b} (max {bm}), "
         f"DP Barker {k} (max {km}).")


def _clip_f10(d) -> str:
    c = lambda a, col="clipped_fraction": _clip(d, "flat-banana-10d", a, (1, 2, 3, 4, 5), col)  # noqa: E731
    (p, pm), (o, _), (b, _), (h, _), (g, _) = (c("dp_penalty"), c("dp_penalty_ocu_gwmh"), c("minibatch_dp_penalty"),
                                               c("dp_hmc"), c("dp_hmc", "grad_clipped_fraction"))
    return (f"Clipping, the same at every ε: {p} of the ratios for DP penalty (max {pm}), {o} for OCU+GWMH and the "
            f"minibatch penalty{'' if b == o else ' (' + b + ')'}, {h} for DP-HMC's ratios and {g} of its gradients.")


def _heikkila_quotes(d) -> Tuple[str, ...]:
    rows = load("heikkila_fig23", d)
    b = [r for r in rows if r["algorithm"] == "dp_barker"]
    cs = [float(r["chain_seconds"]) for r in b if float(r["iterations"]) == 20000]
    nm = {f"{float(r['noise_multiplier']):.3f}" for r in rows if r["algorithm"].startswith("dp_sgld")}
    start = {f"{float(r['epsilon_start']):.3f}" for r in b}
    return (f"plus its start took {min(cs):.0f}–{max(cs):.0f} s ({sum(cs) / 60:.0f} min summed)",
            f"The CSV's first {len(b)} rows are DP Barker", f"the {len(rows) - len(b)} after them are the two DP-SGLD lines",
            f"the same noise multiplier ({'/'.join(sorted(nm))}, add/remove",
            f"On their own they cost ε = {'/'.join(sorted(start))} at δ = 10⁻⁶")


def _fig3_mnist_time(d) -> str:
    cs = [float(r["chain_seconds"]) for r in load("fastmh_fig3_mnist", d) if r["chain_seconds"] not in ("", "nan")]
    mid = sum(20 <= x <= 60 for x in cs)
    return (f"took\n{_thou(sum(cs))} s of chain time", f"A compiled chain of\n4·10⁴ iterations took {min(cs):.0f}–"
            f"{max(cs):.0f} s ({mid} of the {len(cs)} timed chains 20–60 s).")


def _t_quantile(dof: int) -> float:
    """|z| at which the two-sided t p is :data:`LEVEL` (bisection on :func:`t_two_sided_p`)."""
    lo, hi = 0.0, 1000.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_two_sided_p(mid, dof) > LEVEL else (lo, mid)
    return hi


def _verdict_constants(d) -> Tuple[str, ...]:
    rows = load("fig65", d)
    eps = (4.0, 5.0, 6.0)
    v = lambda a, e: list(values(rows, problem="correlated-gauss", algorithm=a, metric=MMD, level=e).values())  # noqa: E731
    unpaired = [welch(v("dp_hmc", e), v("dp_penalty_ocu_gwmh", e)).z for e in eps]
    pair = [paired(rows, problem="correlated-gauss", a="dp_hmc", b="dp_penalty_ocu_gwmh", metric=MMD, level=e).z
            for e in eps]
    j = lambda zs: f"{zs[0]:.1f}, {zs[1]:.1f} and {zs[2]:.1f}"  # noqa: E731
    return (f"(at 20 repeats, |z| ≥ {_t_quantile(19):.2f})", f"detects only |z| ≥ {_t_quantile(1):.1f}",
            f"6 of 6 pairs one way give p = {sign_test([1.0] * 6)[2]:.2g}",
            f"the unpaired two-sample z is close, e.g. {j(unpaired)} against the paired {j(pair)} for DP-HMC against "
            "OCU+GWMH on the correlated Gaussian")


def _dphmc_sg_times(d) -> str:
    rows = load("dphmc_fig1", d)

    def at(p, a, e, col):
        return next(float(r[col]) for r in rows if r["problem"] == p and r["algorithm"] == a and r["repeat"] == "0"
                    and float(r["epsilon"]) == e)
    it = lambda p, a, e: _thou(at(p, a, e, "iterations"))  # noqa: E731
    sec = lambda p, a, e: at(p, a, e, "seconds")  # noqa: E731
    return (f"Gaussian DP-SGLD ({it(_G, 'dp_sgld', 15.0)} iterations a chain) {sec(_G, 'dp_sgld', 2.0):.0f} s and "
            f"DP-SGNHT ({it(_G, 'dp_sgnht', 15.0)}) {sec(_G, 'dp_sgnht', 2.0):.0f} s; banana to ε = 6, DP-SGLD "
            f"({it(_B, 'dp_sgld', 6.0)}) {sec(_B, 'dp_sgld', 2.0):.0f} s and DP-SGNHT ({it(_B, 'dp_sgnht', 6.0)}) "
            f"{sec(_B, 'dp_sgnht', 2.0):.0f} s; then the banana's DP-SGNHT to ε = 15 ({it(_B, 'dp_sgnht', 15.0)}) "
            f"appended, {sec(_B, 'dp_sgnht', 8.0) / 60:.0f} min beside a CI run, and later the banana's DP-SGLD to "
            f"ε = 15 ({it(_B, 'dp_sgld', 15.0)}) appended, {sec(_B, 'dp_sgld', 8.0) / 60:.0f} min")


def _fig3_subset_quotes(d) -> Tuple[str, str]:
    rows = load("fastmh_fig3", d)
    acc = [100 * float(r["acceptance"]) for r in rows if r["algorithm"] in ("mh", "tunamh")]
    cs = [float(r["chain_seconds"]) for r in rows if r["chain_seconds"] not in ("", "nan") and float(r["chain_seconds"]) > 0]
    mid = sum(20 <= x <= 45 for x in cs)
    return (f"the non-private chains accept\n{min(acc):.0f}–{max(acc):.0f} % of proposals",
            f"a chain takes {min(cs):.0f}–{max(cs):.0f} s ({mid} of the {len(cs)} timed chains 20–45 s).")


def _fig63_counts(d) -> str:
    rows = [r for r in load("fig63", d) if r["problem"] == "flat-banana-10d"]
    floor = max(float(r["mmd"]) for r in rows if r["algorithm"] == "exact")

    def above(a, b):
        v = [float(r["mmd"]) for r in rows if r["algorithm"] == a and float(r["clip_bound"]) == b]
        return sum(x > 0.2 for x in v), len(v), max(v)
    (h5, n, _), (h1, _, _), (r5, _, rmax) = above("hmc", 0.5), above("hmc", 1.0), above("rwmh", 0.5)
    return (f"times the largest exact-vs-exact value, {floor:.3f}; a count, not a test): 10-d HMC has {h5} of {n} such "
            f"chains at b = 0.5 and {h1} of {n} at b = 1 (acceptance 0.00 and 0.35), and none at b ≥ 2; 10-d RWMH has "
            f"{r5} of {n} at b = 0.5 (MMD ≤ {rmax:.3f}) and none above.") if all(
        above(a, b)[0] == 0 for a in ("hmc", "rwmh") for b in (2.0, 4.0, 6.0, 8.0, 10.0, 1000.0)) and above(
        "rwmh", 1.0)[0] == 0 else "(the counts changed: rewrite the sentence)"


def _cell_means(name: str, d, metric: str, keys=("problem", "algorithm", "epsilon"), scale: float = 1.0,
                rows=None) -> Dict[tuple, float]:
    """(values of ``keys``) -> the mean of ``metric`` (times ``scale``) over the repeats of that cell,
    levels as floats (blank and nan cells left out)."""
    acc: Dict[tuple, List[float]] = {}
    for r in (load(name, d) if rows is None else rows):
        if r.get(metric, "") in ("", "nan", None):
            continue
        k = tuple(float(r[c]) if c in ("epsilon", "clip_bound", "iterations") else r[c] for c in keys)
        acc.setdefault(k, []).append(scale * float(r[metric]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def _span(vals, fmt: str = ".0f", sep: str = "–") -> str:
    """``lo–hi`` of ``vals`` at ``fmt`` (one value when both print the same)."""
    lo, hi = format(min(vals), fmt), format(max(vals), fmt)
    return lo if lo == hi else f"{lo}{sep}{hi}"


def _fig63_clipping(d) -> Tuple[str, ...]:
    keys = ("problem", "algorithm", "clip_bound")
    cf = _cell_means("fig63", d, "clipped_fraction", keys, 100)
    mmd = _cell_means("fig63", d, "mmd", keys)
    acc = _cell_means("fig63", d, "acceptance", keys)
    h10 = ("flat-banana-10d", "hmc")
    at = lambda b, skip=(): [v for k, v in cf.items() if k[2] == b and k[:2] not in skip]  # noqa: E731
    floor = lambda a: [v for k, v in mmd.items() if k[1] == a and k[2] >= 2]  # noqa: E731
    return (f"at b = 0.5 everywhere ({_span(at(0.5))} % clipped",
            f"in 10-d HMC accepts nothing, MMD {mmd[h10 + (0.5,)]:.2f}), and at b = 1 in 10-d HMC, where "
            f"{cf[h10 + (1.0,)]:.0f} % are clipped and the acceptance falls from {acc[h10 + (1000.0,)]:.2f} to "
            f"{acc[h10 + (1.0,)]:.2f}",
            f"Elsewhere at b = 1 ({_span(at(1.0, (h10,)))} % clipped) no difference is detected",
            f"from b = 2 (≤ {max(v for k, v in cf.items() if k[2] >= 2):.1f} % clipped)",
            f"(RWMH {_span(floor('rwmh'), '.2f')}, HMC {_span(floor('hmc'), '.2f')})")


def _fastmh_fig1_quotes(d) -> Tuple[str, ...]:
    """Zhang & Zhang Fig. 1's claim-by-claim numbers at t = 10⁴ from ``fastmh_fig1.csv`` (repeats
    0 and 1 as "a / b")."""
    rows = [r for r in load("fastmh_fig1", d) if int(r["iterations"]) == 10000 and r["sym_kl"] not in ("", "nan")]

    def col(a, c, e=None):
        return [float(r[c]) for r in sorted(rows, key=lambda r: int(r["repeat"])) if r["algorithm"] == a
                and (e is None or float(r["epsilon"]) == e)]
    acc = max(col("dp_fast_mh", "acceptance"))
    kl = {f"{x:.1f}" for a in ("dp_fast_mh", "dp_fast_mh_pff") for x in col(a, "sym_kl")}
    k60 = lambda c: col("dp_fast_mh_pff_k60", c, 0.05)  # noqa: E731
    rr = [_rows_read(r, 50_000) for r in sorted(rows, key=lambda r: int(r["repeat"]))
          if r["algorithm"] == "dp_fast_mh_pff_k60" and float(r["epsilon"]) == 0.05]
    full = [x for e in (0.2, 0.5) for a in ("dp_fast_mh_full", "dp_penalty") for x in col(a, "sym_kl", e)]
    bk = lambda e: " / ".join(f"{x:.1f}" for x in col("dp_barker", "sym_kl", e))  # noqa: E731
    fm = lambda e, a="dp_fast_mh_full": col(a, "sym_kl", e)  # noqa: E731
    hi = fm(0.2) + fm(0.5)
    pen_hi = fm(0.2, "dp_penalty") + fm(0.5, "dp_penalty")
    return (f"(sym. KL {'/'.join(sorted(kl))} at every ε, acceptance {'≤ 10⁻⁴' if acc <= 1e-4 else f'up to {acc:.2g}'})",
            f"the un-noised branch ran in {100 * max(col('dp_fast_mh_pff', 'free_fraction')):.2f} % of iterations",
            f"reaches sym. KL {' / '.join(f'{x:.2f}' for x in k60('sym_kl'))} at ε = 0.05",
            f"un-noised branch in {' / '.join(f'{100 * x:.0f}' for x in k60('free_fraction'))} % of iterations",
            f"read all N rows in {' / '.join(f'{100 * x:.0f}' for x in k60('full_batch_fraction'))} % of them",
            f"({' and '.join(_thou(x) for x in rr)} rows per iteration on average in the two repeats;",
            f"It has sym. KL {bk(0.2)} (ε = 0.2) and {bk(0.5)} (ε = 0.5) after 10⁴ iterations, against "
            f"{min(full):.2f}–{max(full):.2f} for the full-batch lines",
            f"Sym. KL at 10⁴ falls from {_span(fm(0.01), '.1f')} (ε = 0.01) to {_span(hi, '.1f')} (ε ≥ 0.2) for "
            f"`dp_fast_mh_full`, and from {_span(fm(0.01, 'dp_penalty'), '.2f')} to {_span(pen_hi, '.2f')} for "
            "`dp_penalty`")


def _fastmh_fig1_speed(d) -> str:
    rows = [r for r in load("fastmh_fig1", d) if r["repeat"] == "0" and float(r["epsilon"]) == 0.05]
    at = lambda a, t, c="sym_kl": next(float(r[c]) for r in rows if r["algorithm"] == a  # noqa: E731
                                       and int(r["iterations"]) == t)
    k, p = "dp_fast_mh_pff_k60", "dp_penalty"
    return (f"in iterations ({at(k, 4000):.2f} against {at(p, 4000):.2f} at t = 4000, and {at(k, 10000):.2f} against "
            f"{at(p, 10000):.2f} at 10⁴) or in wall time ({at(k, 10000, 'wall_seconds'):.0f} s against "
            f"{at(p, 10000, 'wall_seconds'):.0f} s for 10⁴ iterations). Neither is at the exact-sample floor at "
            f"t = 4000 ({at('exact', 4000):.2f})")


def _fastmh_fig4_quote(d) -> str:
    r = next(r for r in load("fastmh_fig1", d) if r["algorithm"] == "dp_fast_mh_pff_k60" and r["repeat"] == "0"
             and float(r["epsilon"]) == 0.05 and int(r["iterations"]) == 10000)
    rr = _rows_read(r, 50_000)
    return (f"reads about {_thou(round(rr, -3))} rows an iteration, because {100 * float(r['full_batch_fraction']):.0f} % "
            f"of its iterations take the full-data test: by t = 10⁴ it has read {100 * rr / 50_000:.0f} % of the rows")


def _dphmc_banana_eps2(d) -> str:
    """The banana's ε = 2 MMD claim (DP penalty − DP-HMC) in seeds 0–9, seeds 10–19 and all 20
    seeds paired together: the two kernels' means in seeds 0–9, each z and the p's."""
    r1, r2 = load("dphmc_fig1", d), load("dphmc_fig1_replication", d)
    t = [paired(rows, problem=_B, a="dp_hmc", b="dp_penalty", metric=MMD, level=2.0) for rows in (r1, r2, r1 + r2)]
    m = lambda a: values(r1, problem=_B, algorithm=a, metric=MMD, level=2.0)  # noqa: E731
    mean = lambda v: sum(v.values()) / len(v)  # noqa: E731
    z = [fmt_z(x).strip("*") for x in t]
    return (f"(DP-HMC lower, {mean(m('dp_hmc')):.2f} against {mean(m('dp_penalty')):.2f}, z = {z[0]}, p = {t[0].p:.2f}), "
            f"but seeds 10–19 do not repeat it (z = {z[1]}; over all 20 seeds z = {z[2]}, p = {t[2].p:.2f})")


def _heikkila_sgld_cost(d) -> str:
    """The two DP-SGLD lines' time: column ``chain_seconds`` (the vectorised run's wall time over its
    chains), and that times the chains of the line."""
    rows = load("heikkila_fig23", d)
    out = []
    for a in ("dp_sgld", "dp_sgld_authors"):
        v = [r for r in rows if r["algorithm"] == a]
        cs = {float(r["chain_seconds"]) for r in v}
        out.append((len({r["repeat"] for r in v}) * max(cs) / 60, max(cs)))
    (m1, s1), (m2, s2) = out
    return f"The two lines took {m1:.0f} and {m2:.0f} min of wall time ({s1:.0f} and {s2:.0f} s per chain)"


def _fig3_mnist_rows_read(d) -> Tuple[str, str]:
    """Fig. 3(b) on full MNIST: mean rows read per iteration (column ``rows_read``) of DP-Fast MH at
    §6.2's K and of DP Barker, and as a share of N = 12 214."""
    rows = _fig3_main_rows(load("fastmh_fig3_mnist", d))
    n = 12_214

    def rr(a, e):
        v = [float(r["rows_read"]) for r in rows if r["algorithm"] == a and math.isclose(float(r["epsilon"]), e)
             and r["rows_read"] not in ("", "nan")]
        return sum(v) / len(v)
    full = all(round(rr("dp_fast_mh", e)) == n for e in (0.01, 0.05, 0.2))
    f5, b2, b5 = rr("dp_fast_mh", 0.5), rr("dp_barker", 0.2), rr("dp_barker", 0.5)
    return ((f"DP-Fast MH at §6.2's K reads all {_thou(n)} rows per iteration at ε ≤ 0.2, and {_thou(round(f5))} "
             f"({100 * f5 / n:.0f} %) at ε = 0.5") if full else "(DP-Fast MH's rows read changed: rewrite)",
            f"DP Barker reads {_thou(round(b2))} ({100 * b2 / n:.0f} %) at ε = 0.2 and {_thou(round(b5))} "
            f"({100 * b5 / n:.0f} %) at ε = 0.5")


def _yildirim_quotes(d) -> Tuple[str, str]:
    """Yıldırım: the growth of k(n) from n = 10³ to 10⁵, the mean of Thm 1's bound (3) over n, and the
    chains' mean error and sd ratio at n = 10³ and 10⁵ (means over the repeats, two decimals)."""
    rows = load("yildirim_thm1", d)
    by = lambda col, n: [float(r[col]) for r in rows if int(r["n"]) == n]  # noqa: E731
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    k = {n: max(by("k", n)) for n in (1000, 100_000)}
    thm = mean([mean(by("epsilon_thm1", n)) for n in (1000, 10_000, 100_000)])
    return (f"while the iterations grow\n{k[100_000] / k[1000]:.0f}-fold, as n/log n. The ledger certifies ε = 4 at "
            f"every n; the theorem's own bound (3) at the same noise is about {thm:.0f}",
            f"({mean(by('mean_error_sd', 1000)):.2f} → {mean(by('mean_error_sd', 100_000)):.2f} posterior sds) and sd "
            f"ratio ({mean(by('sd_ratio', 1000)):.2f} → {mean(by('sd_ratio', 100_000)):.2f})")


def _fig65_clipping(d) -> Tuple[str, str, str]:
    """Figs 6.7–6.9's clipping prose from ``fig65.csv``: the largest cell mean and the chains above
    10 % (count per kernel and problem, their range), DP-HMC's gradient share (cell means) and its
    spread (sd over repeats) on two problems, and the circle's ratio shares at ε = 0.5 and 0.75."""
    rows = load("fig65", d)
    cells: Dict[tuple, List[float]] = {}
    grads: Dict[tuple, List[float]] = {}
    for r in rows:
        if r["algorithm"] == "exact" or r["clipped_fraction"] in ("", "nan"):
            continue
        k = (r["problem"], r["algorithm"], float(r["epsilon"]))
        cells.setdefault(k, []).append(100 * float(r["clipped_fraction"]))
        if r["algorithm"] == "dp_hmc":
            grads.setdefault(k, []).append(100 * float(r["grad_clipped_fraction"]))
    sd = lambda v: math.sqrt(sum((x - sum(v) / len(v)) ** 2 for x in v) / (len(v) - 1))  # noqa: E731
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    top = max(mean(v) for v in cells.values())
    over: Dict[tuple, List[float]] = {}
    for (p, a, _), v in cells.items():
        over.setdefault((p, a), []).extend(x for x in v if x > 10)
    n_over = max(len(v) for v in over.values())
    n_chains = {len([x for (p, a, _), v in cells.items() if (p, a) == k for x in v]) for k in over if over[k]}
    above = [x for v in over.values() for x in v]
    g = lambda p, f: [f(v) for (pp, _, _), v in grads.items() if pp == p]  # noqa: E731
    circ = {a: [v for (p, aa, e), v in cells.items() if p == "circle" and aa == a and e in (0.5, 0.75)]
            for a in ("dp_penalty", "dp_penalty_ocu_gwmh", "dp_hmc")}
    hmc05 = cells[("circle", "dp_hmc", 0.5)]
    pen_sd = max(sd(v) for a in ("dp_penalty", "dp_penalty_ocu_gwmh") for v in circ[a])
    return (f"Every cell's mean clipped fraction is below {5 if top < 5 else math.ceil(top)} % and detectably below "
            f"10 % (the clipping table), and only {n_over} of {'/'.join(str(x) for x in sorted(n_chains))} chains per "
            f"kernel and problem pass 10 % ({min(above):.1f}–{max(above):.1f} %)",
            f"{_span(g('correlated-gauss', mean))} % on the correlated Gaussian with a spread of at most "
            f"{max(g('correlated-gauss', sd)):.1f} % over repeats; {_span(g('narrow-banana', mean))} % on the narrow "
            f"banana with a spread of {_span(g('narrow-banana', sd))} % over repeats (sd over the repeats)",
            f"({_span([mean(v) for vs in circ.values() for v in vs], '.1f')} % clipped; DP-HMC's spread over repeats, "
            f"{sd(hmc05):.1f} % around a mean of {mean(hmc05):.1f} %, is large relative to its mean, while the penalty "
            f"chains' spread is below {math.ceil(pen_sd * 100) / 100:.2f} %)")


def _heikkila_one_relation(d) -> Tuple[str, str]:
    """Heikkilä Fig. 3 under one relation (``heikkila_fig23_relations.csv``): DP-SGLD's substitution ε
    (PLD) at each scored t against DP Barker's ledger ε at t = 20 000, and the issue's RDP estimate
    (add/remove RDP at half the noise multiplier), as ranges and multiples of Barker's."""
    rel = _relations(d)
    b = float(_heikkila_cells(load("heikkila_fig23", d), "dp_barker", 20000)[0][0]["epsilon_exact"])
    sub = {t: float(r["epsilon_substitute_pld"]) for t, r in rel.items()}
    grp = {t: float(r["epsilon_substitute_rdp_group"]) for t, r in rel.items()}
    hi_t = [t for t in (2e6, 4e6, 6e6)]
    lo, hi = min(sub[t] for t in hi_t), max(sub[t] for t in hi_t)
    glo, ghi = min(grp[t] for t in hi_t), max(grp[t] for t in hi_t)
    ar = [float(rel[t]["epsilon_add_remove_rdp"]) for t in (5e5, 6e6)]
    below = "at or below" if sub[5e5] <= b and sub[1e6] <= b else "NOT at or below"
    return (f"Then DP-SGLD has spent ε {sub[5e5]:.2f} (t = 5·10⁵) and {sub[1e6]:.2f}\n(t = 10⁶), {below} Barker's "
            f"{b:.2f}", f"At t ≥ 2·10⁶ it has spent {lo:.2f}–{hi:.2f} ({lo / b:.1f}–{hi / b:.1f}× Barker's; "
            f"{glo:.1f}–{ghi:.1f}, {glo / b:.0f}–{ghi / b:.0f}×, by the\nissue's RDP estimate)",
            f"its ε is {ar[0]:.2f}–{ar[1]:.2f}")


def _fig3_mnist_design(d) -> Tuple[str, str]:
    """Full MNIST's §6.2 K per ε (column ``K`` of DP-Fast MH's main rows, checked against ⌈εN/6⌉ with N
    from column ``num_train``) and the grid's size (rows, seeds)."""
    rows = load("fastmh_fig3_mnist", d)
    main = _fig3_main_rows(rows)
    n = int(rows[0]["num_train"])
    ks = [sorted({int(r["K"]) for r in main if r["algorithm"] == "dp_fast_mh" and float(r["epsilon"]) == e})
          for e in (0.01, 0.05, 0.2, 0.5)]
    ok = all(k == [math.ceil(e * n / 6 - 1e-9)] for k, e in zip(ks, (0.01, 0.05, 0.2, 0.5)))
    seeds = len({r["repeat"] for r in rows})
    return ((f"K = ⌈εN/6⌉ = {', '.join(str(k[0]) for k in ks)}" if ok else "(K is not ⌈εN/6⌉: rewrite)"),
            f"**Time**: {len(rows)} chains ({len(rows) // seeds} cells a seed")


def _fig3_batches(d) -> Tuple[str, str]:
    """Fig. 3's minibatch sizes: full MNIST's mean B (column ``batch_size``) per chain of TunaMH and
    DP-Fast MH at K = 2 000 (range), and the subset's rows read per iteration at K = 2 and 200, ε = 0.05."""
    full = [float(r["batch_size"]) for r in load("fastmh_fig3_mnist", d) if r["batch_size"] not in ("", "nan")
            and (r["algorithm"] == "tunamh" or (r["algorithm"] == "dp_fast_mh" and r["K"] == "2000"))]
    sub = load("fastmh_fig3", d)
    rr = lambda k: [float(r["rows_read"]) for r in sub if r["algorithm"] == "dp_fast_mh" and r["K"] == k  # noqa: E731
                    and float(r["epsilon"]) == 0.05]
    m = lambda v: sum(v) / len(v)  # noqa: E731
    return (f"E[B] = λ + C·E[M] was **{_thou(round(min(full)))}–{_thou(round(max(full)))} rows** in every minibatch "
            "chain", f"(K = 2 reads {m(rr('2')):.0f} rows per iteration, K = 200 reads {m(rr('200')):.0f})")


def _sci_dot(x: float) -> str:
    """``1.5·10⁻⁴``: two significant digits and a power of ten, as the page prints them."""
    e = math.floor(math.log10(abs(x)))
    m = x / 10 ** e
    if round(m, 1) >= 10:
        m, e = m / 10, e + 1
    return f"{m:.1f}·10" + str(e).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))


def _dphmc_gauss_constants(d) -> Tuple[str, str]:
    """The DP-HMC paper's Gaussian from the code that builds it (``experiments/dphmc_fig1.py``:
    ``GAUSS_EIGENVALUES``, the SG step ``eta``, n): its eigenvalue range and condition number, and
    the SGLD step times the largest posterior precision."""
    import ast
    import re

    src = (ROOT / "experiments" / "dphmc_fig1.py").read_text(encoding="utf-8")
    lam = ast.literal_eval(re.search(r"GAUSS_EIGENVALUES = (\([^)]*\))", src).group(1))
    eta = float(re.search(r'"dp_sgld": dict\(batch=1000, grad_clip=15\.0, eta=([0-9.e-]+)\)', src).group(1))
    n = int(load("dphmc_fig1", d)[0]["n"])
    step, prec = 2 * eta / n, n / min(lam)
    return (f"eigenvalues {_sci_dot(min(lam))} … {max(lam):.2f}, condition number {_sci_dot(max(lam) / min(lam))}",
            f"the step 2·{eta:g}/n = {_sci_dot(step)} times the largest\nposterior precision (n/λ_min ≈ {_sci_dot(prec)}) "
            f"is about {step * prec:.0f}")


def _fig2_fast_mh(d) -> str:
    rows = load("fastmh_fig2", d)
    m = lambda a, col: sum(float(r[col]) for r in rows if r["algorithm"] == a) / sum(  # noqa: E731
        r["algorithm"] == a for r in rows)
    z = [paired_from_values(values(rows, algorithm="dp_fast_mh", metric=c), values(rows, algorithm="dp_penalty",
                                                                                  metric=c)).z
         for c in ("sym_kl", "mode_weight_error")]
    zs = [fmt_z(Paired(0, 0, 0, x, 0.0)).strip("*") for x in z]
    return (f"sym. KL is {m('dp_fast_mh', 'sym_kl'):.1f} against the penalty's {m('dp_penalty', 'sym_kl'):.2f} and its "
            f"weight error {m('dp_fast_mh', 'mode_weight_error'):.2f} against {m('dp_penalty', 'mode_weight_error'):.2f} "
            f"(z {zs[0].replace('< ', '< ')} and {zs[1]})")


def _yildirim_seconds(d) -> str:
    return f"{sum(float(r['seconds']) for r in load('yildirim_thm1', d)):.0f} s of chain time with one thread"


#: (section title prefix, phrase computed from the CSVs, what it quotes): prose sentences whose numbers
#: are generated; the phrase must be in the section (line breaks free), and its numbers count as checked
PROSE_QUOTES = [
    ("(top of the page)", _top_hours, "the chains' times, column `seconds` of every shipped CSV, summed"),
    ("(top of the page)", lambda d: f"(`PROSE_QUOTES`, {len(PROSE_QUOTES)} sentences", "the length of this list"),
    ("Not yet reproduced", _second_set_hours, "the same, less the DP-HMC paper's Fig. 1 (its own item) and the "
     "superseded n = 10⁴ runs"),
    ("DP-HMC paper", lambda d: _dphmc_lengths(_B, "dp_hmc", "dp_penalty", d), "iterations per chain"),
    ("DP-HMC paper", lambda d: _dphmc_lengths(_G, "dp_hmc", "dp_penalty", d), "iterations per chain"),
    ("DP-HMC paper", lambda d: _dphmc_lengths(_G, "dp_sgld", "dp_sgnht", d), "iterations per chain"),
    ("DP-HMC paper", lambda d: _dphmc_lengths(_B, "dp_sgld", "dp_sgnht", d), "iterations per chain"),
    ("Thesis Figs 6.4", _clip_t10_low, "clipped shares, tempered 10-d banana, ε = 1–3"),
    ("Thesis Figs 6.4", _clip_t10_4, "clipped shares, tempered 10-d banana, ε = 4"),
    ("Thesis Figs 6.4", lambda d: _clip_t10_high(d)[0], "DP penalty's clipped share, tempered 10-d banana, ε = 3–6"),
    ("Thesis Figs 6.4", lambda d: _clip_t10_high(d)[1], "clipped shares, tempered 10-d banana, ε = 5–6"),
    ("Thesis Figs 6.4", _clip_f10, "clipped shares, flat 10-d banana, ε = 1–5"),
    ("Thesis Figs 6.4", lambda d: _clip_t10_more(d)[0], "the minibatch penalty's clipped share, tempered 10-d, ε = 4"),
    ("Thesis Figs 6.4", lambda d: _clip_t10_more(d)[1], "DP-HMC's clipped shares, tempered 10-d, ε = 5–6"),
    ("Thesis Figs 6.4", lambda d: _clip_f10_6(d)[0], "clipped shares, flat 10-d banana, ε = 6"),
    ("Thesis Figs 6.4", lambda d: _clip_f10_6(d)[1], "DP Barker's mean clipped share per ε, flat 10-d banana"),
    ("Thesis Figs 6.4", _clip_fig64_summary, "clipped shares per kernel and problem: the range over ε = 1–6 of "
     "the cells' mean `clipped_fraction`, in % (one decimal below 20 %, none above)"),
    ("Thesis Fig. 6.2", _fig62_minibatch_ratios, "WBK19 Thm 27's iterations over Thm 8's"),
    ("Thesis Figs 6.4", lambda d: (lambda h: f"add up to {h['fig64']:.1f} cell-hours for this figure and {h['fig65']:.1f} "
                                   f"for Fig. 6.5, most of them measured beside other runs; the whole of both figures is "
                                   f"therefore about {h['fig64'] + h['fig65']:.0f} cell-hours, some "
                                   f"{(h['fig64'] + h['fig65']) / 2:.0f} hours of wall time")(_cell_hours(d)),
     "the chains' times (column `seconds`) of fig64.csv and fig65.csv, summed"),
    ("Thesis Fig. 6.3", lambda d: f"in 2-d and in 10-d ({len(load('fig63', d))} rows)", "fig63.csv's rows"),
    ("Thesis Fig. 6.3", lambda d: "The exact-vs-exact baseline MMD is {:.3f}".format(next(
        float(r["mmd"]) for r in load("fig63_n1e4", d) if r["algorithm"] == "exact")), "the exact baseline of fig63_n1e4.csv"),
    ("Zhang & Zhang 2023, Fig. 1", lambda d: "σ₂ = √(2 log(1.25/δ))/ε ({:.1f} at ε = 0.05)".format(
        math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.05), "Alg. 2's classical σ₂ at δ = 10⁻⁵, ε = 0.05 (the formula)"),
    ("Thesis Fig. 6.2", lambda d: "so the noise multiplier is τ√n = {:.1f}".format(
        0.1 * math.sqrt(float(load("fig62", d)[0]["n"]))), "τ√n at the CSV's n (τ = 0.1, a CODE_SETTINGS entry)"),
    ("DP-HMC paper", _dphmc_ledgers, "the largest |ledger ε − target| (rounded up) and two ledgers"),
    ("DP-HMC paper", lambda d: f"moved to their own file, {len(load('dphmc_fig1_replication', d))} rows",
     "the replication CSV's rows"),
    ("Zhang & Zhang 2023, Fig. 1", _fastmh_fig1_curves, "sym. KL of repeat 0 at ε = 0.05 at five t, and the "
     "sampler's wall time (column `wall_seconds`) at t = 10⁴"),
] + [("Heikkilä et al. 2019, Figs", lambda d, i=i: _heikkila_quotes(d)[i], what) for i, what in enumerate((
    "DP Barker's chain times (column `chain_seconds`, t = 20 000): range and sum", "the CSV's DP Barker rows",
    "the CSV's DP-SGLD rows", "the DP-SGLD lines' noise multiplier", "the start's ε (column `epsilon_start`)"))] + [
    ("Yıldırım", _yildirim_seconds, "the chains' times, column `seconds`, summed"),
    ("Zhang & Zhang 2023, Fig. 2", _fig2_fast_mh, "DP-Fast MH's and the penalty's mean sym. KL and weight error, "
     "and the paired z (penalty − DP-Fast MH)"),
] + [("Thesis Fig. 6.3", lambda d, i=i: _fig63_clipping(d)[i], what) for i, what in enumerate((
    "the range of the cells' mean clipped share (column `clipped_fraction`) at b = 0.5",
    "10-d HMC's mean MMD at b = 0.5, its clipped share at b = 1 and its mean acceptance at b = 1000 and 1",
    "the range of the other cells' clipped share at b = 1", "the largest cell's clipped share at b ≥ 2",
    "the range of the cells' mean MMD at b ≥ 2, per kernel"))] + [
] + [("Zhang & Zhang 2023, Fig. 1", lambda d, i=i: _fastmh_fig1_quotes(d)[i], what) for i, what in enumerate((
    "DP-Fast MH's sym. KL and largest acceptance at t = 10⁴", "the privacy-for-free line's largest `free_fraction`",
    "K = 60's sym. KL at ε = 0.05, repeats 0 / 1", "K = 60's `free_fraction` at ε = 0.05, repeats 0 / 1",
    "K = 60's `full_batch_fraction` at ε = 0.05, repeats 0 / 1", "K = 60's rows read per iteration, (1 − f)·B + f·N",
    "DP Barker's sym. KL per repeat, and the range of the full-batch lines' at ε ≥ 0.2",
    "the trade-off: sym. KL ranges at ε = 0.01 and ε ≥ 0.2"))] + [
    ("Zhang & Zhang 2023, Fig. 1", _fastmh_fig1_speed, "K = 60 against the penalty at t = 4000 and 10⁴, repeat 0, "
     "ε = 0.05: sym. KL and `wall_seconds`; the exact draws' sym. KL at t = 4000"),
    ("Zhang & Zhang 2023, App", _fastmh_fig4_quote, "K = 60's rows read per iteration and `full_batch_fraction`, "
     "repeat 0, ε = 0.05"),
    ("DP-HMC paper", _dphmc_banana_eps2, "the banana's ε = 2 MMD means (seeds 0–9) and the paired z and p in each "
     "seed set and over all 20 seeds"),
    ("Heikkilä et al. 2019, Figs", _heikkila_sgld_cost, "the DP-SGLD lines' `chain_seconds`, and times their 20 "
     "chains"),
] + [("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", lambda d, i=i: _fig3_mnist_rows_read(d)[i],
       "mean `rows_read` per iteration, and its share of N = 12 214, " + w) for i, w in enumerate(("DP-Fast MH",
                                                                                              "DP Barker"))] + [
    ("Yıldırım", lambda d: (lambda m: f"(+{100 * (m(100_000) / m(1000) - 1):.0f} % over a 100-fold n")(
        lambda n: (lambda v: sum(v) / len(v))([float(r["sigma_typical"]) for r in load("yildirim_thm1", d)
                                               if int(r["n"]) == n])), "the noise sd on a typical move, n = 10⁵ over 10³"),
] + [("Yıldırım", lambda d, i=i: _yildirim_quotes(d)[i], w) for i, w in enumerate((
    "k(n) at n = 10⁵ over k(n) at 10³, and Thm 1's bound (3) averaged over the three n",
    "the mean error (posterior sds) and sd ratio at n = 10³ and 10⁵, means over the repeats"))] + [
] + [("Thesis Figs 6.5", lambda d, i=i: _fig65_clipping(d)[i], w) for i, w in enumerate((
    "the largest cell's mean clipped share, and the chains above 10 % (most per kernel and problem, their range)",
    "DP-HMC's gradient share (range of cell means) and its sd over repeats, correlated Gaussian and narrow banana",
    "the circle's ratio shares at ε = 0.5 and 0.75 (range of cell means), DP-HMC's sd and mean at ε = 0.5, the "
    "penalty kernels' largest sd"))] + [
] + [("Heikkilä et al. 2019, Figs", lambda d, i=i: _heikkila_one_relation(d)[i], w) for i, w in enumerate((
    "DP-SGLD's substitution ε (PLD, heikkila_fig23_relations.csv) at t = 5·10⁵ and 10⁶ against DP Barker's ledger ε",
    "the same at t ≥ 2·10⁶ (range and multiple of Barker's), and the issue's RDP estimate",
    "DP-SGLD's add/remove ε (RDP, as run) from t = 5·10⁵ to 6·10⁶"))] + [
] + [("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", lambda d, i=i: _fig3_mnist_design(d)[i], w)
      for i, w in enumerate(("DP-Fast MH's K per ε (column `K`), equal to ⌈εN/6⌉", "the CSV's rows and cells a seed"))] + [
    ("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", lambda d: _fig3_batches(d)[0],
     "the range over chains of TunaMH's and DP-Fast MH's (K = 2 000) mean `batch_size`"),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", lambda d: _fig3_batches(d)[1],
     "mean `rows_read` at K = 2 and 200, ε = 0.05"),
] + [("DP-HMC paper", lambda d, i=i: _dphmc_gauss_constants(d)[i], w) for i, w in enumerate((
    "the Gaussian's eigenvalue range and condition number (GAUSS_EIGENVALUES of experiments/dphmc_fig1.py)",
    "DP-SGLD's step on the Gaussian (2η/n, the code's η) times n/λ_min"))] + [
    ("Thesis Fig. 6.3", _fig63_counts, "10-d chains with MMD above 0.2 per kernel and bound, and the 10-d exact floor"),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", lambda d: _fig3_subset_quotes(d)[0],
     "the non-private chains' acceptance, range over chains"),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", lambda d: _fig3_subset_quotes(d)[1],
     "the range of column `chain_seconds`"),
    ("DP-HMC paper", _dphmc_sg_times, "the SG groups' run times (column `seconds` of their first cell, ε = 2, and of "
     "the appended runs' first cell, ε = 8) and lengths"),
    ("DP-HMC paper", lambda d: f"9 degrees of freedom, bold = p < 0.05, |z| ≥ {_t_quantile(9):.2f}",
     "the t quantile at 9 degrees of freedom"),
    ("How the verdicts are tested", lambda d: "({} seeds for Fig. 2; {} for Fig. 3 on full MNIST, {} on the "
     "subset)".format(*(len({r["repeat"] for r in load(n, d)}) for n in ("fastmh_fig2", "fastmh_fig3_mnist",
                                                                          "fastmh_fig3"))),
     "the seeds (column `repeat`) of Zhang & Zhang's Fig. 2 and Fig. 3 CSVs"),
] + [("How the verdicts are tested", lambda d, i=i: _verdict_constants(d)[i], what) for i, what in enumerate((
    "the t quantile at 19 degrees of freedom", "the t quantile at 1 degree of freedom", "the sign test's p at 6 of 6",
    "Welch and paired z of fig65.csv, DP-HMC against OCU+GWMH, correlated Gaussian, ε = 4, 5, 6"))] + [
    ("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", lambda d: _fig3_mnist_time(d)[0],
     "the chains' times, column `chain_seconds`, summed"),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", lambda d: _fig3_mnist_time(d)[1],
     "the range of column `chain_seconds`"),
    ("Heikkilä et al. 2019, Figs", _heikkila_barker_clipping, "acceptance (mean) and clipped fraction (range "
     "over the 20 chains) at t = 20 000"),
]


def _phrase_spans(phrase: str, sec: str) -> List[Tuple[int, int]]:
    rx = r"\s+".join(_re.escape(w) for w in phrase.split())
    return [(m.start(), m.end()) for m in _re.finditer(rx, sec)]


def quote_phrases(results_dir: pathlib.Path = SHIPPED) -> Tuple[str, ...]:
    """Each :data:`PROSE_QUOTES` sentence as the CSVs of ``results_dir`` give it (computed once per
    folder and process, as :func:`all_tables`: the CSVs are read-only inputs; about 1 s, which
    :func:`check` spent twice per call before)."""
    return _quote_phrases(str(results_dir))


@functools.lru_cache(maxsize=4)
def _quote_phrases(results_dir: str) -> Tuple[str, ...]:
    return tuple(fn(pathlib.Path(results_dir)) for _, fn, _ in PROSE_QUOTES)


def prose_quote_problems(text: str, results_dir: pathlib.Path = SHIPPED) -> List[str]:
    """``"section: phrase"`` for each :data:`PROSE_QUOTES` phrase, as the CSVs give it, that its
    section does not print."""
    secs = dict(_sections(text))
    secs["(top of the page)"] = text.split("\n## ", 1)[0]
    bad = []
    for (prefix, _, _), phrase in zip(PROSE_QUOTES, quote_phrases(results_dir)):
        sec = next((v for k, v in secs.items() if k.startswith(prefix)), "")
        if not _phrase_spans(phrase, sec):
            bad.append(f"{prefix[:40]}: not printed as the CSVs give it: {phrase}")
    return bad


#: (section title prefix, phrase, source): values quoted from the papers (or their code), exempt:
#: they are what is compared against, not measured here
PAPER_QUOTES = (
    ("Heikkilä et al. 2019, Figs", '"(1.22, 2e-06)-DP"', "Heikkilä et al. 2019, Fig. 2's privacy"),
    ("Heikkilä et al. 2019, Figs", "gives the paper's (1.22, 2·10⁻⁶)", "Heikkilä et al. 2019, Fig. 2's privacy"),
    ("Heikkilä et al. 2019, Fig. 1", "Fig. 2's \"(1.22, 2·10⁻⁶)\" adds the DPVI start's 0.22",
     "Heikkilä et al. 2019, Fig. 2's privacy and §5's DPVI start"),
    ("Heikkilä et al. 2019, Figs", "the authors use 0.99·√b/N0", "the authors' code"),
    ("Heikkilä et al. 2019, Figs", "l. 68–70", "the authors' code, a line number"),
    ("Heikkilä et al. 2019, Figs", "The paper starts from a DPVI fit costing (0.22, 10⁻⁶)",
     "Heikkilä et al. 2019, §5"),
    ("Heikkilä et al. 2019, Figs", "the issue's \"about 2.5 / 3.3 / 5.1\"", "issue #60's estimate"),
    ("DP-HMC paper", "0.1, 0.25, 12, 1.5·10⁻⁴ (Gaussian)", "the authors' code: DP-HMC's Gaussian settings"),
    ("DP-HMC paper", "0.05, 7·10⁻⁴, 10 (Gaussian)", "the authors' code: DP penalty's Gaussian settings"),
    ("DP-HMC paper", "drawn with JAX at key 43235667", "the authors' code: the Gaussian's key"),
)

#: (section title prefix, phrase on the page, file of the repository, snippets the file must hold):
#: settings checked against the code that runs them. The phrase's numbers are exempt ("code
#: setting"), and ``--check`` fails when the phrase is not on the page (a number in it edited)
#: or a snippet is not in its file (the code changed) (:func:`code_setting_problems`).
CODE_SETTINGS = (
    ("Benchmark posteriors", "Σ = diag(20, 2.5, 1, …)", "pyro_dp/models/banana.py", ("var[0], var[1] = 20.0, 2.5",)),
    ("Benchmark posteriors", "Narrow banana (a = 350)", "pyro_dp/models/__init__.py",
     ('"narrow-banana": ("banana", 2, 150_000, None, 0.02, 350.0, 1000.0)',)),
    ("Benchmark posteriors", "(ρ = 0.999, σ0² = 100)", "pyro_dp/models/__init__.py",
     ('"correlated-gauss": ("gauss-corr", 2, 200_000, None, 0.005, 0.0, 100.0)',)),
    ("Benchmark posteriors", "Circle (a = 1e-5)", "pyro_dp/models/__init__.py",
     ('"circle": ("circle", 2, 100_000, None, 0.1, 1e-5, None)',)),
    ("Benchmark posteriors", "Tempered banana, d = 2 / 10 (n0 = 1000)", "pyro_dp/models/__init__.py",
     ('"tempered-banana-2d": ("banana", 2, 100_000, 1000,', '"tempered-banana-10d": ("banana", 10, 200_000, 1000,')),
    ("Benchmark posteriors", "(N = 1e6, N0 = 100)", "pyro_dp/models/__init__.py",
     ('"gmm-heikkila": (1_000_000, 100,',)),
    ("Benchmark posteriors", "(θ1 ~ N(0, 10), θ2 ~ N(0, 1), σx² = 2; variances)", "pyro_dp/models/mixture.py",
     ("GMM_PRIOR_VAR = (10.0, 1.0)", "GMM_LIK_VAR = 2.0")),
    ("Benchmark posteriors", "(N = 5e4, temperature 500)", "pyro_dp/models/__init__.py", ('"gmm-truncated": (50_000, 100,',)),
    ("Benchmark posteriors", "(flat prior on [-3, 3]², data in [-3, 3];", "pyro_dp/models/mixture.py",
     ("TRUNCATED_GMM_BOX = 3.0",)),
    ("Benchmark posteriors", "r_j ~ N(3, 1) for the circle", "pyro_dp/models/circle.py",
     ("return 3.0 + torch.randn(n, generator=g, dtype=dtype)",)),
    ("Thesis Figs 6.4", "each banana at its Table 6.1 n (10⁵ for d = 2, 2·10⁵ for d = 10)", "experiments/_sampling.py",
     ('"flat-banana-2d": 100_000, "flat-banana-10d": 200_000',)),
    ("Thesis Figs 6.4", "the narrow banana's clip bounds (5.5 and 8.5) and DP-HMC ratio clip (5.0)",
     "experiments/_sampling.py", ("dict(prop=0.0015, clip=5.5, tau=0.2)", "dict(prop=0.0015, clip=8.5, tau=0.1)",
                                  "L=5, eta=0.00045, mass=1.0, r_clip=5.0")),
    ("Thesis Figs 6.4", "the 30-d Gaussian's proposal (0.00084) and DP-HMC (η = 0.00025, mass 1, ratio clip 2.5)",
     "experiments/_sampling.py", ("dict(prop=0.00084, clip=3.0, tau=0.06)", "eta=0.00025, mass=1.0, r_clip=2.5")),
    ("Heikkilä et al. 2019, Figs", "random-walk proposal with **variance 0.01** (sd 0.1), C = 2",
     "experiments/heikkila.py", ("prop_sd=0.1",)),
    ("Heikkilä et al. 2019, Figs", "**20 000 iterations, 1 000 burn-in, 20 repeats**, δ = 2·10⁻⁶",
     "experiments/heikkila.py", ("iters=20_000, burn_in=1000,", "repeats=20, delta=2e-6")),
    ("Heikkilä et al. 2019, Figs", "12 steps of `DPGradientInit` (full-batch DP gradient ascent: clip 5, noise "
     "multiplier 100, step η/N = 0.015). Those 12", "experiments/heikkila.py",
     ("init_steps=12, init_rate=0.015, init_clip=5.0, init_nm=100.0",)),
    ("Heikkilä et al. 2019, Figs", "b = 100, clip L = 0.01 on the tempered gradient (= 100 untempered)",
     "experiments/heikkila.py", ("sgld_batch=100, sgld_clip_tempered=0.01",)),
    ("Heikkilä et al. 2019, Figs", "scored at t = 0.5, 1, 2, 3, 4, 5 and 6 million", "experiments/heikkila.py",
     ("sgld_t_grid=(500_000, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000, 6_000_000)",)),
    ("Zhang & Zhang 2023, Fig. 1", "The full run (2 repeats, 7 lines × 4 ε, 10⁴ iterations per chain)", "experiments/fastmh.py",
     ("iters=10_000, score_every=500, epsilons=(0.01, 0.05, 0.2, 0.5), repeats=2,",)),
    ("Zhang & Zhang 2023, Fig. 1", "N = 50 000, temperature 500, δ = 10⁻⁵ per iteration, λ = 10, random-walk step\n"
     "0.06 in θ (minibatch) and 0.08 (full batch)", "experiments/fastmh.py",
     ("n=50_000,", "delta=1e-5,\n                 lam=10.0,", "random-walk step 0.06 in θ", "step 0.08 in θ")),
    ("Zhang & Zhang 2023, Fig. 1", "Each chain is scored every 500 iterations", "experiments/fastmh.py", ("score_every=500,",)),
    ("Zhang & Zhang 2023, Fig. 1", "(99 bins over the range of 2·10⁵ exact draws, floor\n10⁻¹³)", "experiments/fastmh.py",
     ("99 bins over the reference range, floor 1e-13", "ref.sample(200_000, seed=1)")),
    ("Zhang & Zhang 2023, Fig. 1", "c = max_{|x|≤3} c_i instead of per-datum c_i, data truncated to [−3, 3]",
     "pyro_dp/models/mixture.py", ("TRUNCATED_GMM_BOX = 3.0",)),
    ("Zhang & Zhang 2023, Fig. 1", "|θ_j| ≤ 3 that the code's bound assumes", "pyro_dp/models/mixture.py",
     ("TRUNCATED_GMM_BOX = 3.0",)),
    ("Thesis Fig. 6.3", "bounds\n{0.5, 1, 2, 4, 6, 8, 10, 1000}, 20 chains per bound, RWMH 3000 and HMC 500 iterations (L = 15)",
     "experiments/fig63.py", ("bounds=[0.5, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 1000.0], repeats=20, rwmh_iterations=3000,",
                              "hmc_iterations=500,", '"hmc": dict(L=15, eta=0.001,')),
    ("Thesis Fig. 6.3", "RWMH proposal sd 0.01, HMC η = 0.001, L = 15, mass (1, 0.5)", "experiments/fig63.py",
     ('"rwmh": dict(prop=0.01, clip=None)', '"hmc": dict(L=15, eta=0.001, mass=[1.0, 0.5],')),
    ("DP-HMC paper", "| ε grid, δ | 2, 4, 6, 8, 10, 12, 15; δ = 0.1/n | the same: all seven (2, 6, 15 in the first run; "
     "4, 8, 10, 12 added the same day); δ = 0.1/n |", "experiments/dphmc_fig1.py",
     ("PAPER_EPSILONS = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 15.0)", "delta = 0.1 / n")),
    ("DP-HMC paper", "| DP penalty | τ = 0.17, proposal sd 0.06, ratio clip 0.15 (banana); 0.05, 7·10⁻⁴, 10 (Gaussian) |",
     "experiments/dphmc_fig1.py", ('"dp_penalty": dict(tau=0.17, prop=0.06, clip=0.15)',
                                   '"dp_penalty": dict(tau=0.05, prop=0.0007, clip=10.0)')),
    ("DP-HMC paper", "τ_l = 0.1, τ_g = 0.55, L = 25, η = 0.006 (banana); 0.1, 0.25, 12, 1.5·10⁻⁴ (Gaussian)",
     "experiments/dphmc_fig1.py", ("tau_l=0.10, tau_g=0.55, L=25, eta=0.006,", "tau_l=0.1, tau_g=0.25, L=12, eta=0.00015,")),
    ("DP-HMC paper", "batch 1000, clip 0.2 (banana), 15 and 12 (Gaussian), the code's step η/n, SGNHT's A = 50 / 30",
     "experiments/dphmc_fig1.py", ('"dp_sgld": dict(batch=1000, grad_clip=0.2,', '"dp_sgnht": dict(batch=1000, '
                                   'grad_clip=0.2, eta=100.0, A=50.0)', '"dp_sgld": dict(batch=1000, grad_clip=15.0,',
                                   '"dp_sgnht": dict(batch=1000, grad_clip=12.0, eta=0.2, A=30.0)')),
    ("DP-HMC paper", "| chains, repeats | 4 chains pooled per run, 10 repeats | the same: 4 chains pooled per run, 10 "
     "repeats at each ε run |", "experiments/dphmc_fig1.py", ("repeats=10, chains=4,",)),
    ("DP-HMC paper", "thinned to ~5000 draws", "experiments/dphmc_fig1.py", ("max_draws=5000",)),
    ("DP-HMC paper", "The exact column is 1000 exact draws", "experiments/dphmc_fig1.py", ("exact_draws=1000",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", "Panel (c) sweeps K ∈ {20, 225, 2000} plus that K, at the "
     "paper's ε = 0.05 and at ε = 0.5.\n  The code's default K = 225", "experiments/fastmh_mnist.py",
     ("k_grid=(20, 225, 2000), k_epsilons=(0.05, 0.5),",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c): logistic", "N(0, 10²), as on the subset", "experiments/fastmh_mnist.py",
     ("iters=40_000, epsilons=(0.01, 0.05, 0.2, 0.5),\n                  repeats=10, delta=1e-5, lam=10.0, step=4.3e-4, "
      "step_full=2.8e-4, prior_scale=10.0,",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "PCA to 50 components", "experiments/fastmh_mnist.py",
     ('"full": dict(n_train=800, n_test=200, pca_dim=50,',)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "Random-walk steps 4.3·10⁻⁴ (minibatch) and 2.8·10⁻⁴ (full "
     "batch), λ = 10", "experiments/fastmh_mnist.py", ("lam=10.0, step=4.3e-4, step_full=2.8e-4,",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "**800 training and 200 test images**",
     "experiments/fastmh_mnist.py", ('"full": dict(n_train=800, n_test=200,',)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "Panel (c) sweeps K ∈ {2, 50, 200}",
     "experiments/fastmh_mnist.py", ("k_grid=(2, 50, 200), k_epsilons=(0.05, 0.5)",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "**10⁴ iterations and 6 seeds** instead of the code's "
     "4·10⁴ iterations", "experiments/fastmh_mnist.py", ("iters=10_000, epsilons=(0.01, 0.05, 0.2, 0.5), repeats=6,",
                                                         "iters=40_000,")),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "A N(0, 10²) prior is used", "experiments/fastmh_mnist.py",
     ("step_full=2.8e-4, prior_scale=10.0,",)),
    ("Zhang & Zhang 2023, Fig. 3(a)–(c) on an MNIST subset", "ε ∈ {0.01, 0.05, 0.2, 0.5}\n  (Fig. 1's grid",
     "experiments/fastmh_mnist.py", ("epsilons=(0.01, 0.05, 0.2, 0.5)",)),
    ("Thesis Fig. 6.2", "2-d flat banana, n = 10⁵, δ = 0.1/n", "experiments/fig62.py", ('"delta": 0.1 / 100_000,',)),
    ("Thesis Fig. 6.2", "DP penalty: τ = 0.1, α = 1/2", "experiments/fig62.py",
     ('"penalty_tau": 0.1,', "# tau n^alpha, alpha = 1/2")),
    ("Thesis Fig. 6.2", "DP-HMC: τ_l = 0.1, τ_g = 0.4, L = 10", "experiments/fig62.py",
     ('"hmc_tau_l": 0.1,', '"hmc_tau_g": 0.4,', '"hmc_num_steps": 10,')),
    ("Thesis Fig. 6.2", "Minibatch penalty: τ = 0.7, b = 1000", "experiments/fig62.py",
     ('"minibatch_tau": 0.7,', '"minibatch_batch_size": 1000,')),
    ("Yıldırım", "y_i ~ N(θ, 1) with prior N(0, 10²), data from\nN(0.5, 1)", "benchmarks/yildirim_thm1.py",
     ("PRIOR_SD = 10.0", "THETA_STAR = 0.5")),
    ("Yıldırım", "moves of scale 1.5/√n", "benchmarks/yildirim_thm1.py", ("STEP = 1.5",)),
    ("Yıldırım", "clips each row's ratio to ±4|θ′ − θ|, so one row changes a move's\nratio by at most 8|θ′ − θ| ∝ "
     "n^(−1/2): A1 with α = ½", "benchmarks/yildirim_thm1.py", ("B_CLIP = 4.0",)),
    ("Yıldırım", "with k₀ = 1 (144, 1 085, 8 685 iterations) under the budget ε = 4, δ = n^(−1.1)\n(β = 1.1 > 1, so "
     "δ = o(1/n))", "benchmarks/yildirim_thm1.py", ("K0 = 1.0", "EPSILON = 4.0", "BETA = 1.1", "(144, 1085, 8685)")),
    ("Yıldırım", "at the simulation's θ* = 0.5", "benchmarks/yildirim_thm1.py", ("THETA_STAR = 0.5",)),
)


def code_setting_problems(text: str) -> List[str]:
    """``"section: …"`` for each :data:`CODE_SETTINGS` phrase missing from its section, or snippet
    missing from its file."""
    secs = dict(_sections(text))
    bad = []
    for prefix, phrase, path, snippets in CODE_SETTINGS:
        sec = next((v for k, v in secs.items() if k.startswith(prefix)), "")
        if not _phrase_spans(phrase, sec):
            bad.append(f"{prefix[:40]}: not on the page: {phrase!r}")
        code = (ROOT / path).read_text(encoding="utf-8")
        bad += [f"{prefix[:40]}: {path} lacks {snip!r} ({phrase!r})" for snip in snippets if snip not in code]
    return bad


_EXEMPT_BEFORE = (
    ("reference", _re.compile(r"(?:\bFigs?\.?|\bFigures?|\bTables?|\beqs?\.|\bEqs?\.|\bThms?\.?|\bTheorems?|\bLemmas?"
                              r"|\bProps?\.|\bCorollary|§|\bAlgs?\.|\bAlgorithms?|\bch\.|\bchapters?|\bSecs?\.|"
                              r"\bSections?|\bApp\.|\bAppendix|\bissues?|#|\bPRs?|\bDefinitions?|\bpanels?|"
                              r"\bsteps? \(|\bPython|\bJAX|\btorch|\bversion|\bPEP|\bSHA-|\bl\.|\blines?)\s*\(?$")),
    ("setting", _re.compile(r"(?:^|[\s(,;:])(?:ε|δ|n|N|K|k|t|T|q|η'?|τ(?:_\w)?|L|b|c|B|σ\S*|λ\S*|a|d|m|A|r|M)"
                            r"\s*(?:=|≤|≥|<|>|≠)\s*\(?$")),
    ("seed range", _re.compile(r"\b(?:[Ss]eeds?|[Rr]epeats?)\s*$")),
    ("setting", _re.compile(r"(?:^|\W)p\s*[<≥>]\s*$")),  # a test's level, not a p-value
)
_EXEMPT_AFTER = (
    ("setting", _re.compile(r"^\)-DP\b")),  # the δ of a privacy level written (ε, δ)-DP
    ("design", _re.compile(r"^(?:-?d\b|-dimensional|-core|\s*(?:repeats?|chains?|seeds?|threads?|workers?|cores?)\b"
                           r"|\s*×\s*\d)")),
)
_LIST_SEP = _re.compile(r"^\s*(?:,|/|–|-|and|or|to|;|…|\.\.\.)\s*$")


def _num_key(sign: str, digits: str) -> str:
    """A number's comparable form: no thousands spaces, ASCII minus, no plus."""
    return (sign.replace("−", "-").replace("+", "") + digits.replace(" ", "")).lstrip("+")


def _informative(digits: str) -> bool:
    """Digits that are unlikely to match a table value by chance: three significant digits or more,
    or a decimal fraction."""
    d = digits.replace(" ", "").split("·")[0].rstrip(_SUP)
    return "." in d or len(d.lstrip("0")) >= 3


def _significant(digits: str) -> int:
    """Significant digits printed: ``0.0123`` 3, ``46 069`` 5, ``1.5·10⁻⁴`` 2."""
    return len(digits.replace(" ", "").split("·")[0].rstrip(_SUP).replace(".", "").lstrip("0"))


def _strip_code(line: str) -> str:
    """``line`` with inline code and link targets blanked (kept the same length)."""
    line = _re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), line)
    return _re.sub(r"\]\([^)]*\)", lambda m: " " * len(m.group(0)), line)


def _sections(text: str):
    for sec in _re.split(r"(?m)^## ", text)[1:]:
        yield sec.split("\n", 1)[0].strip(), sec


def _checked_table_lines(title: str, sec: str) -> Dict[str, Tuple[int, ...]]:
    """The section's hand-written table lines that a value check reads, each with the cells (by
    index, 0 = the first) that the check compares."""
    out: Dict[str, Tuple[int, ...]] = {}
    if any(title.startswith(k) for k in VALUE_TABLE_CSVS):
        body = sec.split("### Earlier run at n = 10⁴", 1)[0].split("\n")
        for i, line in enumerate(body):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            if head[:2] == ["problem", "ε"]:
                j = i + 2
                while j < len(body) and body[j].lstrip().startswith("|"):
                    out[body[j]] = tuple(range(2, 2 + len(head)))  # problem and ε are labels
                    j += 1
    if title.startswith("Thesis Fig. 6.3") and _FIG63_N1E4_HEAD in sec:
        for row in sec.split(_FIG63_N1E4_HEAD, 1)[1].split("\n")[2:]:
            if not row.lstrip().startswith("|"):
                break
            out[row] = (1, 2, 3, 4)  # b is the label
    if any(title.startswith(k) for k in VALUE_TABLE_CSVS):
        for head, row in _n1e4_table_lines(sec):
            out[row] = tuple(range(2, len(head)))  # problem and ε are labels
    if any(title.startswith(k) for k in FIG3_VALUE_TABLE_CSVS):
        lines = sec.split("\n")
        for i, line in enumerate(lines):
            if _K_HEAD.match(line):
                for row in lines[i + 2:]:
                    if not row.lstrip().startswith("|"):
                        break
                    out[row] = (1, 2, 3, 4)  # ε is the label
    for head, cols in ((_FIG3_HEAD, (1, 2, 3, 4, 5, 6)), (_FIG1_HEAD, (2, 3, 4, 5, 6, 7))):
        if head in sec and (head != _FIG3_HEAD or any(title.startswith(k) for k in FIG3_VALUE_TABLE_CSVS)):
            for line in sec.split(head, 1)[1].split("\n")[2:]:
                if not line.lstrip().startswith("|"):
                    break
                out[line] = cols
    return out


def _cell_of(raw: str, pos: int) -> int:
    """The index of the table cell of ``raw`` (a ``| … |`` line) that holds position ``pos``."""
    return raw[:pos].count("|") - 1


def _csv_cells(names, results_dir) -> set:
    """Every numeric cell of the named CSVs, as printed there (and integers without ``.0``)."""
    out = set()
    for name in names:
        out |= _csv_cells_one(name, str(results_dir))
    return out


@functools.lru_cache(maxsize=64)
def _csv_cells_one(name: str, results_dir: str) -> frozenset:
    out = set()
    for name in (name,):
        path = pathlib.Path(results_dir) / f"{name}.csv"
        if not path.exists():
            continue
        with open(path, newline="") as fh:
            for row in csv.reader(fh):
                for c in row:
                    if c and (c[0].isdigit() or c[0] == "-"):
                        out.add(c)
                        if c.endswith(".0"):
                            out.add(c[:-2])
    return frozenset(out)


class ProseNumber(NamedTuple):
    """One number of the page outside the generated tables, and its kind."""
    section: str
    line: int  # 1-based line of the page
    number: str  # as printed
    kind: str  # "checked: …", "exempt: <rule>" or "untraced"


def prose_numbers(text: str, tables: Dict[str, str], results_dir: pathlib.Path = SHIPPED) -> List[ProseNumber]:
    """Every number of the page outside the generated tables, sorted into checked / exempt /
    untraced (the rules above this function)."""
    out = []
    all_lines = text.split("\n")
    starts = [0] + [i for i, line in enumerate(all_lines) if line.startswith("## ")] + [len(all_lines)]
    for s0, s1 in zip(starts, starts[1:]):
        if s0 == s1:
            continue
        lines = all_lines[s0:s1]
        title = lines[0][3:].strip() if lines[0].startswith("## ") else "(top of the page)"
        sec = "\n".join(lines)
        base = s0 + 1
        gen = "\n".join(tables.get(n, "") for n in _re.findall(r"<!-- claims:(\w+) -->", sec))
        checked_lines = _checked_table_lines(title, sec)
        checked_cells = [c for line, cols in checked_lines.items()
                         for k, c in enumerate(line.strip().strip("|").split("|")) if k in cols]
        keys = [_num_key(m.group(1), m.group(2)) for m in _NUMBER.finditer(gen + "\n" + "\n".join(checked_cells))]
        table_vals = _with_roundings(keys)
        p_vals = _with_roundings(keys, min_sig=1)  # a quoted p may keep one significant digit
        quoted = [q for sec_prefix, q, _ in PAPER_QUOTES if title.startswith(sec_prefix)]
        code_spans = [sp for prefix, ph, _, _ in CODE_SETTINGS if title.startswith(prefix) for sp in _phrase_spans(ph, sec)]
        spans = [sp for (prefix, _, _), phrase in zip(PROSE_QUOTES, quote_phrases(results_dir))
                 if title.startswith(prefix) for sp in _phrase_spans(phrase, sec)]
        line_at = [0]
        for line in lines:
            line_at.append(line_at[-1] + len(line) + 1)
        named = _re.findall(r"(\w+)\.csv\b", sec) + [TABLES[n][0].csv for n in _re.findall(r"<!-- claims:(\w+) -->", sec)
                                                       if n in TABLES]
        cells = _csv_cells(dict.fromkeys(named), results_dir)
        pm_sec = title.startswith(PM_CHECKED)
        in_marker = in_fence = False
        for i, raw in enumerate(lines):
            where = base + i
            if raw.startswith("### Earlier run at n = 10⁴"):
                # the superseded subsection: its quotes are of its own CSVs and of its own tables
                # (checked cell by cell against those CSVs), not of the tables above
                pm_sec = False
                sup = "\n".join(lines[i:])
                sup_cells = [c for line, cols in checked_lines.items() if line in sup
                             for k, c in enumerate(line.strip().strip("|").split("|")) if k in cols]
                sup_keys = [_num_key(m.group(1), m.group(2)) for m in _NUMBER.finditer("\n".join(sup_cells))]
                table_vals, p_vals = _with_roundings(sup_keys), _with_roundings(sup_keys, min_sig=1)
                cells = _csv_cells(dict.fromkeys(_re.findall(r"(\w+)\.csv\b", "\n".join(lines[i:]))), results_dir)
            if raw.startswith("<!-- claims:"):
                in_marker = True
            if raw.startswith("<!-- /claims:"):
                in_marker = False
                continue
            if in_marker:
                continue  # a recomputed table: compared whole
            if raw.lstrip().startswith("```"):
                in_fence = not in_fence
                continue
            whole = None
            if in_fence or raw.startswith("    ") and not raw.lstrip().startswith(("-", "|")):
                whole = "exempt: code"
            elif raw.startswith("#") or raw.lstrip().startswith("![") or raw.startswith("<!--"):
                whole = "exempt: heading or figure"
            line = _strip_code(raw)
            prose_z = {m.start(2) for m in _Z_PROSE.finditer(line)}
            pms = [(m.start(), m.end()) for m in _PM.finditer(line)] if pm_sec and not raw.lstrip().startswith("|") else []
            prev = None  # (end, kind) of the previous number on the line
            for m in _NUMBER.finditer(raw):
                sign, digits = m.group(1), m.group(2)
                if whole:
                    kind = whole
                elif _cell_of(raw, m.start()) in checked_lines.get(raw, ()):
                    kind = "checked: a cell of a value table compared cell by cell"
                elif raw in checked_lines and _cell_of(raw, m.start()) < min(checked_lines[raw]):
                    kind = "exempt: setting"  # the row's labels: a problem, an ε, a line
                elif line[m.start():m.end()].strip() == "":
                    kind = "exempt: code"
                else:
                    kind = _kind(line, m, sign, digits, prose_z, pms, table_vals, cells, prev)
                    if kind == "untraced" and _re.search(r"(?:^|\W)p\s*=\s*$", line[:m.start()]) \
                            and _num_key(sign, digits) in p_vals:
                        kind = "checked: a p quote, a value of a recomputed table of its section"
                    if any(a <= line_at[i] + m.start() < b for a, b in spans):
                        kind = "checked: a sentence computed from the CSVs"
                    if kind == "untraced" and any(q in raw and raw.index(q) <= m.start() < raw.index(q) + len(q)
                                                  for q in quoted):
                        kind = "exempt: paper value"
                    if kind == "untraced" and any(a <= line_at[i] + m.start() < b for a, b in code_spans):
                        kind = "exempt: code setting"
                out.append(ProseNumber(title, where, sign + digits, kind))
                prev = (m.end(), kind)
    return out


def _kind(line, m, sign, digits, prose_z, pms, table_vals, cells, prev) -> str:
    before, after = line[max(0, m.start() - 40):m.start()], line[m.end():m.end() + 25]
    key = _num_key(sign, digits)
    if m.start(2) in prose_z:
        return "checked: z quote"
    if any(a <= m.start() < b for a, b in pms):
        return "checked: mean ± s.e. quote"
    if _re.search(r"\d{4}-\d\d-\d\d", line[max(0, m.start() - 8):m.end() + 8]) or \
            _re.fullmatch(r"(?:199\d|20[0-2]\d)", digits) or _re.match(r"^:\d\d", after):
        return "exempt: date"
    for name, rx in _EXEMPT_BEFORE[:1]:
        if rx.search(before):
            return f"exempt: {name}"
    if _informative(digits) and key in table_vals:  # a negative must be negative there; a magnitude may quote one
        return "checked: a value of a recomputed table of its section"
    if _significant(digits) >= 3 and (key in cells or digits.replace(" ", "") in cells):
        return "checked: a value of its section's CSV"
    for name, rx in _EXEMPT_BEFORE[1:]:
        if rx.search(before):
            return f"exempt: {name}"
    for name, rx in _EXEMPT_AFTER:
        if rx.search(after):
            return f"exempt: {name}"
    if prev is not None and prev[1].startswith("exempt") and _LIST_SEP.match(line[prev[0]:m.start()]):
        return prev[1]
    if _TIME_AFTER.match(after) or _TIME_AFTER.match(line[m.end():].lstrip("–- 0123456789.")):
        return "untraced: a time"
    return "untraced"


_TIME_AFTER = _re.compile(r"^\s*(?:s|ms|µs|min|h|CPU|cell-hours?|hours?|minutes?|seconds?|wall)\b")


def _with_roundings(keys, min_sig: int = 2) -> set:
    """The table values, and each rounded to fewer decimals (two significant digits at least): a
    prose number may quote a table's ``0.823`` as ``0.82``."""
    out = set()
    for k in keys:
        out.add(k)
        out.add(k.lstrip("-"))
        if _re.fullmatch(r"-?\d+\.\d+", k):
            v = float(k)
            for d in range(1, len(k.split(".")[1])):
                r = f"{abs(v):.{d}f}"
                if _significant(r) >= min_sig:
                    out.add(r)
    return out


def untraced_counts(numbers: Sequence[ProseNumber]) -> Dict[str, Dict[str, int]]:
    """section -> number -> how many times it is printed untraced there."""
    out: Dict[str, Dict[str, int]] = {}
    for p in numbers:
        if p.kind.startswith("untraced"):
            d = out.setdefault(p.section, {})
            d[p.number] = d.get(p.number, 0) + 1
    return {s: dict(sorted(d.items())) for s, d in out.items()}


def prose_number_problems(text: str, tables: Dict[str, str], results_dir: pathlib.Path = SHIPPED,
                          listed: Optional[Dict[str, Dict[str, int]]] = None) -> List[str]:
    """``"section: number (untraced, not listed)"`` for each untraced number beyond the list of
    :data:`UNTRACED_FILE`, and ``"section: number (listed, gone)"`` for each listed one the page no
    longer prints untraced (a listed number now checked or exempt: rewrite the list)."""
    if listed is None:
        listed = _json.loads(UNTRACED_FILE.read_text(encoding="utf-8"))
    have = untraced_counts(prose_numbers(text, tables, results_dir))
    bad = []
    for sec in sorted(set(have) | set(listed)):
        a, b = _collections.Counter(have.get(sec, {})), _collections.Counter(listed.get(sec, {}))
        bad += [f"{sec[:60]}: {n} (untraced, not listed)" for n in sorted((a - b).elements())]
        bad += [f"{sec[:60]}: {n} (listed, gone)" for n in sorted((b - a).elements())]
    return bad


def prose_summary(numbers: Sequence[ProseNumber]) -> str:
    """A markdown table: per section, how many numbers are checked, exempt (by rule) and untraced."""
    secs = list(dict.fromkeys(p.section for p in numbers))
    kinds = sorted({p.kind for p in numbers})
    c = _collections.Counter((p.section, p.kind) for p in numbers)
    lines = ["| section | checked | exempt | untraced |", "|---|---:|---:|---:|"]
    for s in secs:
        ch = sum(c[s, k] for k in kinds if k.startswith("checked"))
        ex = sum(c[s, k] for k in kinds if k.startswith("exempt"))
        un = sum(c[s, k] for k in kinds if k.startswith("untraced"))
        lines.append(f"| {s[:70]} | {ch} | {ex} | {un} |")
    tot = _collections.Counter(p.kind for p in numbers)
    lines.append("")
    lines += [f"- {k}: {tot[k]}" for k in kinds]
    return "\n".join(lines)


#: a statement of the neighbouring relation (issue #60): every section that prints ε in a table
#: (generated or hand-written) carries one of these
_RELATION_STATEMENT = _re.compile(r"\*\*Relation: (?:substitution|add/remove)|^Relation: (?:substitution|add/remove)"
                                  r"|^\| neighbouring relation \| |under the \*\*substitute-one-row\*\* relation", _re.M)
#: a section whose tables print ε under both relations must say so in these words
_TWO_RELATIONS = "mixes two relations"
#: (section title prefix, phrase, why): sentences a verdict rests on, which must stay on the page
RELATION_PHRASES = (
    ("Heikkilä et al. 2019, Figs", "**Relation: substitution for both.**",
     "the Fig. 3 claim tables compare DP-SGLD with DP Barker under one relation"),
    ("Heikkilä et al. 2019, Figs", "All ε below are under **substitution**",
     "the Fig. 3 verdicts are stated under one relation"),
)


def relation_problems(text: str, tables: Dict[str, str]) -> List[str]:
    """``"section: …"`` for each section that prints ε in a table without stating its neighbouring
    relation (:data:`_RELATION_STATEMENT`), whose tables print ε under add/remove and under
    substitution without saying that it mixes two relations, or that lacks a phrase of
    :data:`RELATION_PHRASES` (acceptance 2 of issue #60)."""
    bad = []
    secs = list(_sections(text))
    for title, sec in secs:
        gen = [tables.get(n, "") for n in _re.findall(r"<!-- claims:(\w+) -->", sec)]
        lines = [line for line in "\n".join([sec] + gen).split("\n") if line.lstrip().startswith("|")]
        if not any("ε" in line for line in lines):
            continue
        if not _RELATION_STATEMENT.search(sec):
            bad.append(f"{title[:60]}: ε in a table, no neighbouring relation stated")
        body = "\n".join(lines)
        if "add/remove" in body and "substitution" in body and _TWO_RELATIONS not in sec:
            bad.append(f"{title[:60]}: ε under two relations without saying so ({_TWO_RELATIONS!r})")
    for prefix, phrase, _ in RELATION_PHRASES:
        sec = next((v for k, v in secs if k.startswith(prefix)), "")
        if not _phrase_spans(phrase, sec):
            bad.append(f"{prefix[:40]}: missing {phrase!r}")
    return bad


#: rows a claim table reads, when it reads a subset of its CSV
ROW_FILTERS = {"fastmh_fig3": _fig3_main_rows, "fastmh_fig3_mnist": _fig3_main_rows}


def all_tables(results_dir: pathlib.Path = SHIPPED) -> Dict[str, str]:
    """Every generated table by marker name (computed once per folder and process: the CSVs are
    read-only inputs)."""
    return dict(_all_tables(str(results_dir)))


@functools.lru_cache(maxsize=4)
def _all_tables(results_dir: str) -> Dict[str, str]:
    results_dir = pathlib.Path(results_dir)
    out = {name: (replicated_table(name, results_dir) if name in REPLICATION else table(name, results_dir))
           for name in TABLES}
    out.update({name: fn(results_dir) for name, fn in NUMBER_TABLES.items()})
    out["clipping_fig64"] = clipping_table("fig64", results_dir)
    out["clipping_fig65"] = clipping_table("fig65", results_dir)
    out["yildirim_thm1"] = yildirim_table(results_dir)
    out["fastmh_fig2"] = fig2_table(results_dir)
    out["fastmh_fig3_k"] = fig3_k_table(results_dir)
    out["fastmh_fig3_mnist_k"] = fig3_k_table(results_dir, "fastmh_fig3_mnist")
    return out


def check(md: pathlib.Path = RESULTS_MD, results_dir: pathlib.Path = SHIPPED,
          listed: Optional[Dict[str, Dict[str, int]]] = None) -> List[str]:
    """Names of the tables whose recomputed text is not in ``md`` verbatim (between its
    ``<!-- claims:NAME -->`` and ``<!-- /claims:NAME -->`` markers), then the prose and value-table
    problems of the functions above, then every number of the page that is neither checked nor
    exempt nor on the untraced list (``listed``, default :data:`UNTRACED_FILE`)."""
    text = md.read_text(encoding="utf-8")
    bad = []
    tables = all_tables(results_dir)
    for name, tab in tables.items():
        start, end = f"<!-- claims:{name} -->", f"<!-- /claims:{name} -->"
        if start not in text or end not in text:
            bad.append(name)
            continue
        body = text.split(start, 1)[1].split(end, 1)[0].strip()
        if body != tab:
            bad.append(name)
    bad += [f"prose: {p}" for p in prose_z_problems(text, tables)]
    bad += [f"value table: {p}" for p in value_table_problems(text, results_dir)]
    bad += [f"value table: {p}" for p in fig3_value_table_problems(text, results_dir)]
    bad += [f"value table: {p}" for p in fig1_value_table_problems(text, results_dir)]
    bad += [f"value table: {p}" for p in fig3_k_value_table_problems(text, results_dir)]
    bad += [f"value table: {p}" for p in n1e4_table_problems(text, results_dir)]
    bad += [f"value table: {p}" for p in fig63_n1e4_problems(text, results_dir)]
    bad += [f"prose: {p}" for p in prose_pm_problems(text, tables)]
    bad += [f"prose quote: {p}" for p in prose_quote_problems(text, results_dir)]
    bad += [f"relation: {p}" for p in relation_problems(text, tables)]
    bad += [f"code setting: {p}" for p in code_setting_problems(text)]
    bad += [f"prose number: {p}" for p in prose_number_problems(text, tables, results_dir, listed)]
    return bad


def write(md: pathlib.Path = RESULTS_MD, results_dir: pathlib.Path = SHIPPED) -> None:
    """Replace each marked table in ``md`` with its recomputation."""
    text = md.read_text(encoding="utf-8")
    for name, tab in all_tables(results_dir).items():
        start, end = f"<!-- claims:{name} -->", f"<!-- /claims:{name} -->"
        if start in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{start}\n{tab}\n{end}{tail}"
    md.write_text(text, encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", default=str(SHIPPED), help="folder of the CSVs (default: the shipped ones)")
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/results.md's tables differ")
    ap.add_argument("--write", action="store_true", help="rewrite the marked tables in docs/results.md")
    ap.add_argument("--prose", action="store_true",
                    help="print how every number of docs/results.md outside the generated tables is sorted "
                         "(checked / exempt / untraced), per section, and each untraced one with its line")
    ap.add_argument("--write-untraced", action="store_true",
                    help=f"rewrite {UNTRACED_FILE.name}, the list of the page's untraced numbers (review its diff)")
    a = ap.parse_args(argv)
    rd = pathlib.Path(a.results)
    if a.prose or a.write_untraced:
        nums = prose_numbers(RESULTS_MD.read_text(encoding="utf-8"), all_tables(rd), rd)
        if a.write_untraced:
            UNTRACED_FILE.write_text(_json.dumps(untraced_counts(nums), ensure_ascii=False, indent=1) + "\n",
                                     encoding="utf-8")
            return 0
        print(prose_summary(nums))
        print()
        print("\n".join(f"{p.line}: {p.number} ({p.kind}; {p.section[:40]})" for p in nums
                        if p.kind.startswith("untraced")))
        return 0
    if a.check:
        bad = check(results_dir=rd)
        print("claim tables differ from the CSVs: " + ", ".join(bad) if bad else "claim tables match the CSVs")
        return 1 if bad else 0
    if a.write:
        write(results_dir=rd)
        return 0
    for name, tab in all_tables(rd).items():
        print(f"<!-- claims:{name} -->\n{tab}\n<!-- /claims:{name} -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
