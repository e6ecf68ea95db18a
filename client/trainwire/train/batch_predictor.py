"""``ray.train.batch_predictor`` as ``trainwire.batch_predictor``: once imported, this module is that one."""

import importlib
import sys

# One module under both names: classes, isinstance checks and lazy attributes stay those of trainwire.batch_predictor.
sys.modules[__name__] = importlib.import_module("trainwire.batch_predictor")
