"""Ray Tune's framework integrations (``ray.tune.integration``): ``.xgboost``, ``.lightgbm`` and ``.keras``.

Each is imported when named, since each imports its framework.
"""
