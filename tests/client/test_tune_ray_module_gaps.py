"""The Tune names Ray's bundled examples import that trainwire lacked: checked against Ray itself.

``ray.tune.result``'s keys, ``ray.tune.logger.LoggerCallback``'s hooks, ``ray.tune.utils``'s config
helpers and ``mock_trainable.MyTrainableClass``, and ``Tuner(_tuner_kwargs=...)``.
"""

from __future__ import annotations

import pytest

from trainwire.tune.callback import Trial


def test_result_keys_have_rays_values():
    import ray.tune.result as ray_result

    import trainwire.tune.result as tw_result

    names = [n for n in dir(ray_result) if n.isupper()]
    assert names and {n: getattr(tw_result, n) for n in names} == {n: getattr(ray_result, n) for n in names}


def test_logger_callback_routes_hooks_to_log_methods():
    from trainwire.tune.logger import LoggerCallback, pretty_print

    calls = []

    class Recording(LoggerCallback):
        def log_trial_start(self, trial):
            calls.append(("start", trial.index))

        def log_trial_result(self, iteration, trial, result):
            calls.append(("result", result["loss"]))

        def log_trial_end(self, trial, failed=False):
            calls.append(("end", failed))

    trial = Trial("t0", 0, {"lr": 0.1}, "RUNNING")
    cb = Recording()
    cb.on_trial_start(iteration=0, trials=[trial], trial=trial)
    cb.on_trial_result(iteration=1, trials=[trial], trial=trial, result={"loss": 0.5})
    cb.on_trial_error(iteration=2, trials=[trial], trial=trial)
    cb.on_trial_complete(iteration=2, trials=[trial], trial=trial)
    assert calls == [("start", 0), ("result", 0.5), ("end", True), ("end", False)]
    text = pretty_print({"loss": 0.5, "config": {"lr": 0.1}, "skip": None})
    assert "loss: 0.5" in text and "config" not in text and "skip" not in text


def test_utils_match_rays():
    from ray.tune import utils as ray_utils

    from trainwire.tune import utils

    nested = {"a": {"b": 1, "c": {"d": [1, 2]}}, "x": 2}
    assert utils.flatten_dict(nested) == ray_utils.flatten_dict(nested)
    assert utils.flatten_dict(nested, delimiter=".") == ray_utils.flatten_dict(nested, delimiter=".")
    assert utils.flatten_dict(nested, flatten_list=True) == ray_utils.flatten_dict(nested, flatten_list=True)
    replace = {"a": {"c": {"e": 3}}}
    ours = utils.deep_update(utils.merge_dicts(nested, {}), replace, True, override_all_key_list=["c"])
    assert ours == ray_utils.deep_update(ray_utils.merge_dicts(nested, {}), replace, True, override_all_key_list=["c"])
    update = {"a": {"c": {"e": 3}}, "y": 1}
    assert utils.merge_dicts(nested, update) == ray_utils.merge_dicts(nested, update)
    assert utils.unflattened_lookup("a/c/d/1", nested) == 2
    with pytest.raises(Exception, match="Unknown config parameter"):
        utils.deep_update({"a": 1}, {"b": 2})


def test_mock_trainable_learns_a_sigmoid_and_restores_its_timestep(tmp_path):
    from trainwire.tune import Trainable
    from trainwire.tune.utils.mock_trainable import MyTrainableClass

    assert issubclass(MyTrainableClass, Trainable)
    trainable = MyTrainableClass.__new__(MyTrainableClass)
    trainable.config = {"width": 2, "height": 3}
    trainable.setup(trainable.config)
    rewards = [trainable.step()["episode_reward_mean"] for _ in range(3)]
    assert rewards == sorted(rewards) and 0 < rewards[-1] < 3
    trainable.save_checkpoint(str(tmp_path))
    trainable.timestep = 0
    trainable.load_checkpoint(str(tmp_path))
    assert trainable.timestep == 3 and trainable.restored


def test_tuner_kwargs_fail_fast_sets_the_failure_config_and_warns_about_the_rest():
    from trainwire import tune

    def trainable(config):
        tune.report({"loss": 1.0})

    with pytest.warns(UserWarning, match="reuse_actors"):
        tuner = tune.Tuner(trainable, _tuner_kwargs={"fail_fast": True, "reuse_actors": True})
    assert tuner._effective_run_config().failure_config.fail_fast is True
    assert tune.Tuner(trainable)._effective_run_config().failure_config.fail_fast is False


def test_execution_and_experiment_modules_where_rays_examples_import_them():
    from ray.tune.execution.placement_groups import resource_dict_to_pg_factory as ray_factory

    from trainwire.tune import Experiment, PlacementGroupFactory
    from trainwire.tune.execution.placement_groups import resource_dict_to_pg_factory
    from trainwire.tune.experiment import Experiment as ExperimentAgain
    from trainwire.tune.experiment import Trial as TrialAgain

    spec = {"cpu": 2, "gpu": 0, "custom_resources": {"tpu": 1}}
    factory = resource_dict_to_pg_factory(spec)
    assert isinstance(factory, PlacementGroupFactory) and factory.bundles == ray_factory(dict(spec)).bundles
    assert ExperimentAgain is Experiment and TrialAgain is Trial


def test_keras_integration_reports_as_trainwires_keras_callback():
    pytest.importorskip("tensorflow")
    from trainwire.tensorflow.keras import ReportCheckpointCallback
    from trainwire.tune.integration.keras import TuneReportCallback, TuneReportCheckpointCallback

    callback = TuneReportCheckpointCallback(metrics={"acc": "accuracy"}, checkpoint_on="epoch_end")
    assert isinstance(callback, ReportCheckpointCallback)
    assert callback._selected({"accuracy": 0.5, "loss": 1.0}) == {"acc": 0.5}
    with pytest.raises(DeprecationWarning):
        TuneReportCallback()


@pytest.mark.parametrize(
    "module",
    [
        "async_hyperband",
        "hyperband",
        "hb_bohb",
        "median_stopping_rule",
        "resource_changing_scheduler",
        "trial_scheduler",
    ],
)
def test_scheduler_modules_hold_the_classes_ray_defines_there(module):
    import importlib

    import trainwire.tune.schedulers as schedulers

    ours = importlib.import_module(f"trainwire.tune.schedulers.{module}")
    rays = importlib.import_module(f"ray.tune.schedulers.{module}")
    assert ours.__all__ and all(hasattr(rays, name) for name in ours.__all__)
    assert all(getattr(ours, name) is getattr(schedulers, name) for name in ours.__all__)
