"""trainwire predictor: serves committed checkpoints over the Open Inference Protocol."""

__version__ = "0.1.0"
