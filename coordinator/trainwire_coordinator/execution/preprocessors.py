"""Declarative preprocessors: a ray.data preprocessor built from its name and params, no code sent."""

from __future__ import annotations

from typing import Any

from trainwire_core.errors import InvalidArgumentError
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2


def build_preprocessor(spec: coordinator_pb2.PreprocessorSpec, field: str = "preprocessor") -> Any:
    """Builds an unfitted preprocessor of ``ray.data.preprocessors``.

    Raises:
        InvalidArgumentError: Unknown name or params it does not take (naming the field).
    """
    import ray.data.preprocessors as catalog
    from ray.data.preprocessor import Preprocessor

    if spec.name == "Chain":
        if not spec.steps:
            raise InvalidArgumentError("a Chain needs steps", field=f"{field}.steps")
        return catalog.Chain(*(build_preprocessor(s, f"{field}.steps[{i}]") for i, s in enumerate(spec.steps)))
    cls = getattr(catalog, spec.name, None) if spec.name and not spec.name.startswith("_") else None
    if not isinstance(cls, type) or not issubclass(cls, Preprocessor):
        raise InvalidArgumentError(
            f"{spec.name!r} is not a preprocessor of ray.data.preprocessors (e.g. StandardScaler, MinMaxScaler)",
            field=f"{field}.name",
        )
    try:
        return cls(**struct_to_dict(spec.params))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"{spec.name}: {exc}", field=f"{field}.params") from exc
