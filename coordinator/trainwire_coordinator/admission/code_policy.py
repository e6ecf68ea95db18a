"""What a Fit may name without the submit-code scope: code, checkpoints and paths.

A scope is a promise: a token without ``submit-code`` runs no code of its own on the
cluster. Every way a request can name code counts, not only pickles: a declarative
estimator ``module:Class`` is called with the request's params, an entry point
``module:function`` is called with its config, RLlib imports a dotted environment or
callback name, and a checkpoint to resume from is unpickled on the workers.

Paths are the other half: ``storage_path``, ``resume_from_checkpoint`` and dataset URIs
name the store, an upload, or a prefix the operator allows (``allowed_path_prefixes``),
whoever calls; anything else is refused without telling whether it exists.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
import re
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from typing import Any

from trainwire_core.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from trainwire_core.manifest import is_code_trusted
from trainwire_core.storage import Store
from trainwire_core.structs import struct_to_dict
from trainwire_core.v1 import coordinator_pb2

# Installed packages declare the train loops any submit token may start here, as
# ``name = "package.module:function"``.
TRAIN_LOOPS_GROUP = "trainwire.train_loops"
# A string RLlib (or gymnasium) would import: "package.module.Class" or "module:attr".
_CODE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$|:")


def declared_train_loops() -> set[str]:
    """The entry points installed packages declare in ``trainwire.train_loops``."""
    return {ep.value.replace(" ", "") for ep in entry_points(group=TRAIN_LOOPS_GROUP)}


def _walk_strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _walk_strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk_strings(item, f"{path}[{i}]")


class CodePolicy:
    """Checks that a Fit names code, checkpoints and paths its caller may use.

    Args:
        store: The coordinator's store (its own paths are always allowed).
        allowed_estimator_classes: fnmatch patterns over ``module.Class`` that a caller without
            submit-code may name as a declarative estimator (each must be a scikit-learn estimator).
        allowed_path_prefixes: URI prefixes beyond the store that requests may name.
    """

    def __init__(
        self,
        store: Store,
        allowed_estimator_classes: Sequence[str] = ("sklearn.*",),
        allowed_path_prefixes: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.allowed_estimator_classes = tuple(allowed_estimator_classes)
        self.allowed_path_prefixes = tuple(_normalise_uri(p) for p in allowed_path_prefixes if p)

    # --- paths --------------------------------------------------------------
    def check_path(self, uri: str, field: str) -> None:
        """Raises InvalidArgumentError naming ``field`` unless ``uri`` is in the store or an allowed prefix.

        The message never says whether the path exists.
        """
        if self.allows_path(uri):
            return
        # Without query options: they may carry an S3 endpoint or keys.
        allowed = [u.partition("?")[0] for u in (self.store.uri_of(self.store.root), *self.allowed_path_prefixes)]
        raise InvalidArgumentError(
            f"{field} must name the store or an allowed prefix ({', '.join(allowed)}); "
            "the operator allows more with allowed_path_prefixes",
            field=field,
        )

    def allows_path(self, uri: str) -> bool:
        """Whether ``uri`` lies in the store or under an allowed prefix (no ``..`` escapes)."""
        try:
            target = _normalise_uri(uri)
        except InvalidArgumentError:
            return False
        store_root = _normalise_uri(self.store.uri_of(self.store.root))
        return any(_under(target, root) for root in (store_root, *self.allowed_path_prefixes))

    def store_path_of(self, uri: str) -> str | None:
        """The path inside the store that ``uri`` names, or None when it names none."""
        try:
            target, root = _normalise_uri(uri), _normalise_uri(self.store.uri_of(self.store.root))
        except InvalidArgumentError:
            return None
        if not _under(target, root):
            return None
        rest = target.partition("?")[0][len(root.partition("?")[0].rstrip("/")) :].strip("/")
        return self.store.path(rest) if rest else self.store.root

    # --- code ---------------------------------------------------------------
    def check_code_names(self, request: coordinator_pb2.FitRequest) -> None:
        """Refuses the code a request names that a caller without submit-code may not run.

        With submit-code anything goes, and the admission does not ask. Without it: estimators from
        the allow-list only, entry points that installed packages declare, RLlib settings without
        importable names, and a resume checkpoint that trainwire or an authorised caller wrote.

        Raises:
            PermissionDeniedError: The request names code its caller may not run (the field is named).
        """
        trainer = request.WhichOneof("trainer")
        if trainer == "sklearn" and request.sklearn.WhichOneof("estimator") == "estimator_class":
            self._check_estimator(request.sklearn.estimator_class)
            _check_estimator_params(struct_to_dict(request.sklearn.estimator_params))
        if trainer == "data_parallel" and request.data_parallel.train_loop.WhichOneof("source") == "entry_point":
            entry = request.data_parallel.train_loop.entry_point.replace(" ", "")
            if entry not in declared_train_loops():
                raise PermissionDeniedError(
                    f"entry point {entry!r} is not a train loop an installed package declares (entry-point group "
                    f"{TRAIN_LOOPS_GROUP!r}); naming any other function needs the 'submit-code' scope",
                    field="data_parallel.train_loop.entry_point",
                )
        if trainer == "rl":
            self._check_rl(request.rl)
        if request.resume_from_checkpoint:
            self._check_resume_trusted(request.resume_from_checkpoint)

    def _check_estimator(self, name: str) -> None:
        field = "sklearn.estimator_class"
        dotted = name.replace(":", ".")
        if not any(fnmatch.fnmatchcase(dotted, pattern) for pattern in self.allowed_estimator_classes):
            raise PermissionDeniedError(
                f"estimator class {name!r} is not in this coordinator's allow-list "
                f"({', '.join(self.allowed_estimator_classes) or 'empty'}); any other class needs the "
                "'submit-code' scope",
                field=field,
            )
        module, _, attr = dotted.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError, ValueError):
            raise InvalidArgumentError(f"cannot import estimator class {name!r}", field=field) from None
        from sklearn.base import BaseEstimator

        if not (isinstance(cls, type) and issubclass(cls, BaseEstimator)):
            raise PermissionDeniedError(f"{name!r} is not a scikit-learn estimator class", field=field)

    def _check_rl(self, spec: coordinator_pb2.RLSpec) -> None:
        values = [("rl.env", spec.env), ("rl.algorithm", spec.algorithm)]
        for section in ("config", "flat_config"):
            if spec.HasField(section):
                values += list(_walk_strings(struct_to_dict(getattr(spec, section)), f"rl.{section}"))
        for field, value in values:
            if _CODE_NAME.search(value):
                raise PermissionDeniedError(
                    f"{field} = {value!r} names code RLlib would import; that needs the 'submit-code' scope "
                    "(use a registered environment id such as 'CartPole-v1')",
                    field=field.split("[")[0],
                )

    def _check_resume_trusted(self, uri: str) -> None:
        """A checkpoint uploaded without submit-code holds pickles no one vouched for."""
        field = "resume_from_checkpoint"
        directory = self.store_path_of(uri)
        trusted = False
        if directory is not None:
            try:
                trusted = is_code_trusted(self.store, directory)
            except (NotFoundError, OSError, ValueError):
                trusted = False
        if not trusted:
            raise PermissionDeniedError(
                "resume_from_checkpoint names a checkpoint that was not written by a trainwire run or an "
                "upload with the 'submit-code' scope; resuming from it needs that scope",
                field=field,
            )


def _check_estimator_params(params: dict[str, Any]) -> None:
    """Estimator params that name host paths: a joblib cache directory, or text vectorizers reading files."""
    if params.get("memory") is not None:
        raise PermissionDeniedError(
            "sklearn.estimator_params.memory names a cache directory on the workers; that needs the "
            "'submit-code' scope",
            field="sklearn.estimator_params.memory",
        )
    if params.get("input", "content") != "content":
        raise PermissionDeniedError(
            "sklearn.estimator_params.input other than 'content' reads files named by the data; that needs "
            "the 'submit-code' scope",
            field="sklearn.estimator_params.input",
        )


def _normalise_uri(uri: str) -> str:
    """``scheme://path[?query]`` with ``.`` and ``..`` resolved, for prefix tests; pure string work.

    No filesystem is opened: an S3 URI would look its bucket's region up over the network.
    """
    if not uri or not uri.isprintable():
        raise InvalidArgumentError("a path must be printable and not empty", field="path")
    query = ""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        scheme = scheme.lower()
        rest, _, query = rest.partition("?")
    else:
        scheme, rest = "file", os.path.abspath(os.path.expanduser(uri))
    parts: list[str] = []
    for part in rest.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    root = "/" if scheme == "file" else ""
    return f"{scheme}://{root}{'/'.join(parts)}" + (f"?{query}" if query else "")


def _under(target: str, root: str) -> bool:
    """Whether ``target`` is ``root`` or inside it, with the same query options (an S3 endpoint)."""
    target_path, _, target_query = target.partition("?")
    root_path, _, root_query = root.partition("?")
    if root_path.endswith("://"):
        return target_path.startswith(root_path)  # a whole scheme ("s3://"), whatever its options
    if target_query != root_query:
        return False
    root_path = root_path.rstrip("/")
    return target_path == root_path or target_path.startswith(root_path + "/")
