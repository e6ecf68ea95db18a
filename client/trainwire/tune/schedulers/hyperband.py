"""``ray.tune.schedulers.hyperband``: the module Ray's examples import HyperBand from."""

from trainwire.tune.schedulers import HyperBandScheduler

__all__ = ["HyperBandScheduler"]
