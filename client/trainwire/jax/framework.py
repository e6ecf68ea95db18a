"""JAX as every trainwire component sees it (see ``trainwire_core.frameworks``).

Its loop saves whatever it wants in a checkpoint directory (flax serialization, orbax...),
as with Ray's ``JaxTrainer``: there is no JAX checkpoint class or predictor of its own, so the
predictor serves its checkpoints only by the model file they hold.
"""

from trainwire_core.frameworks import Framework

FRAMEWORK = Framework(
    name="jax",
    trainer="trainwire.jax.trainer:JaxTrainer",
    checkpoint="trainwire.checkpoint:Checkpoint",
    predictor="trainwire.predictor:Predictor",
    platform="",
    detection_order=100,
    module="jax",
    package="jax",
    install="pip install jax (GPU workers: pip install 'jax[cuda12]')",
)
