"""JaxTrainer end to end: two workers are two JAX processes of one ``jax.distributed`` group."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from trainwire import RunConfig, ScalingConfig, train
from trainwire.jax import JaxTrainer

pytestmark = pytest.mark.timeout(240)


def spmd_loop(config: dict) -> None:
    """Checks the group, sums across processes two ways, then trains a flax model data-parallel."""
    import flax.linen as nn
    import flax.serialization
    import jax
    import jax.numpy as jnp
    import optax
    from jax.experimental import multihost_utils

    rank = train.get_context().get_world_rank()
    value = np.array([10.0 * (rank + 1)], dtype=np.float32)  # rank 0: 10, rank 1: 20
    gathered = multihost_utils.process_allgather(value).ravel().tolist()
    # A collective over every process's devices (a psum across the group).
    psum = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.asarray(value).reshape(1, 1))
    sums = multihost_utils.process_allgather(np.asarray(psum).ravel()).ravel().tolist()

    # y = 2x - 1; each rank holds half the points and the gradients are averaged across ranks.
    xs = np.linspace(-1, 1, 32, dtype=np.float32).reshape(-1, 1)[rank::2]
    ys = 2 * xs - 1
    model = nn.Dense(1)
    params = model.init(jax.random.PRNGKey(0), xs)
    optimizer = optax.sgd(0.3)
    state = optimizer.init(params)
    loss_fn = jax.jit(lambda p: jnp.mean((model.apply(p, xs) - ys) ** 2))
    grad_fn = jax.jit(jax.grad(lambda p: jnp.mean((model.apply(p, xs) - ys) ** 2)))
    for step in range(config["steps"]):
        grads = jax.tree.map(
            lambda g: multihost_utils.process_allgather(g).mean(axis=0), grad_fn(params)
        )  # every rank steps with the same mean gradient
        updates, state = optimizer.update(grads, state)
        params = optax.apply_updates(params, updates)
        loss = float(loss_fn(params))
        metrics = {"loss": loss, "step": step, "gathered": gathered, "sums": sums}
        metrics["processes"] = jax.process_count()
        metrics["devices"] = jax.device_count()
        metrics["platform"] = jax.devices()[0].platform
        if step == config["steps"] - 1:
            with tempfile.TemporaryDirectory() as d:
                if rank == 0:
                    with open(os.path.join(d, "params.msgpack"), "wb") as f:
                        f.write(flax.serialization.to_bytes(params))
                train.report(metrics, checkpoint=train.Checkpoint.from_directory(d))
        else:
            train.report(metrics)


@pytest.fixture(scope="module")
def jax_result(coordinator):
    trainer = JaxTrainer(
        spmd_loop,
        train_loop_config={"steps": 12},
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="jax-spmd"),
    )
    return trainer.fit()


def test_two_workers_are_one_jax_group_and_agree_on_a_psum(jax_result):
    metrics = jax_result.metrics
    assert metrics["processes"] == 2 and metrics["devices"] == 2 and metrics["platform"] == "cpu"
    assert metrics["gathered"] == [10.0, 20.0]  # rank 0's report holds rank 1's value
    assert metrics["sums"] == [30.0, 30.0]  # each rank's psum, gathered: both ranks agree


def test_a_flax_model_trains_and_its_checkpoint_reads_back(jax_result):
    import flax.linen as nn
    import flax.serialization
    import jax
    import jax.numpy as jnp

    losses = jax_result.metrics_dataframe["loss"].tolist()
    assert len(losses) == 12 and losses[-1] < losses[0] / 4
    template = nn.Dense(1).init(jax.random.PRNGKey(1), jnp.zeros((1, 1)))
    with jax_result.checkpoint.as_directory() as d:
        with open(os.path.join(d, "params.msgpack"), "rb") as f:
            params = flax.serialization.from_bytes(template, f.read())
    kernel = float(params["params"]["kernel"][0, 0])
    bias = float(params["params"]["bias"][0])
    assert abs(kernel - 2) < 0.6 and abs(bias + 1) < 0.3
    assert nn.Dense(1).apply(params, jnp.array([[0.5]])).shape == (1, 1)
