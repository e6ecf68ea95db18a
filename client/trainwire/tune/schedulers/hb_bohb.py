"""``ray.tune.schedulers.hb_bohb``: the module Ray's examples import BOHB's HyperBand from."""

from trainwire.tune.schedulers import HyperBandForBOHB

__all__ = ["HyperBandForBOHB"]
