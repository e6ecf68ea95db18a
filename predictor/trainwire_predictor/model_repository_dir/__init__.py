"""A model repository directory served as it is, laid out as Triton's and MLServer's (``--model-repository``)."""

from trainwire_predictor.model_repository_dir.config import ModelSettings, VersionPolicy, parse_mlserver, parse_triton
from trainwire_predictor.model_repository_dir.repository import Listed, ModelDirectory

__all__ = ["Listed", "ModelDirectory", "ModelSettings", "VersionPolicy", "parse_mlserver", "parse_triton"]
