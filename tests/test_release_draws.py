r"""Only the mechanisms layer draws release noise and batches (issue 39).

Every privacy noise draw and every batch selection must come from the secret stream
(:class:`~pyro_dp.mechanisms.NoiseSource`) *through* :mod:`pyro_dp.mechanisms`, where each release
function owns its noise scale and its event. This test reads every module of ``pyro_dp/`` (its
syntax tree, not its text) and flags, outside the package ``pyro_dp/mechanisms/`` (the mechanisms
layer, every module of it):

* a call of a drawing method of :class:`~pyro_dp.mechanisms.NoiseSource` (``normal``,
  ``standard_normal``, ``poisson_subsample``, ...) on a receiver named like a noise source
  (``noise``, ``self._noise``, ...);
* any read of a noise source's raw ``.generator`` (the secret stream itself);
* any call of the mechanisms layer's low-level batch draws that take a raw generator
  (:func:`~pyro_dp.mechanisms.poisson_batch_size`, :func:`~pyro_dp.mechanisms.poisson_subsample`,
  :func:`~pyro_dp.mechanisms.sample_without_replacement`):
  called from a kernel they would draw a batch from whatever generator the kernel hands them.

What remains is listed in :data:`ALLOWED`, each entry with a one-line reason: nothing since issue
39 wrote every step once (the compiled "fused" copies, which drew their release's noise and batch
themselves, are gone; a step's release noise is drawn by a release spec,
:class:`~pyro_dp.mechanisms.GaussianReleaseSpec` or :class:`~pyro_dp.mechanisms.GaussianStdReleaseSpec`,
and its batch through the mechanisms layer's :func:`~pyro_dp.mechanisms.poisson_batch`,
:func:`~pyro_dp.mechanisms.batch_without_replacement` and DP-Fast MH's
:func:`~pyro_dp.mechanisms.poisson_count`, :func:`~pyro_dp.mechanisms.batch_with_replacement`,
:func:`~pyro_dp.mechanisms.thinning_uniforms`). An entry that is no longer needed fails the test
as well, so the list can only shrink. The scan is lexical: a noise source renamed to a name without
``noise`` in it escapes it — reviewers keep the name.
"""
from __future__ import annotations

import ast
import inspect
from collections import Counter
from pathlib import Path

import pytest

import pyro_dp
from pyro_dp.mechanisms import NoiseSource

PACKAGE = Path(pyro_dp.__file__).resolve().parent
MECHANISMS = PACKAGE / "mechanisms"  # the mechanisms layer: the whole package

#: NoiseSource's public methods that draw from the secret stream (its state accessors do not)
DRAW_METHODS = frozenset(
    name for name, fn in inspect.getmembers(NoiseSource, inspect.isfunction)
    if not name.startswith("_") and name not in ("get_state", "set_state")
)
#: mechanisms functions that draw a batch from a raw generator handed to them
RAW_BATCH_DRAWS = frozenset({"poisson_batch_size", "poisson_subsample", "poisson_subsamples",
                             "sample_without_replacement"})

#: (module, enclosing function, what it draws) -> (how many, why it is still allowed)
ALLOWED: dict = {
    # every kernel step is one function whose release noise (a release spec) and batch
    # (poisson_batch, batch_without_replacement, ...) the mechanisms layer draws (issue 39); what
    # remains is the per-release audit's batch pinning (issue 58)
    ("audit_batches.py", "poisson_subsample", "poisson_subsample"): (
        1, "PinnedSelection forwards a batch draw to a public, seeded selection stream (audit only)"),
    ("audit_batches.py", "poisson_subsamples", "poisson_subsamples"): (
        1, "PinnedSelection forwards a batch draw to a public, seeded selection stream (audit only)"),
    ("audit_batches.py", "sample_without_replacement", "sample_without_replacement"): (
        1, "PinnedSelection forwards a batch draw to a public, seeded selection stream (audit only)"),
}


def _is_noise_source(node) -> bool:
    """A receiver named like a noise source: ``noise``, ``self._noise``, ``noise_source``..."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "noise" in name.lower() and "multiplier" not in name.lower() and "std" not in name.lower()


def raw_draws(source: str) -> Counter:
    """``Counter({(enclosing function, what it draws): count})`` of the raw secret-stream draws
    in ``source`` (module doc).

    >>> raw_draws("def f(noise):\\n    return noise.standard_normal(())")
    Counter({('f', 'noise.standard_normal'): 1})
    """
    found: Counter = Counter()

    def visit(node, where: str, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Attribute) and child.attr == "generator" and _is_noise_source(child.value):
                found[(where, "noise.generator")] += 1
            if isinstance(child, ast.Call):
                f = child.func
                if isinstance(f, ast.Attribute) and f.attr in DRAW_METHODS and _is_noise_source(f.value):
                    found[(where, f"noise.{f.attr}")] += 1
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in RAW_BATCH_DRAWS and not (isinstance(f, ast.Attribute) and _is_noise_source(f.value)):
                    found[(where, name)] += 1
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and not in_function:
                visit(child, child.name, True)  # a nested function counts for the function that holds it
            else:
                visit(child, where, in_function)

    visit(ast.parse(source), "<module>", False)
    return found


def _package_draws() -> Counter:
    found: Counter = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.is_relative_to(MECHANISMS):
            continue
        rel = path.relative_to(PACKAGE).as_posix()
        for (where, what), c in raw_draws(path.read_text()).items():
            found[(rel, where, what)] += c
    return found


def test_no_module_outside_the_mechanisms_layer_draws_release_noise_or_batches():
    found = _package_draws()
    unexpected = {k: c for k, c in found.items() if c > ALLOWED.get(k, (0, ""))[0]}
    assert not unexpected, (
        f"raw draws from the secret stream outside pyro_dp/mechanisms/: {unexpected}. Draw release noise "
        "and batches through a mechanisms function (clipped_sum_with_noise, gaussian_release, draw_gaussian_noise, "
        "NoiseSource via the mechanisms layer), or, with a reason, add an entry to ALLOWED")
    stale = {k: v for k, v in ALLOWED.items() if found.get(k, 0) < v[0]}
    assert not stale, f"ALLOWED entries no longer needed (remove them, the list only shrinks): {stale}"


def test_every_allowed_entry_gives_its_reason():
    assert all(isinstance(why, str) and len(why) > 20 for _, why in ALLOWED.values())


def test_the_scan_finds_each_kind_of_raw_draw():
    """The mutant: draws a kernel could add are found, in every form the scan knows."""
    src = '''
def release(lik, noise, state, rng):
    xi = noise.standard_normal(())
    idx = noise.poisson_subsample(10, 0.1)
    gen = noise.generator
    k = poisson_batch_size(gen, 10, 0.1)
    return torch.randn(3, generator=self._noise.generator)

class K:
    def _step(self, state):
        def inner():
            return self._noise.normal(1.0, (2,))
        return sample_without_replacement(self._rng, 10, 3), inner()
'''
    assert raw_draws(src) == Counter({
        ("release", "noise.standard_normal"): 1, ("release", "noise.poisson_subsample"): 1,
        ("release", "noise.generator"): 2, ("release", "poisson_batch_size"): 1,
        ("_step", "noise.normal"): 1, ("_step", "sample_without_replacement"): 1,
    })
    # data-free streams and noise *scales* are not draws from the secret stream
    assert not raw_draws("def f(rng, noise_multiplier, noise_std):\n"
                         "    return torch.randn(2, generator=rng), noise_multiplier.uniform, noise_std.normal()")


def test_a_new_raw_draw_in_a_kernel_fails_the_package_scan(monkeypatch):
    """The mutant on the package: one more draw in a kernel file is reported."""
    path = PACKAGE / "kernels" / "hmc.py"
    original = Path.read_text
    extra = "\n\ndef _mutant(noise):\n    return noise.standard_normal(())\n"
    monkeypatch.setattr(Path, "read_text",
                        lambda self, *a, **k: original(self, *a, **k) + (extra if self == path else ""))
    found = _package_draws()
    assert found[("kernels/hmc.py", "_mutant", "noise.standard_normal")] == 1
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="_mutant"):
        monkeypatch.setattr(Path, "read_text",
                            lambda self, *a, **k: original(self, *a, **k) + (extra if self == path else ""))
        test_no_module_outside_the_mechanisms_layer_draws_release_noise_or_batches()
