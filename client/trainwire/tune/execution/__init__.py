"""``ray.tune.execution``: its public part, ``placement_groups.PlacementGroupFactory``.

The search itself runs in the coordinator.
"""
