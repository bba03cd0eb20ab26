"""Loading a benchmark script (``benchmarks/*.py``) as a module in a test.

Why: the scripts are not a package, so each is loaded from its file under a name of
its own; loading puts ``benchmarks/`` on ``sys.path`` (the scripts import their
shared modules), which is undone so other tests see the path they started with."""
import importlib.util
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def load_benchmark(filename: str, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(BENCH, filename))
    mod = importlib.util.module_from_spec(spec)
    # registered before it runs, as an import would be: dataclasses (suites.py) look their module up there
    sys.modules[module_name] = mod
    saved = list(sys.path)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = saved
    return mod
