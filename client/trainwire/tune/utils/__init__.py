"""``ray.tune.utils``: the config helpers Ray's examples use (``flatten_dict``, ``merge_dicts``, ``deep_update``)
and Ray's diagnostics (``diagnose_serialization``, ``validate_save_restore``, ``wait_for_gpu``, ``UtilMonitor``)."""

from __future__ import annotations

import copy
import inspect
import logging
import os
import time
from typing import Any

from trainwire.tune.utils.util import UtilMonitor, diagnose_serialization, validate_save_restore, wait_for_gpu

__all__ = [
    "UtilMonitor",
    "date_str",
    "deep_update",
    "diagnose_serialization",
    "flatten_dict",
    "merge_dicts",
    "unflattened_lookup",
    "validate_save_restore",
    "wait_for_gpu",
    "warn_if_slow",
]

logger = logging.getLogger(__name__)
# As Ray's: no warnings in the first minute after import (start-up is slow anyway).
_START_OF_TIME = time.time()


def date_str() -> str:
    """The time now as Ray names folders: ``YYYY-MM-DD_HH-MM-SS``."""
    return time.strftime("%Y-%m-%d_%H-%M-%S")


def flatten_dict(dt: dict, delimiter: str = "/", prevent_delimiter: bool = False, flatten_list: bool = False) -> dict:
    """Nested dicts (and lists, with ``flatten_list``) as one level, keys joined with ``delimiter`` (as Ray's)."""

    def refuse() -> None:
        raise ValueError(
            f"Found delimiter `{delimiter}` in key when trying to flatten array. "
            "Please avoid using the delimiter in your specification."
        )

    dt = copy.copy(dt)
    if prevent_delimiter and any(delimiter in str(key) for key in dt):
        refuse()
    nested = (dict, list) if flatten_list else dict
    while any(isinstance(v, nested) for v in dt.values()):
        remove, add = [], {}
        for key, value in dt.items():
            if isinstance(value, dict):
                for subkey, v in value.items():
                    if prevent_delimiter and delimiter in str(subkey):
                        refuse()
                    add[delimiter.join([str(key), str(subkey)])] = v
                remove.append(key)
            elif flatten_list and isinstance(value, list):
                for i, v in enumerate(value):
                    add[delimiter.join([str(key), str(i)])] = v
                remove.append(key)
        dt.update(add)
        for k in remove:
            del dt[k]
    return dt


def unflattened_lookup(flat_key: str, lookup: dict | list, delimiter: str = "/", **kwargs: Any) -> Any:
    """The value at ``flat_key`` ("a/b/0") in nested dicts and lists; ``default=`` if absent."""
    node: Any = lookup
    for part in flat_key.split(delimiter):
        try:
            node = node[int(part)] if isinstance(node, (list, tuple)) else node[part]
        except (KeyError, IndexError, ValueError, TypeError):
            if "default" in kwargs:
                return kwargs["default"]
            raise
    return node


def merge_dicts(d1: dict, d2: dict) -> dict:
    """A deep copy of ``d1`` updated deeply with ``d2``."""
    merged = copy.deepcopy(d1)
    deep_update(merged, d2, new_keys_allowed=True)
    return merged


def deep_update(
    original: dict,
    new_dict: dict,
    new_keys_allowed: bool = False,
    allow_new_subkey_list: list[str] | None = None,
    override_all_if_type_changes: list[str] | None = None,
    override_all_key_list: list[str] | None = None,
) -> dict:
    """Update ``original`` with ``new_dict`` in place, nested dicts merged (Ray's rules for new keys).

    Args:
        original: The dict updated.
        new_dict: The values to set.
        new_keys_allowed: Whether keys ``original`` lacks may be added.
        allow_new_subkey_list: Top-level keys whose dicts may gain keys.
        override_all_if_type_changes: Top-level keys whose dict is replaced when its "type" changes.
        override_all_key_list: Keys whose value is replaced whole.
    """
    allow_new_subkey_list = allow_new_subkey_list or []
    override_all_if_type_changes = override_all_if_type_changes or []
    override_all_key_list = override_all_key_list or []
    for k, value in new_dict.items():
        if k not in original and not new_keys_allowed:
            raise Exception(f"Unknown config parameter `{k}` ")
        if isinstance(original.get(k), dict) and isinstance(value, dict) and k not in override_all_key_list:
            if (
                k in override_all_if_type_changes
                and "type" in value
                and "type" in original[k]
                and value["type"] != original[k]["type"]
            ):
                original[k] = value
            else:
                allowed = True if k in allow_new_subkey_list else new_keys_allowed
                deep_update(original[k], value, allowed, override_all_key_list=override_all_key_list)
        else:
            original[k] = value
    return original


class warn_if_slow:  # noqa: N801 - Ray's name
    """Logs a warning when the block takes longer than ``threshold`` seconds, as Ray's.

    Args:
        name: The operation, as the warning names it.
        threshold: Seconds (default: ``TUNE_WARN_THRESHOLD_S``, else 0.5).
        message: The warning, formatted with ``name`` and ``duration``.
        disable: No warning at all.
    """

    DEFAULT_THRESHOLD = float(os.environ.get("TUNE_WARN_THRESHOLD_S", 0.5))
    DEFAULT_MESSAGE = "The `{name}` operation took {duration:.3f} s, which may be a performance bottleneck."

    def __init__(
        self, name: str, threshold: float | None = None, message: str | None = None, disable: bool = False
    ) -> None:
        self.name = name
        self.threshold = threshold or self.DEFAULT_THRESHOLD
        self.message = message or self.DEFAULT_MESSAGE
        self.too_slow = False
        self.disable = disable

    def __enter__(self) -> warn_if_slow:
        self.start = time.time()
        return self

    def __exit__(self, *exc: Any) -> None:
        now = time.time()
        if self.disable:
            return
        if now - self.start > self.threshold and now - _START_OF_TIME > 60.0:
            self.too_slow = True
            logger.warning(self.message.format(name=self.name, duration=now - self.start))


def _detect_config_single(func: Any) -> bool:
    """Whether ``func({})`` binds: a function trainable that takes one config (Ray's check)."""
    try:
        inspect.signature(func).bind({})
    except Exception as exc:
        logger.debug(str(exc))
        return False
    return True
