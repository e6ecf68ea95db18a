"""PB2 (``ray.tune.schedulers.pb2.PB2``): the SDK's checks and request, and the coordinator's decisions as Ray's.

The coordinator's PB2 is its PBT with Ray's own PB2 explore; driven by the same small controller
loop as the other schedulers (``tests/coordinator/test_tune_schedulers.py``), it exploits the same
trials and picks the same new values as Ray's PB2 on the same results.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from trainwire.tune.schedulers import PB2, PopulationBasedTraining
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict

pytest.importorskip("sklearn")
REPO = Path(__file__).resolve().parents[2]


def _schedulers_test_module():
    spec = importlib.util.spec_from_file_location(
        "tune_schedulers_loop", REPO / "tests/coordinator/test_tune_schedulers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_pb2_is_a_pbt_that_sends_its_bounds():
    pb2 = PB2(
        time_attr="training_iteration",
        metric="score",
        mode="max",
        perturbation_interval=2,
        hyperparam_bounds={"lr": [1e-4, 0.1], "opt": {"momentum": (0, 1)}},
    )
    assert isinstance(pb2, PopulationBasedTraining)
    msg = pb2.to_proto()
    options = struct_to_dict(msg.options)
    assert msg.name == "pb2" and msg.metric == "score" and msg.time_attr == "training_iteration"
    assert options["hyperparam_bounds"] == {"lr": [1e-4, 0.1], "opt": {"momentum": [0.0, 1.0]}}
    assert options["perturbation_interval"] == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "scheduler.hyperparam_bounds"),
        ({"hyperparam_bounds": {"lr": [1, 0]}}, "scheduler.hyperparam_bounds.lr"),
        ({"hyperparam_bounds": {"lr": [0, 1, 2]}}, "scheduler.hyperparam_bounds.lr"),
        ({"hyperparam_bounds": {"lr": [0, 1]}, "custom_explore_fn": dict}, "scheduler.custom_explore_fn"),
    ],
)
def test_pb2_refuses_what_ray_refuses_naming_the_field(kwargs, field):
    with pytest.raises(InvalidArgumentError) as info:
        PB2(**kwargs)
    assert info.value.field == field


def test_coordinators_pb2_exploits_and_explores_as_rays():
    from ray.tune.schedulers.pb2 import PB2 as RayPB2

    from trainwire_coordinator.tune import pbt

    loop = _schedulers_test_module()
    configs = [{"lr": 0.1 * (i + 1)} for i in range(4)]
    args = {"time_attr": "training_iteration", "perturbation_interval": 2, "quantile_fraction": 0.25}
    bounds = {"lr": [0.0, 1.0]}
    random.seed(0)
    np.random.seed(0)
    ray_s = RayPB2(metric=loop.METRIC, mode="max", hyperparam_bounds=bounds, log_config=False, **args)
    ray_log = loop.Loop(ray_s, True, configs, 4).run(loop._lr_score, 10)
    np.random.seed(0)
    ours = pbt.PB2({**args, "hyperparam_bounds": bounds}, loop.METRIC, "max", random.Random(0))
    our_log = loop.Loop(ours, False, configs, 4).run(loop._lr_score, 10)
    exploits = [e for e in ray_log if e[0] == "exploit"]
    assert exploits, "the sequence makes PB2 exploit"
    assert our_log == ray_log
    assert all(0.0 <= e[4]["lr"] <= 1.0 for e in exploits)
    assert any(e[4]["lr"] not in (0.1, 0.2, 0.3, 0.4) for e in exploits)  # explored, not copied
