"""RLTrainer: PPO learns CartPole on one worker; the policy serves greedy actions."""

from __future__ import annotations

import numpy as np
import pytest

from trainwire import CheckpointConfig, RunConfig, ScalingConfig
from trainwire.rllib import RLCheckpoint, RLPredictor, RLTrainer
from trainwire_core.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(300)

gymnasium = pytest.importorskip("gymnasium")

PPO_CONFIG = {
    "training": {
        "lr": 1e-3,
        "train_batch_size_per_learner": 1000,
        "minibatch_size": 128,
        "num_epochs": 6,
    },
    "debugging": {"seed": 0},
}
ITERATIONS = 6


def _rollout(policy, episodes: int = 5) -> float:
    """Mean return of ``policy(obs) -> action`` over seeded CartPole episodes."""
    env = gymnasium.make("CartPole-v1")
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=1000 + episode)
        env.action_space.seed(1000 + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs, env))
            total += reward
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


@pytest.fixture(scope="module")
def ppo_result(coordinator):
    return RLTrainer(
        "PPO",
        env="CartPole-v1",
        config=PPO_CONFIG,
        num_iterations=ITERATIONS,
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(
            name="ppo-cartpole", verbose=0, checkpoint_config=CheckpointConfig(checkpoint_frequency=3)
        ),
    ).fit()


def test_ppo_learns_cartpole_and_serves_actions(ppo_result):
    history = ppo_result.metrics_dataframe
    assert list(history["training_iteration"]) == list(range(1, ITERATIONS + 1))
    returns = history["episode_return_mean"].to_numpy()
    assert returns[-1] > returns[0] + 50, returns
    assert history["num_env_steps_sampled_lifetime"].iloc[-1] == 1000 * ITERATIONS
    assert "learners/default_policy/policy_loss" in history.columns

    checkpoint = ppo_result.checkpoint
    assert isinstance(checkpoint, RLCheckpoint)
    assert checkpoint.get_metadata() == {"framework": "rllib", "algorithm": "PPO", "env": "CartPole-v1"}

    predictor = RLPredictor.from_checkpoint(checkpoint)
    observations = np.random.default_rng(0).normal(scale=0.1, size=(64, 4)).astype(np.float32)
    actions = predictor.predict(observations)  # numpy in, numpy out, as Ray's predictors answer
    assert actions.shape == (64,)
    assert set(np.unique(actions)) <= {0, 1}

    def greedy(obs, env):
        return int(predictor.predict(obs[None])[0])

    def random_policy(obs, env):
        return int(env.action_space.sample())

    trained, random = _rollout(greedy), _rollout(random_policy)
    # A random policy keeps the pole up ~20 steps; PPO after 6k steps well over 100.
    assert random < 40
    assert trained > 100 and trained > 3 * random, (trained, random)


def test_resume_trains_the_remaining_iterations(ppo_result):
    result = RLTrainer(
        "PPO",
        env="CartPole-v1",
        config=PPO_CONFIG,
        num_iterations=ITERATIONS + 1,
        resume_from_checkpoint=ppo_result.checkpoint,
        run_config=RunConfig(name="ppo-resume", verbose=0),
    ).fit()
    history = result.metrics_dataframe
    assert list(history["training_iteration"]) == [ITERATIONS + 1]
    assert history["num_env_steps_sampled_lifetime"].iloc[-1] == 1000 * (ITERATIONS + 1)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: setattr(r.rl, "algorithm", "NotAnAlgorithm"), "rl.algorithm"),
        (lambda r: setattr(r.scaling_config, "num_workers", 2), "scaling_config.num_workers"),
        (lambda r: setattr(r.rl, "env", "NoSuchEnv-v0"), "rl.env"),
        (lambda r: setattr(r.rl, "num_iterations", 0), "rl.num_iterations"),
        (lambda r: r.rl.flat_config.update({"env": "CartPole-v1", "num_workers": -1}), "rl.flat_config"),
        (lambda r: r.rl.flat_config.update({"env": "CartPole-v1", "evaluation_num_workers": 1e9}), "rl.flat_config"),
        (lambda r: r.rl.flat_config.update({"env": "CartPole-v1", "num_cpus_per_worker": "all"}), "rl.flat_config"),
        (lambda r: r.rl.flat_config.update({"env": 3}), "rl.flat_config.env"),
        # A null section reached the placement's arithmetic and answered INTERNAL.
        (lambda r: r.rl.config.update({"training": None}), "rl.config.training"),
    ],
)
def test_bad_requests_name_the_field(client, mutate, field):
    request = RLTrainer("PPO", env="CartPole-v1", num_iterations=1).build_request(client)
    mutate(request)
    with pytest.raises(InvalidArgumentError) as info:
        client.fit(request)
    assert info.value.field == field


def test_trainer_checks_arguments():
    with pytest.raises(InvalidArgumentError) as info:
        RLTrainer("PPO", env="CartPole-v1", num_iterations=0)
    assert info.value.field == "rl.num_iterations"
    with pytest.raises(InvalidArgumentError) as info:
        RLTrainer("PPO", env="CartPole-v1", config={"training": 3})
    assert info.value.field == "rl.config.training"


def test_ray24_flat_config_runs_remote_env_runners_and_an_evaluation_runner_in_the_runs_placement_group(coordinator):
    import ray

    from trainwire.air.config import RunConfig as AirRunConfig
    from trainwire.train.rl import RLTrainer as AirRLTrainer

    # Ray 2.4's form: a flat config with "env" and its 2.4 names; num_workers are remote env runners.
    with pytest.warns(DeprecationWarning, match="torch only"):
        trainer = AirRLTrainer(
            algorithm="PPO",
            config={
                "env": "CartPole-v1",
                "framework": "tf",
                "train_batch_size": 400,
                "sgd_minibatch_size": 64,
                "num_sgd_iter": 1,
                "evaluation_num_workers": 1,
                "evaluation_interval": 1,
                "evaluation_duration": 2,
            },
            scaling_config=ScalingConfig(
                num_workers=2, resources_per_worker={"CPU": 0.5}, trainer_resources={"CPU": 0.5}
            ),
            run_config=AirRunConfig(name="ppo-ray24", stop={"training_iteration": 2}, verbose=0),
        )
    result = trainer.fit()
    assert result.metrics["training_iteration"] == 2
    assert result.metrics["num_healthy_env_runners"] == 2
    assert result.metrics["evaluation/num_episodes"] >= 2
    # The algorithm's process, 2 env runners and the evaluation runner: one placement group, in RLlib's order.
    groups = [g["bundles"] for g in ray.util.placement_group_table().values()]
    assert {0: {"CPU": 0.5}, 1: {"CPU": 0.5}, 2: {"CPU": 0.5}, 3: {"CPU": 0.5}} in groups


def test_flat_and_sectioned_configs_reserve_the_bundles_rllib_asks_for():
    from trainwire.rllib.settings import from_ray24, is_sectioned, merged_sections, placement_bundles

    assert is_sectioned({"training": {"lr": 1e-3}}) and not is_sectioned({"env": "CartPole-v1", "lr": 1e-3})
    with pytest.warns(DeprecationWarning):
        flat = from_ray24(
            {
                "env": "CartPole-v1",
                "framework": "tf",
                "num_workers": 5,
                "evaluation_config": {"num_cpus_per_worker": 2},
            },
            ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}, trainer_resources={"CPU": 0.25}),
        )
    flat["evaluation_num_env_runners"] = 1
    assert flat["framework"] == "torch" and flat["num_env_runners"] == 2  # the ScalingConfig wins, as in Ray 2.4
    assert placement_bundles(flat) == [{"CPU": 0.25}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 2.0}]
    # No ScalingConfig: the config's own settings; the local learner needs its CPU in the main bundle.
    assert placement_bundles(from_ray24({"env": "x", "num_workers": 1, "num_cpus_for_driver": 0.5}, None)) == [
        {"CPU": 1.0},
        {"CPU": 1.0},
    ]
    sectioned = {
        "env_runners": {"num_env_runners": 1, "num_cpus_per_env_runner": 0.25},
        "learners": {"num_learners": 1},
    }
    assert placement_bundles(merged_sections(sectioned)) == [{"CPU": 1.0}, {"CPU": 0.25}, {"CPU": 1.0}]
