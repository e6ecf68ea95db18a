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
        "CartPole-v1",
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
    actions = predictor.predict(observations)["predictions"].to_numpy()
    assert actions.shape == (64,)
    assert set(np.unique(actions)) <= {0, 1}

    def greedy(obs, env):
        return int(predictor.predict(obs[None])["predictions"].iloc[0])

    def random_policy(obs, env):
        return int(env.action_space.sample())

    trained, random = _rollout(greedy), _rollout(random_policy)
    # A random policy keeps the pole up ~20 steps; PPO after 6k steps well over 100.
    assert random < 40
    assert trained > 100 and trained > 3 * random, (trained, random)


def test_resume_trains_the_remaining_iterations(ppo_result):
    result = RLTrainer(
        "PPO",
        "CartPole-v1",
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
    ],
)
def test_bad_requests_name_the_field(client, mutate, field):
    request = RLTrainer("PPO", "CartPole-v1", num_iterations=1).build_request(client)
    mutate(request)
    with pytest.raises(InvalidArgumentError) as info:
        client.fit(request)
    assert info.value.field == field


def test_trainer_checks_arguments():
    with pytest.raises(InvalidArgumentError) as info:
        RLTrainer("PPO", "CartPole-v1", num_iterations=0)
    assert info.value.field == "rl.num_iterations"
    with pytest.raises(InvalidArgumentError) as info:
        RLTrainer("PPO", "CartPole-v1", config={"training": 3})
    assert info.value.field == "rl.config.training"
