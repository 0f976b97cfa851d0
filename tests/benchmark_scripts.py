"""The benchmark scripts under ``benchmarks/`` (not a package) as modules, for the tests that check
them or the docs tables they print."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def load_benchmark(name: str, module_name: str = None):
    """``benchmarks/<name>.py`` executed as a fresh module named ``module_name`` (default ``name``)."""
    spec = importlib.util.spec_from_file_location(module_name or name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
