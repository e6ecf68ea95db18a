"""Ray Tune's framework integrations (``ray.tune.integration``): ``.xgboost`` and ``.lightgbm``.

Each is imported when named, since each imports its framework.
"""
