r"""Shared machinery of the sampling experiments: a resumable (problem × algorithm × ε ×
repeat) grid written as a tidy CSV, one helper that runs a DP kernel through Pyro's
:class:`~pyro.infer.MCMC`, and one plot of a metric against ε.

Every experiment of :data:`experiments.EXPERIMENTS` that samples is
``run_grid(name, out_dir, cells, compute, columns)``:

* ``cells`` is the list of grid points, each a dict holding the key columns
  (:data:`KEY_COLUMNS`, plus any the experiment adds) and whatever ``compute`` needs;
* ``compute(cell) -> dict`` runs one cell and returns its metric columns;
* finished cells are appended to ``out_dir/<name>.csv`` one by one (``flush`` after each), so
  an interrupted run loses at most the cell in progress, and a rerun skips every cell whose key
  is already in the CSV.

Values are written with :func:`fmt` (floats as ``repr``), so keys compare exactly.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> cells = [{"problem": "p", "algorithm": "a", "epsilon": e, "repeat": 0} for e in (1.0, 2.0)]
>>> r = run_grid("demo", d, cells, lambda c: {"mmd": 1 / c["epsilon"]}, ["mmd"], progress=False, log=None)
>>> r["computed"], r["skipped"], [row["mmd"] for row in r["rows"]]
(2, 0, ['1.0', '0.5'])
>>> run_grid("demo", d, cells, lambda c: 1 / 0, ["mmd"], progress=False, log=None)["skipped"]
2
"""
from __future__ import annotations

import csv
import math
import os
import time
import warnings
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from pyro_dp.checks import linear_memory_ess

__all__ = [
    "KEY_COLUMNS", "fmt", "run_grid", "read_rows", "run_kernel", "first_chain_diagnostics", "mean_chain_diagnostics",
    "summarise", "plot_metric_vs_epsilon",
    "quick_mode", "pick_device", "pyplot_or_none", "LABELS", "METRIC_LABELS", "series_style", "dodge", "legend_below",
]

#: key columns every sampling experiment's CSV starts with (a cell is identified by them)
KEY_COLUMNS = ("experiment", "problem", "algorithm", "epsilon", "repeat")


def fmt(v) -> str:
    """Canonical string of a CSV value: floats as ``repr(float)``, tensors as their item."""
    if isinstance(v, torch.Tensor):
        v = v.item()
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return repr(float(v))
    return str(v)


def read_rows(path: str, columns: Optional[Sequence[str]] = None) -> List[dict]:
    """Rows of a grid CSV (``[]`` if absent); refuses a CSV whose header differs from ``columns``."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames
    if columns is not None and list(header) != list(columns):
        raise ValueError(f"{path} has columns {header}, expected {list(columns)}; "
                         "move it away or use another --out directory")
    return rows


def quick_mode(quick: Optional[bool] = None) -> bool:
    """``quick`` if given, else the ``PYRO_DP_QUICK`` environment variable (``1`` = quick)."""
    if quick is not None:
        return bool(quick)
    return os.environ.get("PYRO_DP_QUICK", "") not in ("", "0")


def pick_device(device: Optional[str] = None) -> torch.device:
    """``device`` if given (``"cuda"`` falls back to CPU with a warning when CUDA is absent),
    else CUDA when available, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        warnings.warn("CUDA requested but not available; running on CPU")
        return torch.device("cpu")
    return dev


def pyplot_or_none(log: Optional[Callable[[str], None]] = print, what: str = "figure"):
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or ``None`` (after logging
    ``"<what>: matplotlib not importable; CSV only"``) when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if log is not None:
            log(f"{what}: matplotlib not importable; CSV only")
        return None
    return plt


def run_grid(
    name: str,
    out_dir: str,
    cells: Sequence[dict],
    compute: Callable[[dict], dict],
    columns: Sequence[str],
    *,
    key_columns: Sequence[str] = KEY_COLUMNS,
    progress: bool = True,
    log: Optional[Callable[[str], None]] = print,
    workers: int = 1,
) -> dict:
    """Compute every cell not yet in ``out_dir/<name>.csv`` and append it.

    :param cells: grid points; each must hold every key column except ``experiment``
        (filled with ``name``). Other entries are passed to ``compute`` but not written.
    :param compute: ``cell -> {column: value}`` for the metric ``columns``; it should seed
        itself from the cell (e.g. its ``repeat``) so a resumed run equals an uninterrupted one.
    :param columns: metric columns, written after the key columns (a ``seconds`` column, the
        cell's wall time, is appended automatically).
    :param workers: cells computed at once, each in a forked worker process with one torch
        thread (``1``: in this process). Rows are appended as cells finish, so the CSV's row
        order may differ between runs; keys identify rows.
    :returns: ``{"csv", "rows", "computed", "skipped"}`` (rows of the whole CSV).
    """
    if int(workers) < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.csv")
    header = list(key_columns) + [c for c in columns if c not in key_columns] + ["seconds"]
    rows = read_rows(path, header)
    have = {tuple(r[k] for k in key_columns) for r in rows}
    todo: List[Tuple[dict, Tuple[str, ...]]] = []
    for cell in cells:
        full = dict(cell, experiment=name)
        missing = [k for k in key_columns if k not in full]
        if missing:
            raise KeyError(f"cell {cell} lacks key columns {missing}")
        k = tuple(fmt(full[c]) for c in key_columns)
        if k not in have:
            todo.append((full, k))
            have.add(k)  # duplicates in `cells` run once
    skipped = len(cells) - len(todo)
    it: Iterable = _computed(todo, compute, int(workers))
    if progress and todo:
        from tqdm.auto import tqdm

        it = tqdm(it, total=len(todo), desc=name, unit="cell")
    new_file = not rows
    with open(path, "a" if rows else "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        if new_file:
            w.writeheader()
            f.flush()
        for full, result, seconds in it:
            unknown = set(result) - set(header)
            if unknown:
                raise KeyError(f"compute returned columns {sorted(unknown)} not in {header}")
            row = {c: fmt(full[c]) for c in key_columns}
            row.update({c: fmt(result.get(c, "")) for c in header if c not in key_columns})
            row["seconds"] = f"{seconds:.3f}"
            w.writerow(row)
            f.flush()  # a killed run keeps every finished cell
            rows.append(row)
    if log is not None:
        log(f"{name}: {len(todo)} cells computed, {skipped} already in {path}")
    return {"csv": path, "rows": rows, "computed": len(todo), "skipped": skipped}


_WORKER_COMPUTE: Optional[Callable[[dict], dict]] = None


def _timed(compute, full):
    t0 = time.perf_counter()
    result = compute(full)
    return full, result, time.perf_counter() - t0


def _worker_init():
    torch.set_num_threads(1)  # several processes on few cores: OpenMP spin-waits slow small ops


def _worker_cell(full):
    return _timed(_WORKER_COMPUTE, full)


def _computed(todo, compute, workers):
    """``(cell, result, seconds)`` for every cell of ``todo``, in this process or, ``workers >
    1``, in forked workers (the ``compute`` closure is inherited by fork, not pickled), in the
    order cells finish."""
    if workers == 1 or len(todo) < 2:
        for full, _ in todo:
            yield _timed(compute, full)
        return
    import multiprocessing

    global _WORKER_COMPUTE
    _WORKER_COMPUTE = compute
    if "fork" not in multiprocessing.get_all_start_methods():
        raise RuntimeError("workers > 1 needs the 'fork' start method (Linux); use workers=1 here")
    ctx = multiprocessing.get_context("fork")
    try:
        with ctx.Pool(min(workers, len(todo)), initializer=_worker_init) as pool:
            yield from pool.imap_unordered(_worker_cell, [full for full, _ in todo])
    finally:
        _WORKER_COMPUTE = None


def run_kernel(kernel, args: tuple = (), *, num_samples: int, warmup_steps: int = 0,
               initial_params: Optional[Dict[str, torch.Tensor]] = None, site: Optional[str] = None,
               kwargs: Optional[dict] = None, num_chains: int = 1) -> Tuple[torch.Tensor, dict]:
    """Run one chain (or ``num_chains``, sequentially on few cores) of ``kernel`` with
    :class:`pyro.infer.MCMC` (no progress bar).

    :returns: ``(samples, diagnostics)``: samples of ``site`` (default: the only latent site)
        flattened to ``[num_samples, d]`` (``[num_chains * num_samples, d]``, the chains
        pooled); the kernel's per-chain diagnostics (with several chains: the chains' mean of
        each numeric entry) plus ``"epsilon_total"`` from :func:`pyro_dp.get_epsilon` (every
        chain) at the kernel's reference δ.
    """
    from pyro.infer import MCMC

    from pyro_dp.run import get_epsilon

    multi = {}
    if initial_params is not None and int(num_chains) > 1:
        multi = {"initial_params": initial_params}  # leading chain dimension: MCMC splits it per chain
    elif initial_params is not None:
        kernel.initial_params = initial_params
    mcmc = MCMC(kernel, num_samples=num_samples, warmup_steps=warmup_steps, disable_progbar=True,
                num_chains=int(num_chains), **multi)
    mcmc.run(*args, **(kwargs or {}))
    samples = mcmc.get_samples()
    if site is None:
        if len(samples) != 1:
            raise ValueError(f"model has latent sites {sorted(samples)}; pass site=")
        site = next(iter(samples))
    x = samples[site].reshape(int(num_chains) * num_samples, -1)
    # the kernel files its chain at cleanup(); MCMC kept the per-chain diagnostics
    diag = first_chain_diagnostics(mcmc) if int(num_chains) == 1 else mean_chain_diagnostics(mcmc)
    diag["epsilon_total"] = get_epsilon(mcmc, delta=kernel.reference_delta) if not kernel.non_private else math.inf
    return x, diag


def first_chain_diagnostics(mcmc) -> dict:
    """The per-chain entries of ``mcmc.diagnostics()`` for chain 0 (``{key: value}``), with
    Pyro's ESS computed in linear memory (:func:`pyro_dp.checks.linear_memory_ess`)."""
    with linear_memory_ess():
        all_diag = mcmc.diagnostics()
    return {k: v["chain 0"] for k, v in all_diag.items() if isinstance(v, dict) and "chain 0" in v}


def mean_chain_diagnostics(mcmc) -> dict:
    """The chains' mean of each numeric per-chain entry of ``mcmc.diagnostics()`` (other
    entries: chain 0's), e.g. the acceptance rate of a multi-chain run."""
    with linear_memory_ess():
        all_diag = mcmc.diagnostics()
    out = {}
    for k, v in all_diag.items():
        if not (isinstance(v, dict) and "chain 0" in v):
            continue
        vals = [x for c, x in v.items() if str(c).startswith("chain ")]
        try:
            out[k] = sum(float(x) for x in vals) / len(vals)
        except (TypeError, ValueError):
            out[k] = v["chain 0"]
    return out


def summarise(rows: Sequence[dict], metric: str, by: Sequence[str] = ("problem", "algorithm", "epsilon")) -> List[dict]:
    """Mean and standard error of ``metric`` over repeats, grouped by ``by`` (non-finite and
    empty values are counted in ``n_bad`` and left out)."""
    groups: Dict[tuple, List[float]] = {}
    bad: Dict[tuple, int] = {}
    for r in rows:
        k = tuple(r[c] for c in by)
        groups.setdefault(k, [])
        bad.setdefault(k, 0)
        try:
            v = float(r[metric])
        except (TypeError, ValueError):
            v = math.nan
        if math.isfinite(v):
            groups[k].append(v)
        else:
            bad[k] += 1
    out = []
    for k, vs in groups.items():
        n = len(vs)
        mean = sum(vs) / n if n else math.nan
        se = math.sqrt(sum((v - mean) ** 2 for v in vs) / (n - 1) / n) if n > 1 else math.nan
        out.append(dict(zip(by, k), mean=mean, se=se, n=n, n_bad=bad[k]))
    return out


#: Display names of the experiments' algorithm keys in figures (the CSVs keep the keys).
LABELS = {
    "exact": "exact draws (non-private reference)", "dp_penalty": "DP penalty",
    "dp_penalty_ocu_gwmh": "DP penalty, OCU+GWMH", "dp_hmc": "DP-HMC", "dp_barker": "DP Barker",
    "minibatch_dp_penalty": "minibatch DP penalty",
    "minibatch_dp_penalty_ocu_gwmh": "minibatch DP penalty, OCU+GWMH", "dp_sgld": "DP-SGLD", "dp_sgnht": "DP-SGNHT",
    "rwmh": "RWMH (non-private)", "hmc": "HMC (non-private)", "dp_fast_mh": "DP-Fast MH, K = εN",
    "dp_fast_mh_pff": "DP-Fast MH, K = εN, privacy for free (opt-in)",
    "dp_fast_mh_pff_k60": "DP-Fast MH, K = 60, privacy for free (opt-in)",
    "dp_fast_mh_full": "DP-Fast MH, full batch", "dp_sgld_authors": "DP-SGLD, the authors' update",
    "dp_sgnht_authors": "DP-SGNHT, the authors' update",
}

#: Axis labels, with units, of the metric columns.
METRIC_LABELS = {
    "mmd": "MMD to exact posterior draws\n(unitless; 0 = same distribution)",
    "mean_error": "mean error: ‖sample mean − exact mean‖\n(units of θ)",
    "var_error": "variance error (units of θ²)",
    "variance_error": "variance error: Σ|var − exact var|\n(units of θ²)",
    "clipped_fraction": "fraction of per-example log-likelihood\nratios clipped (0–1)",
    "grad_clipped_fraction": "fraction of per-example\ngradients clipped (0–1)",
    "sym_kl": "symmetric KL to exact draws (nats)",
    "acceptance": "acceptance rate (0–1)",
}

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 1)), (0, (4, 2, 1, 2)))


def series_style(i: int) -> dict:
    """Colour, marker and line style of the ``i``-th series: every series differs in all three, so
    one drawn over another still shows (hollow markers let a covered point show through)."""
    return dict(color=f"C{i % 10}", marker=_MARKERS[i % len(_MARKERS)], ls=_LINES[i % len(_LINES)],
                mfc="none", ms=5, mew=1.2)


def dodge(xs: Sequence[float], i: int, k: int, log: bool = True, width: float = 0.06) -> List[float]:
    """``xs`` shifted for the ``i``-th of ``k`` series so that equal values side by side do not hide
    each other (a factor of up to ``±width/2`` in log scale, a fraction of the span otherwise).

    >>> [round(x, 3) for x in dodge([1.0, 10.0], 0, 2)], [round(x, 3) for x in dodge([1.0, 10.0], 1, 2)]
    ([0.933, 9.333], [1.072, 10.715])
    >>> dodge([1.0, 2.0], 0, 1)  # a lone series stays put
    [1.0, 2.0]
    """
    off = (i - (k - 1) / 2) * width / max(k - 1, 1)
    if log:
        return [x * 10 ** off for x in xs]
    span = (max(xs) - min(xs)) or 1.0
    return [x + off * span * 0.2 for x in xs]


def legend_below(fig, axes, ncol: int = 4) -> None:
    """One legend for the figure, below its panels (never over data); then a tight layout that
    leaves it room."""
    handles, labels = [], []
    for ax in list(getattr(axes, "flat", axes)):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    if not labels:
        fig.tight_layout()
        return
    ncol = min(ncol, len(labels))
    rows = math.ceil(len(labels) / ncol)
    h = fig.get_figheight()
    frac = min(0.45, (0.22 * rows + 0.12) / h)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, frameon=False, fontsize=8,
               bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, frac, 1, 1))


def plot_metric_vs_epsilon(rows: Sequence[dict], metric: str, path: str, *, panel: str = "problem",
                           series: str = "algorithm", logy: bool = False, title: str = "",
                           baseline: Optional[Dict[str, float]] = None, log=print,
                           xlabel: str = "target ε (δ = 0.1/n)", ylabel: Optional[str] = None,
                           hlines: Sequence[Tuple[float, str]] = ()) -> Optional[str]:
    """One panel per ``panel`` value, one line per ``series`` value: mean ± standard error of
    ``metric`` over repeats against ε (log x axis). ``baseline`` maps a panel value to a
    horizontal reference line (e.g. MMD between two exact samples, the non-private reference);
    ``hlines`` are further ``(value, label)`` lines drawn in every panel (e.g. a threshold).
    Series differ in colour, marker and line style and are dodged sideways, so none hides
    another; the legend sits below the panels. Returns ``path``, or ``None`` when matplotlib is
    not importable."""
    plt = pyplot_or_none(log, path)
    if plt is None:
        return None
    stats = summarise(rows, metric, by=(panel, series, "epsilon"))
    panels = sorted({s[panel] for s in stats})
    if not panels:
        return None
    ncol = min(4, len(panels))
    nrow = math.ceil(len(panels) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow + 0.9), squeeze=False)
    every = sorted({s[series] for s in stats})
    for ax, pv in zip(axes.flat, panels):
        for i, sv in enumerate(every):
            pts = sorted((float(s["epsilon"]), s["mean"], s["se"]) for s in stats
                         if s[panel] == pv and s[series] == sv and s["n"] > 0)
            if not pts:
                continue
            e, m, se = zip(*pts)
            se = [0.0 if not math.isfinite(v) else v for v in se]
            ax.errorbar(dodge(e, i, len(every)), m, yerr=se, capsize=2, label=LABELS.get(sv, sv),
                        **series_style(i))
        if baseline and pv in baseline:
            ax.axhline(baseline[pv], color="k", ls=":", lw=1, label="exact vs exact draws (non-private floor)")
        for value, label in hlines:
            ax.axhline(value, color="0.4", ls="--", lw=1, label=label)
        ax.set_xscale("log")
        eps_ticks = sorted({float(s["epsilon"]) for s in stats if s[panel] == pv})
        ax.set_xticks(eps_ticks, [f"{e:g}" for e in eps_ticks])  # the grid's ε values, plainly
        ax.minorticks_off()
        if logy:
            ax.set_yscale("log")
        ax.set(title=pv, xlabel=xlabel, ylabel=ylabel or METRIC_LABELS.get(metric, metric))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    legend_below(fig, axes, ncol=3)
    if title:  # room for the title's lines (one line: 0.7 inch, as before)
        fig.subplots_adjust(top=1 - (0.45 + 0.25 * (title.count("\n") + 1)) / fig.get_figheight())
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
