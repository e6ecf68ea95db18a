"""``ray.tune.schedulers.async_hyperband``: where Ray defines the asynchronous HyperBand scheduler."""

from trainwire.tune.schedulers import ASHAScheduler, AsyncHyperBandScheduler

__all__ = ["ASHAScheduler", "AsyncHyperBandScheduler"]
