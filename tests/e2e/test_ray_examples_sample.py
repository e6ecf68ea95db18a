"""Ray's own examples under trainwire: a time-bounded sample of bench/ray_examples.py's table.

The sample is the fastest scripts that passed under Ray in docs/porting/ray-examples.md. Each
runs as Ray's file with only its imports rewritten to trainwire (and local data for downloads),
as a program of its own, from a directory no service uses. The wheel's bundled examples are
always in the environment, so that half runs without the network; Ray's doc_code files need
the cache scripts/fetch_ray_doc_code.sh fills, and their half is skipped without it.

A script the table records as failing under trainwire is an expected failure, strictly: when it
starts passing, the test says so and the table must be regenerated (`--all --write`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ray_examples_runner", REPO / "bench" / "ray_examples.py")
assert _spec is not None and _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner  # dataclasses look their module up there
_spec.loader.exec_module(runner)

RAY_SRC = Path(os.environ.get("TRAINWIRE_RAY_SRC", runner.DEFAULT_RAY_SRC))
HAVE_DOC_CODE = any((RAY_SRC / d).is_dir() for d in runner.DOC_CODE_DIRS)
TABLE = runner.parse_table(runner.TABLE.read_text()) if runner.TABLE.exists() else {}
SAMPLE_SIZE = {"wheel": 8, "doc": 5}
# CI's whole sample stays within about 5 minutes (by the table's times, the slower of Ray's and
# trainwire's): the doc_code half, when its cache is there, takes its share from the wheel's.
BUDGET_S = {"wheel": 180.0, "doc": 120.0} if HAVE_DOC_CODE else {"wheel": 300.0, "doc": 0.0}
# Per script: above the table's times (taken on a loaded machine), so a slow CI machine does not fail one.
TIMEOUT_S = 180.0


def _sample(kind: str) -> list:
    scripts = runner.discover(RAY_SRC if kind == "doc" and HAVE_DOC_CODE else None)
    scripts = [s for s in scripts if s.name.startswith("doc/") == (kind == "doc")]
    return runner.pick_sample(scripts, TABLE, SAMPLE_SIZE[kind], budget_s=BUDGET_S[kind])


def _params(kind: str) -> list:
    params = []
    for script in _sample(kind):
        marks = []
        if TABLE[script.name]["trainwire"].result != "pass":
            reason = f"the table records it as {TABLE[script.name]['trainwire'].result} under trainwire"
            marks.append(pytest.mark.xfail(strict=True, reason=reason))
        params.append(pytest.param(script, id=script.name, marks=marks))
    return params


def test_the_table_covers_every_bundled_example_and_some_pass_under_ray():
    wheel = [s.name for s in runner.discover(None)]
    assert wheel, "no example scripts in the installed Ray wheel"
    missing = [name for name in wheel if name not in TABLE]
    assert not missing, f"regenerate docs/porting/ray-examples.md (--all --write); missing rows: {missing}"
    assert _sample("wheel"), "no bundled example passes under Ray in the table"
    planned = sum(max(TABLE[s.name]["ray"].seconds, TABLE[s.name]["trainwire"].seconds) for s in _sample("wheel"))
    assert planned <= BUDGET_S["wheel"] + 60, f"the wheel sample would take {planned:.0f} s by the table's times"


def test_import_rewrite_maps_train_tune_air_and_init_only():
    import ast

    hooks_spec = importlib.util.spec_from_file_location(
        "ray_examples_hooks", REPO / "bench" / "ray_examples" / "ray_examples_hooks.py"
    )
    assert hooks_spec is not None and hooks_spec.loader is not None
    hooks = importlib.util.module_from_spec(hooks_spec)
    hooks_spec.loader.exec_module(hooks)
    source = (
        "import ray\nimport ray.train as train\nfrom ray import tune, data\n"
        "from ray.train.torch import TorchTrainer\nfrom ray.tune.examples.mnist_pytorch import ConvNet\n"
        "ray.init(num_cpus=2)\nds = ray.data.range(3)\nray.train.report({})\nray.get(ref)\n"
    )
    rewritten = ast.unparse(hooks.rewrite_imports(ast.parse(source)))
    assert "import trainwire.train as train" in rewritten
    assert "from trainwire import tune" in rewritten and "from ray import data" in rewritten
    assert "from trainwire.train.torch import TorchTrainer" in rewritten
    assert "from ray.tune.examples.mnist_pytorch import ConvNet" in rewritten  # Ray's helper, loaded rewritten
    assert "trainwire.init(num_cpus=2)" in rewritten and "trainwire.train.report({})" in rewritten
    assert "ray.data.range(3)" in rewritten and "ray.get(ref)" in rewritten


def _run(script) -> None:
    runner.make_local_data(runner.DEFAULT_DATA)
    outcome = runner.run_one(script, "trainwire", TIMEOUT_S, runner.DEFAULT_DATA)
    assert outcome.result == "pass", (
        f"{script.name} passes under Ray but {outcome.result} under trainwire: {outcome.reason}"
    )


@pytest.mark.timeout(200)
@pytest.mark.parametrize("script", _params("wheel"))
def test_bundled_example_that_runs_under_ray_runs_under_trainwire(script):
    _run(script)


@pytest.mark.timeout(200)
@pytest.mark.skipif(not HAVE_DOC_CODE, reason="no doc_code cache: run scripts/fetch_ray_doc_code.sh")
@pytest.mark.parametrize("script", _params("doc") if HAVE_DOC_CODE else [pytest.param(None, id="doc_code")])
def test_doc_code_that_runs_under_ray_runs_under_trainwire(script):
    _run(script)
