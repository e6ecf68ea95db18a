"""Generation's libraries (torch, transformers, peft, llguidance) imported with the first model that needs them.

A predictor that serves XGBoost or scikit-learn never loads torch: importing the server took
seconds more when the decode engine imported it eagerly, and every ``--workers`` process paid it.
"""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """A stand-in for a module, imported on its first attribute access.

    It is not put in ``sys.modules``: libraries that look there to decide whether torch is in
    use (array-API dispatch in scikit-learn, pandas, ...) must not see torch before it loads.
    Each attribute, once read, is kept on the stand-in, so the decode loop's lookups after the
    first are plain attribute reads.

    Args:
        name: The module's import name (``"torch"``).
    """

    def __init__(self, name: str) -> None:
        self._lazy_name = name

    def __getattr__(self, attr: str) -> Any:
        value = getattr(importlib.import_module(self._lazy_name), attr)
        setattr(self, attr, value)
        return value

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"
