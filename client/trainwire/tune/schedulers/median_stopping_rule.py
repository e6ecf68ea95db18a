"""``ray.tune.schedulers.median_stopping_rule``: the module Ray's examples import the median stopping rule from."""

from trainwire.tune.schedulers import MedianStoppingRule

__all__ = ["MedianStoppingRule"]
