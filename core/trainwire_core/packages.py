"""Runtime-environment packages: zip archives of a working_dir or a py_module.

An archive is untrusted input twice: when the coordinator receives it and when a worker
unpacks it. Both check every entry here before a byte is written: no absolute or ``..``
paths, no links or devices, and bounded sizes (a zip bomb names its entry).
"""

from __future__ import annotations

import os
import posixpath
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainwire_core.errors import InvalidArgumentError

PACKAGES_DIR = "packages"
MAX_PACKAGE_BYTES = 100 * 1024 * 1024
MAX_UNPACKED_BYTES = 1024 * 1024 * 1024
MAX_ENTRIES = 50_000
# Source and data compress 3-10x; far beyond that, an entry is built to blow up.
MAX_COMPRESSION_RATIO = 200
_SMALL_ENTRY = 1024 * 1024  # below this, any ratio is harmless


@dataclass(frozen=True)
class PackageSummary:
    num_files: int
    unpacked_bytes: int


def package_name(sha256: str) -> str:
    """The store path of a package, relative to the store root."""
    return posixpath.join(PACKAGES_DIR, f"{sha256}.zip")


def _check_name(name: str) -> None:
    parts = name.rstrip("/").split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or (len(name) > 1 and name[1] == ":")
        or any(p in ("", ".", "..") for p in parts)
        or len(name.encode()) > 1024
    ):
        raise InvalidArgumentError(f"package entry {name!r} is not a relative path inside the package", field="chunk")


def check_package(archive: zipfile.ZipFile, max_unpacked_bytes: int = MAX_UNPACKED_BYTES) -> PackageSummary:
    """Checks every entry of an archive; returns what it holds.

    Raises:
        InvalidArgumentError: An entry with an unsafe path, a link or device, a
            suspicious compression ratio, or an archive over the limits (field ``chunk``;
            the message names the entry).
    """
    infos = archive.infolist()
    if len(infos) > MAX_ENTRIES:
        raise InvalidArgumentError(f"package has {len(infos)} entries; the limit is {MAX_ENTRIES}", field="chunk")
    seen: set[str] = set()
    total = files = 0
    for info in infos:
        _check_name(info.filename)
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            what = "a symbolic link" if kind == stat.S_IFLNK else "not a regular file"
            raise InvalidArgumentError(f"package entry {info.filename!r} is {what}", field="chunk")
        name = info.filename.rstrip("/")
        if name in seen:
            raise InvalidArgumentError(f"package entry {info.filename!r} is listed twice", field="chunk")
        seen.add(name)
        if info.is_dir():
            continue
        files += 1
        total += info.file_size
        if info.file_size > _SMALL_ENTRY and info.file_size > MAX_COMPRESSION_RATIO * max(info.compress_size, 1):
            raise InvalidArgumentError(
                f"package entry {info.filename!r} unpacks {info.compress_size} bytes to {info.file_size} "
                f"(over {MAX_COMPRESSION_RATIO}x): refused as a zip bomb",
                field="chunk",
            )
        if total > max_unpacked_bytes:
            raise InvalidArgumentError(
                f"package unpacks to over {max_unpacked_bytes} bytes (at entry {info.filename!r})", field="chunk"
            )
    return PackageSummary(num_files=files, unpacked_bytes=total)


def open_package(source: str | os.PathLike | IO[bytes]) -> zipfile.ZipFile:
    """Opens an archive, with a bad one as INVALID_ARGUMENT."""
    try:
        return zipfile.ZipFile(source)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InvalidArgumentError(f"package is not a zip archive: {exc}", field="chunk") from exc


def extract_package(source: str | os.PathLike | IO[bytes], dest: str | os.PathLike) -> PackageSummary:
    """Checks, then unpacks an archive into ``dest`` (regular files and directories only)."""
    dest = Path(dest)
    with open_package(source) as archive:
        summary = check_package(archive)
        for info in archive.infolist():
            target = dest / info.filename
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            # Reads stop at the entry's declared size, which check_package bounded.
            with archive.open(info) as fin, open(target, "wb") as fout:
                while chunk := fin.read(1 << 20):
                    fout.write(chunk)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                os.chmod(target, mode | 0o400)
    return summary
