"""``ray.train.rl`` as ``trainwire.rllib``: once imported, this module is that one."""

import importlib
import sys

# One module under both names: classes, isinstance checks and lazy attributes stay those of trainwire.rllib.
sys.modules[__name__] = importlib.import_module("trainwire.rllib")
