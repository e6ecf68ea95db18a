"""``ray.tune.schedulers.resource_changing_scheduler``: where Ray defines ResourceChangingScheduler."""

from trainwire.tune.schedulers import ResourceChangingScheduler

__all__ = ["ResourceChangingScheduler"]
