"""``ray.air.integrations.keras``: the Keras callback that reports (and checkpoints) each epoch."""

from trainwire.tensorflow.keras import ReportCheckpointCallback

__all__ = ["ReportCheckpointCallback"]
