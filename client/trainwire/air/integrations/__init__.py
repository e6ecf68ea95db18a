"""``ray.air.integrations``: framework callbacks under Ray 2.4's module paths."""
