"""``ray.train.tensorflow`` as ``trainwire.tensorflow``: once imported, this module is that one."""

import importlib
import sys

# One module under both names: classes, isinstance checks and lazy attributes stay those of trainwire.tensorflow.
sys.modules[__name__] = importlib.import_module("trainwire.tensorflow")
