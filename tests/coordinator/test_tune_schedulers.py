"""trainwire's controller-driven schedulers decide as Ray 2.60's do on the same results.

One small controller loop (as Ray's TuneController: start trials the scheduler chooses, feed
each running trial's next result, act on CONTINUE / PAUSE / STOP) drives Ray's scheduler object
and trainwire's, each with light stand-ins for Ray's Trial; their decisions, the trials' states
and PBT's exploits (which trial cloned which, with what config) must be the same.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("ray.tune")

from ray.tune.schedulers import (  # noqa: E402
    HyperBandForBOHB as RayBOHB,
)
from ray.tune.schedulers import (  # noqa: E402
    HyperBandScheduler as RayHyperBand,
)
from ray.tune.schedulers import (  # noqa: E402
    MedianStoppingRule as RayMedian,
)
from ray.tune.schedulers import (  # noqa: E402
    PopulationBasedTraining as RayPBT,
)
from ray.tune.schedulers import (  # noqa: E402
    PopulationBasedTrainingReplay as RayReplay,
)

from trainwire_coordinator.tune import pbt, scheduling  # noqa: E402
from trainwire_coordinator.tune.scheduling import PAUSE, PAUSED, RUNNING, STOP, TERMINATED  # noqa: E402

METRIC = "score"


class _CheckpointManager:
    """Ray's trial checkpoint manager, as far as PBT writes to it: an exploit sets the latest result."""

    def __init__(self, trial: RayTrial) -> None:
        self.trial = trial
        self.checkpoint_config = SimpleNamespace(num_to_keep=None)

    @property
    def _latest_checkpoint_result(self) -> Any:
        return None

    @_latest_checkpoint_result.setter
    def _latest_checkpoint_result(self, value: Any) -> None:
        self.trial.restore_from = value.checkpoint


class RayTrial:
    """The part of Ray's Trial its schedulers read and write."""

    def __init__(self, index: int, config: dict[str, Any]) -> None:
        self.index, self.config, self.status = index, config, "PENDING"
        self.trial_id = str(index)
        self.checkpoint: Any = None
        self.last_result: dict[str, Any] = {}
        self.experiment_tag = str(index)
        self.evaluated_params: dict[str, Any] = {}
        self.is_saving = False
        self.temporary_state = SimpleNamespace(saving_to=None)
        self.run_metadata = SimpleNamespace(checkpoint_manager=_CheckpointManager(self))
        self.restore_from: Any = None

    def is_finished(self) -> bool:
        return self.status in ("TERMINATED", "ERROR")

    def set_config(self, config: dict[str, Any]) -> None:
        self.config = config

    def set_experiment_tag(self, tag: str) -> None:
        self.experiment_tag = tag

    def __repr__(self) -> str:
        return f"RayTrial({self.index}, {self.status})"


class Loop:
    """A TuneController in miniature, for either scheduler; ``ray`` picks Ray's calling conventions."""

    def __init__(self, scheduler: Any, ray: bool, configs: list[dict[str, Any]], concurrency: int) -> None:
        self.scheduler, self.ray, self.concurrency = scheduler, ray, concurrency
        self.search_alg = SimpleNamespace(searcher=SimpleNamespace(on_pause=_nothing, on_unpause=_nothing))
        self.trials: list[Any] = []
        self.iteration: dict[int, int] = {}
        self.log: list[tuple[Any, ...]] = []
        for i, config in enumerate(configs):
            trial = RayTrial(i, dict(config)) if ray else scheduling.SchedTrial(i, dict(config))
            self.trials.append(trial)
            self.iteration[i] = 0
            scheduler.on_trial_add(self, trial)

    # The controller the schedulers call.
    def get_trials(self) -> list[Any]:
        return list(self.trials)

    def get_live_trials(self) -> list[Any]:
        return [t for t in self.trials if not t.is_finished()]

    def stop_trial(self, trial: Any) -> None:
        if trial.is_finished():
            return
        if trial.status in ("PENDING", "PAUSED"):
            self.scheduler.on_trial_remove(self, trial)
        else:
            self.scheduler.on_trial_complete(self, trial, trial.last_result)
        trial.status = TERMINATED
        self.log.append(("stopped", trial.index))

    def pause_trial(self, trial: Any, should_checkpoint: bool = True) -> None:
        trial.status = PAUSED

    def _schedule_trial_save(self, trial: Any, result: Any = None) -> Any:
        return _Saved(trial.checkpoint)  # a function trainable's save: its latest reported checkpoint

    def exploit(self, trial: Any, source: Any, config: dict[str, Any], checkpoint: str, at: Any = None) -> None:
        trial.status = PAUSED
        self._exploited(trial, checkpoint, config)

    def _exploited(self, trial: Any, checkpoint: str, config: dict[str, Any]) -> None:
        _, source, iteration = checkpoint.split("-")
        self.iteration[trial.index] = int(iteration)  # it goes on from the clone's checkpoint
        self.log.append(("exploit", trial.index, int(source), int(iteration), _rounded(config)))

    def run(self, score: Any, max_iter: int, steps: int = 200) -> list[tuple[Any, ...]]:
        for _ in range(steps):
            while sum(t.status == RUNNING for t in self.trials) < self.concurrency:
                trial = self.scheduler.choose_trial_to_run(self)
                if trial is None:
                    break
                trial.status = RUNNING
                self.log.append(("start", trial.index))
            running = [t for t in self.trials if t.status == RUNNING]
            if not running:
                break
            for trial in running:
                if trial.status != RUNNING:
                    continue
                self.iteration[trial.index] += 1
                it = self.iteration[trial.index]
                result = {"training_iteration": it, "time_total_s": float(it), METRIC: score(trial, it)}
                trial.checkpoint = f"ckpt-{trial.index}-{it}"
                decision = self.scheduler.on_trial_result(self, trial, dict(result))
                for other in self.trials if self.ray else ():  # synchronous PBT exploits others too
                    if other.restore_from is not None:
                        self._exploited(other, other.restore_from, other.config)
                        other.restore_from = None
                trial.last_result = result
                self.log.append((trial.index, it, decision))
                if decision == STOP:
                    self.stop_trial(trial)
                elif decision == PAUSE:
                    trial.status = PAUSED
                elif it >= max_iter and trial.status == RUNNING:
                    self.scheduler.on_trial_complete(self, trial, result)
                    trial.status = TERMINATED
        self.log.append(("final", tuple(t.status for t in self.trials)))
        return self.log


class _Saved(str):
    """A checkpoint Ray's save answers; PBT replay resolves it to a training result."""

    def resolve(self) -> Any:
        return SimpleNamespace(checkpoint=str(self), metrics={})


def _nothing(*args: Any) -> None:
    return None


def _rounded(config: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 9) if isinstance(v, float) else v for k, v in config.items()}


def _score(trial: Any, it: int) -> float:
    # Distinct per trial, noisy over iterations, so rankings change along the way.
    return (trial.index + 1) * it * 0.1 + math.sin(trial.index * 7 + it)


def _lr_score(trial: Any, it: int) -> float:
    return -abs(trial.config["lr"] - 0.3) * it + 0.01 * trial.index


def _both(ray_scheduler: Any, ours: Any, configs: list[dict[str, Any]], concurrency: int, score: Any, max_iter: int):
    ray_log = Loop(ray_scheduler, True, configs, concurrency).run(score, max_iter)
    our_log = Loop(ours, False, configs, concurrency).run(score, max_iter)
    return ray_log, our_log


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize(("concurrency", "hard_stop"), [(6, True), (2, True), (2, False)])
def test_median_stopping_rule_decides_as_rays(mode: str, concurrency: int, hard_stop: bool) -> None:
    args = {"time_attr": "training_iteration", "grace_period": 2, "min_samples_required": 2, "hard_stop": hard_stop}
    ray_s = RayMedian(metric=METRIC, mode=mode, **args)
    ours = scheduling.MedianStoppingRule(args, METRIC, mode)
    sign = 1 if mode == "max" else -1
    ray_log, our_log = _both(ray_s, ours, [{}] * 6, concurrency, lambda t, it: sign * _score(t, it), 8)
    assert our_log == ray_log
    decisions = {entry[2] for entry in ray_log if len(entry) == 3 and isinstance(entry[0], int)}
    assert "STOP" in decisions or "PAUSE" in decisions  # the sequence exercises the rule


@pytest.mark.parametrize(("max_t", "eta", "n", "concurrency"), [(9, 3, 9, 9), (27, 3, 12, 4), (8, 2, 6, 3)])
def test_hyperband_decides_as_rays(max_t: int, eta: float, n: int, concurrency: int) -> None:
    ray_s = RayHyperBand(metric=METRIC, mode="max", max_t=max_t, reduction_factor=eta)
    ours = scheduling.HyperBandScheduler({"max_t": max_t, "reduction_factor": eta}, METRIC, "max")
    ray_log, our_log = _both(ray_s, ours, [{}] * n, concurrency, _score, max_t)
    assert our_log == ray_log
    assert any(e[0] == "stopped" for e in ray_log) and any(len(e) == 3 and e[2] == "PAUSE" for e in ray_log)


def test_hyperband_for_bohb_decides_as_rays() -> None:
    ray_s = RayBOHB(metric=METRIC, mode="min", max_t=9, reduction_factor=3)
    ours = scheduling.HyperBandForBOHB({"max_t": 9, "reduction_factor": 3, "_decisions_only": True}, METRIC, "min")
    ray_log, our_log = _both(ray_s, ours, [{}] * 10, 4, _score, 9)
    assert our_log == ray_log
    assert any(len(e) == 3 and e[2] == "PAUSE" for e in ray_log)


def test_hyperband_for_bohb_names_its_missing_libraries() -> None:
    from trainwire_core.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="hpbandster") as info:
        scheduling.HyperBandForBOHB({"max_t": 9}, METRIC, "max")
    assert info.value.field == "tune_config.scheduler.name"


@pytest.mark.parametrize("synch", [False, True])
@pytest.mark.parametrize("seed", [0, 3])
def test_pbt_exploits_and_explores_as_rays(synch: bool, seed: int) -> None:
    mutations = {"lr": lambda: 0.5, "batch": [16, 32, 64, 128]}
    configs = [{"lr": 0.1 * (i + 1), "batch": [16, 32, 64, 128][i % 4]} for i in range(4)]
    args = {
        "time_attr": "training_iteration",
        "perturbation_interval": 2,
        "quantile_fraction": 0.25,
        "resample_probability": 0.3,
        "synch": synch,
    }
    random.seed(seed)
    ray_s = RayPBT(metric=METRIC, mode="max", hyperparam_mutations=mutations, log_config=False, **args)
    rng = random.Random(seed)
    explorer = pbt.LocalExplorer(mutations, 0.3, (1.2, 0.8), rng)
    ours = pbt.PopulationBasedTraining(args, METRIC, "max", explorer, rng)
    ray_log, our_log = _both(ray_s, ours, configs, 4, _lr_score, 12)
    assert our_log == ray_log
    exploits = [e for e in ray_log if e[0] == "exploit"]
    assert exploits, "the sequence makes PBT exploit"
    assert any(e[4]["lr"] not in (0.1, 0.2, 0.3, 0.4) for e in exploits)  # and explore: a perturbed lr


def test_pbt_replay_changes_config_as_rays(tmp_path: Any) -> None:
    policy = tmp_path / "pbt_policy_1.txt"
    rows = [
        ["t", "c1", 2, 2, {"lr": 0.1}, {"lr": 0.2}],
        ["c2", "t", 4, 4, {"lr": 0.2}, {"lr": 0.4}],
    ]
    import json

    policy.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ray_s = RayReplay(str(policy))
    from trainwire.tune.schedulers import PopulationBasedTrainingReplay

    proto = PopulationBasedTrainingReplay(str(policy)).to_proto()
    from trainwire_core.structs import struct_to_dict

    ours = pbt.PopulationBasedTrainingReplay(struct_to_dict(proto.options))
    ray_loop, our_loop = Loop(ray_s, True, [{}], 1), Loop(ours, False, [{}], 1)
    assert our_loop.trials[0].config == ray_loop.trials[0].config == {"lr": 0.1}
    for loop in (ray_loop, our_loop):
        loop.run(lambda t, it: float(it), 6)
    assert our_loop.trials[0].config == ray_loop.trials[0].config == {"lr": 0.4}
    assert ours.num_perturbations == ray_s._num_perturbations == 2
