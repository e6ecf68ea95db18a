"""``ray.train.v2.jax`` as ``trainwire.jax``: once imported, this module is that one."""

import importlib
import sys

# One module under both names: classes, isinstance checks and lazy attributes stay those of trainwire.jax.
sys.modules[__name__] = importlib.import_module("trainwire.jax")
