"""``ray.tune.execution.placement_groups``: ``PlacementGroupFactory`` where Ray's examples import it from."""

from __future__ import annotations

from typing import Any

from trainwire.tune.placement_groups import PlacementGroupFactory

__all__ = ["PlacementGroupFactory", "resource_dict_to_pg_factory"]


def resource_dict_to_pg_factory(spec: dict[str, Any] | None = None) -> PlacementGroupFactory:
    """A one-bundle factory from Ray's resource dict (``cpu``, ``gpu``, ``memory``, ``custom_resources``)."""
    spec = dict(spec or {"cpu": 1})
    bundle = {k: v for k, v in dict(spec.pop("custom_resources", None) or {}).items() if v}
    for key, name in (("cpu", "CPU"), ("gpu", "GPU"), ("memory", "memory")):
        value = spec.pop(key, None) or spec.pop(name, None)
        if value:
            bundle[name] = value
    bundle.update({k: v for k, v in spec.items() if v})
    return PlacementGroupFactory([bundle or {"CPU": 1}])
