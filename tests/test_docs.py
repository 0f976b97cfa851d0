"""The Sphinx site builds with warnings as errors, and documents every public name.

Needs the ``docs`` extra (``pip install -e ".[docs]"``: sphinx, myst-parser); skipped
otherwise. The build is offline (no intersphinx inventories) and takes ~15 s on 2 cores.
"""
import html
import pathlib
import re

import pytest

sphinx_cmd = pytest.importorskip("sphinx.cmd.build", reason='sphinx is not installed (pip install -e ".[docs]")')
pytest.importorskip("myst_parser", reason='myst-parser is not installed (pip install -e ".[docs]")')

import pyro_dp  # noqa: E402
import pyro_dp.accounting  # noqa: E402
import pyro_dp.audit  # noqa: E402
import pyro_dp.compiled  # noqa: E402
import pyro_dp.evaluation  # noqa: E402
import pyro_dp.mechanisms  # noqa: E402
import pyro_dp.models  # noqa: E402
import pyro_dp.diagnose  # noqa: E402
import pyro_dp.reach  # noqa: E402
import pyro_dp.release_audit  # noqa: E402
import pyro_dp.testing  # noqa: E402
import pyro_dp.mutants  # noqa: E402

import experiments  # noqa: E402  (the repository's reproductions, documented on the API page)

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"

# One build per test run (tests/conftest.py's ``built_docs``, from the tutorial runs that
# tests/test_tutorials.py checks): the build writes the tutorials' rendered output into the source
# tree (docs/_ext/tutorial_outputs.py, docs/_generated), so two pytest-xdist workers building at
# once delete each other's files (seen: both builds failed with -n 2). ``--dist loadgroup``
# (pyproject's addopts) keeps this module's tests, and test_tutorials', on one worker.
pytestmark = pytest.mark.xdist_group("sphinx_build")


def _text(path):
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_api_page_documents_every_public_name(built_docs):
    api = (built_docs / "api.html").read_text(encoding="utf-8")
    documented = set(re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', api))
    documented |= {
        m.group(1) for m in re.finditer(r'<dt class="sig sig-object py">.*?<span class="sig-name descname">'
                                        r'<span class="pre">([^<]+)</span>', api, flags=re.S)
    }
    missing = []
    for module in (pyro_dp, pyro_dp.accounting, pyro_dp.audit, pyro_dp.mechanisms, pyro_dp.evaluation,
                   pyro_dp.models, experiments, pyro_dp.compiled, pyro_dp.testing, pyro_dp.mutants, pyro_dp.release_audit,
                   pyro_dp.reach, pyro_dp.diagnose):
        for name in module.__all__:
            if f"{module.__name__}.{name}" not in documented and name not in documented:
                missing.append(f"{module.__name__}.{name}")
    assert not missing, f"not documented in api.html: {missing}"
    assert "pyro_dp.likelihood.PrivateLikelihood" in documented


def test_kernel_pages_and_privacy_page(built_docs):
    for kernel in ("DPPenalty", "DPHMC", "DPBarker", "DPMinibatchPenalty", "DPFastMH", "DPSGLD", "DPSGNHT",
                   "DPExpFamPenalty", "DPMultiPartyPenalty"):
        pages = [p for p in (built_docs / "kernels").glob("*.html") if f"pyro_dp.{kernel}(" in _text(p)]
        assert pages, f"no kernel page documents {kernel}'s parameters"
    assert "Neighbouring relation" in _text(built_docs / "privacy.html")


def test_tutorials_are_rendered_with_their_output_and_figures(built_docs):
    """#18 item 6: the build runs every tutorial in quick mode (docs/_ext/tutorial_outputs.py)
    and the tutorials page shows what each prints and draws."""
    page = (built_docs / "tutorials.html").read_text(encoding="utf-8")
    tutorials = sorted(p.stem for p in (DOCS.parent / "tutorials").glob("*.py"))
    for name in tutorials:
        assert f"PYRO_DP_QUICK=1 python tutorials/{name}.py" in _text(built_docs / "tutorials.html"), name
        if "savefig" in (DOCS.parent / "tutorials" / f"{name}.py").read_text():
            assert f"_images/{name}.png" in page or re.search(rf"_images/{name}[^\"]*\.png", page), name
            assert list((built_docs / "_images").glob(f"{name}*.png")), name
    assert "epsilon" in _text(built_docs / "tutorials.html")
