"""``ray.train.lightgbm`` as ``trainwire.lightgbm``: once imported, this module is that one."""

import importlib
import sys

# One module under both names: classes, isinstance checks and lazy attributes stay those of trainwire.lightgbm.
sys.modules[__name__] = importlib.import_module("trainwire.lightgbm")
