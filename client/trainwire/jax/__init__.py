"""JAX support, mirroring ``ray.train.v2.jax``."""

from trainwire.jax.trainer import JaxConfig, JaxTrainer

__all__ = ["JaxConfig", "JaxTrainer"]
