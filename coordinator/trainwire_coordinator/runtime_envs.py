"""Runtime environments: package uploads (content-addressed) and the checks of a Fit's runtime_env."""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import AsyncIterator

from google.protobuf import json_format

from trainwire_coordinator.uploads import SHA256, read_hashed_upload
from trainwire_core.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from trainwire_core.packages import MAX_PACKAGE_BYTES, check_package, open_package, package_name
from trainwire_core.storage import Store
from trainwire_core.v1 import common_pb2, coordinator_pb2

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set by trainwire for its workers: a run may not change them.
_RESERVED_ENV_PREFIXES = ("TRAINWIRE_", "RAY_")
# pip options a requirement line may carry: where packages come from, nothing that reads
# files of the worker host (-r, -c, -e) or changes where pip installs.
_PIP_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--no-index", "--pre", "--only-binary")
MAX_PIP_LINES = 200
MAX_ENV_VARS = 256


class PackageService:
    """Stores runtime-environment packages once each, checked before they touch the store.

    Args:
        store: The shared store (packages live under ``packages/<sha256>.zip``).
        max_package_bytes: Largest archive accepted.
    """

    def __init__(self, store: Store, max_package_bytes: int = MAX_PACKAGE_BYTES) -> None:
        self.store = store
        self.max_package_bytes = max_package_bytes

    def _path(self, sha256: str) -> str:
        return self.store.path(package_name(sha256))

    def _info_path(self, sha256: str) -> str:
        # What the archive holds, written after it: its presence means the package is complete,
        # and GetPackage (asked before every fit) reads it instead of the archive.
        return self.store.path(package_name(sha256)).removesuffix(".zip") + ".json"

    def exists(self, sha256: str) -> bool:
        return bool(SHA256.match(sha256)) and self.store.exists(self._info_path(sha256))

    def get(self, sha256: str) -> coordinator_pb2.PackageInfo:
        if not SHA256.match(sha256):
            raise InvalidArgumentError("sha256 must be 64 lowercase hex digits", field="sha256")
        if not self.store.exists(self._info_path(sha256)):
            raise NotFoundError(f"no package with sha256 {sha256}")
        return json_format.ParseDict(self.store.read_json(self._info_path(sha256)), coordinator_pb2.PackageInfo())

    def store_package(self, sha256: str, data: bytes) -> coordinator_pb2.PackageInfo:
        """Checks every entry, then writes the archive and what it holds (unless the same content is stored)."""
        with open_package(io.BytesIO(data)) as archive:
            summary = check_package(archive)
        info = coordinator_pb2.PackageInfo(
            sha256=sha256, size_bytes=len(data), num_files=summary.num_files, unpacked_bytes=summary.unpacked_bytes
        )
        if not self.exists(sha256):
            self.store.write_bytes(self._path(sha256), data)
            self.store.write_json(self._info_path(sha256), json_format.MessageToDict(info))
        return info

    async def upload(
        self, requests: AsyncIterator[coordinator_pb2.UploadPackageRequest]
    ) -> coordinator_pb2.PackageInfo:
        header, data = await read_hashed_upload(requests, self.max_package_bytes)
        return await asyncio.to_thread(self.store_package, header.sha256, data)


def check_runtime_env(env: common_pb2.RuntimeEnv, packages: PackageService, *, allow_pip: bool) -> None:
    """Checks a Fit's runtime_env: its packages are stored, its pip lines and variables are sound.

    Raises:
        InvalidArgumentError: A bad reference, pip line or variable (the field is named).
        PermissionDeniedError: ``pip`` on a coordinator that refuses installs.
    """
    prefix = "run_config.runtime_env"
    refs = [("working_dir", env.working_dir)] if env.working_dir else []
    refs += [(f"py_modules[{i}]", sha) for i, sha in enumerate(env.py_modules)]
    for name, sha in refs:
        if not SHA256.match(sha):
            raise InvalidArgumentError(
                f"{prefix}.{name} must be the sha256 of an uploaded package, got {sha!r}", field=f"{prefix}.{name}"
            )
        if not packages.exists(sha):
            raise InvalidArgumentError(
                f"{prefix}.{name}: no package with sha256 {sha} was uploaded (UploadPackage first)",
                field=f"{prefix}.{name}",
            )
    if env.pip and not allow_pip:
        raise PermissionDeniedError(
            "this coordinator does not install pip packages (setting allow_pip_installs); "
            "install them in the workers' image",
            field=f"{prefix}.pip",
        )
    if len(env.pip) > MAX_PIP_LINES:
        raise InvalidArgumentError(f"{prefix}.pip has over {MAX_PIP_LINES} lines", field=f"{prefix}.pip")
    for i, line in enumerate(env.pip):
        field = f"{prefix}.pip[{i}]"
        if not line.strip() or len(line) > 1000 or not line.isprintable():
            raise InvalidArgumentError(f"{field} must be one printable requirement line, got {line!r}", field=field)
        option = line.strip().split("=", 1)[0].split()[0]
        if option.startswith("-") and option not in _PIP_OPTIONS:
            raise InvalidArgumentError(
                f"{field}: pip option {option!r} is not allowed (allowed: {', '.join(_PIP_OPTIONS)})", field=field
            )
    if len(env.env_vars) > MAX_ENV_VARS:
        raise InvalidArgumentError(f"{prefix}.env_vars has over {MAX_ENV_VARS} entries", field=f"{prefix}.env_vars")
    for key, value in env.env_vars.items():
        field = f"{prefix}.env_vars[{key}]"
        if not _ENV_NAME.match(key):
            raise InvalidArgumentError(f"{prefix}.env_vars: {key!r} is not a variable name", field=field)
        if key.upper().startswith(_RESERVED_ENV_PREFIXES):
            raise InvalidArgumentError(
                f"{prefix}.env_vars: {key!r} is reserved (names starting {' or '.join(_RESERVED_ENV_PREFIXES)})",
                field=field,
            )
        if "\0" in value or len(value) > 32768:
            raise InvalidArgumentError(f"{field} must be under 32 KiB with no NUL", field=field)
