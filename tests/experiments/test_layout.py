"""Issue #63: the paper reproductions live in the repository's ``experiments/`` folder, outside the
installed package, and the library never imports them."""
import pathlib
import re

import pyro_dp

import experiments


def test_experiments_are_not_part_of_the_package():
    # the package's folder on disk, not ``find_spec("pyro_dp.experiments")``: an editable install's
    # finder may map that name to another checkout's pyro_dp/
    package = pathlib.Path(pyro_dp.__file__).resolve().parent
    assert not (package / "experiments").exists()
    assert package not in pathlib.Path(experiments.__file__).resolve().parents


def test_no_library_module_imports_the_experiments():
    pattern = re.compile(r"^\s*(from\s+experiments\b|import\s+experiments\b|from\s+\.+experiments\b)", re.M)
    package = pathlib.Path(pyro_dp.__file__).resolve().parent
    offenders = [str(p.relative_to(package)) for p in package.rglob("*.py") if pattern.search(p.read_text())]
    assert not offenders, f"pyro_dp modules importing the experiments: {offenders}"
