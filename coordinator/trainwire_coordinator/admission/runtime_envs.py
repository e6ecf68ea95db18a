"""Runtime environments: package uploads (content-addressed) and the checks of a Fit's runtime_env."""

from __future__ import annotations

import asyncio
import io
import re
import shlex
from collections.abc import AsyncIterator, Sequence
from urllib.parse import urlsplit

from google.protobuf import json_format
from packaging.requirements import InvalidRequirement, Requirement

from trainwire_coordinator.admission.uploads import SHA256, read_hashed_upload
from trainwire_core.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from trainwire_core.packages import MAX_PACKAGE_BYTES, check_package, open_package, package_name
from trainwire_core.storage import Store
from trainwire_core.v1 import common_pb2, coordinator_pb2

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set by trainwire for its workers: a run may not change them.
_RESERVED_ENV_PREFIXES = ("TRAINWIRE_", "RAY_")
# Variables that change what the dynamic loader or an interpreter loads or runs in the
# worker and every process it starts (compared upper-cased). MALLOC_* and the like tune, so stay allowed.
_LOADER_ENV_PREFIXES = ("LD_", "DYLD_", "PYTHON")
_LOADER_ENV_NAMES = frozenset(
    {
        "BASH_ENV",
        "ENV",
        "PATH",
        "IFS",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "GCONV_PATH",
        "GETCONF_DIR",
        "HOSTALIASES",
        "LOCPATH",
        "NLSPATH",
    }
)
# PYTHON* variables that only tune output, hashing and tracebacks.
_PYTHON_ENV_ALLOWED = frozenset(
    {"PYTHONUNBUFFERED", "PYTHONHASHSEED", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE", "PYTHONIOENCODING"}
)
# pip options a requirement line may carry. The worker writes the lines to a requirements
# file for ``pip install -r``, so each line is parsed as pip parses a requirements line.
# --no-deps and --upgrade are harmless: pip refuses them in a requirements file (the install fails).
_PIP_FLAGS = frozenset({"--pre", "--no-deps", "--upgrade", "-U", "--prefer-binary"})
_PIP_INDEX_OPTIONS = frozenset({"--index-url", "-i", "--extra-index-url"})
_PIP_BINARY_OPTIONS = frozenset({"--only-binary", "--no-binary"})
_PIP_ALLOWED = (
    "--index-url/-i and --extra-index-url (an index this coordinator allows), --pre, --no-deps, "
    "--upgrade/-U, --prefer-binary, --only-binary/--no-binary"
)
# Why the options people reach for are refused (any other option is refused too).
_PIP_REFUSED = {
    **dict.fromkeys(("-r", "--requirement", "-c", "--constraint"), "it reads a file of the worker host"),
    **dict.fromkeys(("-e", "--editable", "--src"), "it installs from a path or repository of the worker host"),
    **dict.fromkeys(
        ("-f", "--find-links", "--no-index"), "it changes where packages come from; name an allowed index instead"
    ),
    **dict.fromkeys(
        ("--trusted-host", "--cert", "--client-cert", "--proxy"), "it changes how pip reaches and trusts indexes"
    ),
    **dict.fromkeys(
        ("--global-option", "--build-option", "--config-settings", "-C"), "it passes options to package builds"
    ),
    **dict.fromkeys(
        ("--target", "-t", "--prefix", "--root", "--user", "--break-system-packages"),
        "it changes where pip installs",
    ),
}
# pip installs a requirement that looks like a path or an archive from the worker's disk.
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tlz")
_PACKAGE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
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


def _pip_refusal(field: str, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{field}: {why}", field=field)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:80] + "...")


def _check_index_url(option: str, url: str, field: str, allowed: frozenset[str]) -> None:
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    if "@" in netloc:
        # Not echoed: the credentials would land in the run's failure reason.
        raise _pip_refusal(field, f"the URL of pip option {option} must not carry credentials")
    if url.rstrip("/") not in allowed:
        where = "this coordinator allows none" if not allowed else "see the setting pip_allowed_index_urls"
        raise _pip_refusal(
            field, f"pip option {option} names {_shown(url)}, not an index this coordinator allows ({where})"
        )


def _check_binary_value(option: str, value: str, field: str) -> None:
    if not all(item in (":all:", ":none:") or _PACKAGE_NAME.match(item) for item in value.split(",")):
        raise _pip_refusal(
            field, f"pip option {option} takes :all:, :none: or package names separated by commas, got {_shown(value)}"
        )


def _check_requirement(token: str, field: str) -> None:
    if "/" in token or "\\" in token or token.startswith((".", "~")) or token.lower().endswith(_ARCHIVE_SUFFIXES):
        raise _pip_refusal(
            field,
            f"{_shown(token)} looks like a path or URL, which pip would read on the worker host; "
            "name a package of an index (e.g. 'numpy==2.*')",
        )
    # Split on spaces, "pkg @ url" is three words: any "@" is a direct reference (no name or version needs one).
    if "@" in token:
        raise _pip_refusal(field, f"{_shown(token)} is part of a direct reference (pkg @ url); name an index package")
    try:
        Requirement(token)
    except InvalidRequirement:
        raise _pip_refusal(
            field, f"{_shown(token)} is not a requirement (a package name with extras and versions, e.g. 'numpy==2.*')"
        ) from None


def check_pip_line(line: str, field: str, *, allowed_index_urls: Sequence[str] = ()) -> None:
    """Checks one runtime_env pip line, token by token as pip reads a requirements-file line.

    Args:
        line: The requirement line (the worker writes it into the requirements file pip installs).
        field: The request field named in errors, e.g. ``run_config.runtime_env.pip[0]``.
        allowed_index_urls: The indexes ``--index-url``/``-i``/``--extra-index-url`` may name
            (compared without a trailing "/").

    Raises:
        InvalidArgumentError: The line is not one printable line of requirements and allowed options.
    """
    if not line.strip() or len(line) > 1000 or not line.isprintable():
        raise InvalidArgumentError(f"{field} must be one printable requirement line, got {line!r}", field=field)
    if "$" in line:
        raise _pip_refusal(field, "'$' is not allowed: pip replaces ${NAME} with the worker's environment variables")
    if any(char in line for char in "'\"\\"):
        # pip splits a line's requirements on spaces and shell-splits only its options: with
        # quotes or escapes, the words checked here may not be the words pip reads.
        raise _pip_refusal(field, "quotes and backslashes are not allowed in a pip line")
    try:
        tokens = shlex.split(line)
    except ValueError:
        raise _pip_refusal(field, "the line cannot be split into words as pip splits it") from None
    allowed = frozenset(url.rstrip("/") for url in allowed_index_urls)
    position = 0
    while position < len(tokens):
        token = tokens[position]
        position += 1
        if not token.startswith("-"):
            _check_requirement(token, field)
            continue
        # pip's option parser (optparse): --name=value or --name value; -xvalue or -x value.
        if token.startswith("--"):
            option, equals, attached = token.partition("=")
            value = attached if equals else None
        else:
            option, value = token[:2], (token[2:] or None)
        if option in _PIP_FLAGS:
            if value is not None:
                raise _pip_refusal(field, f"pip option {_shown(option)} takes no value (got {_shown(token)})")
            continue
        if option not in _PIP_INDEX_OPTIONS and option not in _PIP_BINARY_OPTIONS:
            why = _PIP_REFUSED.get(option, "it is not one trainwire allows")
            raise _pip_refusal(field, f"pip option {_shown(option)} is not allowed ({why}); allowed: {_PIP_ALLOWED}")
        if value is None:
            if position == len(tokens):
                raise _pip_refusal(field, f"pip option {option} needs a value")
            value = tokens[position]
            position += 1
        if option in _PIP_INDEX_OPTIONS:
            _check_index_url(option, value, field, allowed)
        else:
            _check_binary_value(option, value, field)


def check_env_var_name(name: str, field: str) -> None:
    """Checks a runtime_env variable name: a plain name trainwire does not set, that changes no loader.

    Raises:
        InvalidArgumentError: A name that is malformed, reserved, or changes what the worker runs.
    """
    if not _ENV_NAME.match(name):
        raise InvalidArgumentError(f"{field}: not a variable name", field=field)
    upper = name.upper()
    if upper.startswith(_RESERVED_ENV_PREFIXES):
        raise InvalidArgumentError(
            f"{field}: reserved (names starting {' or '.join(_RESERVED_ENV_PREFIXES)})", field=field
        )
    if upper in _LOADER_ENV_NAMES or (upper.startswith(_LOADER_ENV_PREFIXES) and upper not in _PYTHON_ENV_ALLOWED):
        hint = f" (of PYTHON* only {', '.join(sorted(_PYTHON_ENV_ALLOWED))})" if upper.startswith("PYTHON") else ""
        raise InvalidArgumentError(
            f"{field}: not allowed, it changes what the worker's loader/interpreter runs{hint}", field=field
        )


def check_runtime_env(
    env: common_pb2.RuntimeEnv,
    packages: PackageService,
    *,
    allow_pip: bool,
    allowed_index_urls: Sequence[str] = (),
) -> None:
    """Checks a Fit's runtime_env: its packages are stored, its pip lines and variables are sound.

    Args:
        env: The request's runtime_env.
        packages: Where uploaded packages are looked up (``exists``).
        allow_pip: Whether this coordinator installs pip lines at all.
        allowed_index_urls: The package indexes a pip line may name (setting pip_allowed_index_urls).

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
        check_pip_line(line, f"{prefix}.pip[{i}]", allowed_index_urls=allowed_index_urls)
    if len(env.env_vars) > MAX_ENV_VARS:
        raise InvalidArgumentError(f"{prefix}.env_vars has over {MAX_ENV_VARS} entries", field=f"{prefix}.env_vars")
    for key, value in env.env_vars.items():
        field = f"{prefix}.env_vars[{key}]"
        check_env_var_name(key, field)
        if "\0" in value or len(value) > 32768:
            raise InvalidArgumentError(f"{field} must be under 32 KiB with no NUL", field=field)
