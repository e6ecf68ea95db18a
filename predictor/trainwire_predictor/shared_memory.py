"""Triton's system shared memory extension: regions a caller registers, inputs read from them, outputs written.

A caller on the same host creates a POSIX shared memory object (``shm_open``,
as ``tritonclient.utils.shared_memory`` and ``perf_analyzer`` do), registers a
region of it by name, then names that region, a byte size and an offset on an
input (the data is read from there instead of the request) or on a requested
output (the answer is written there, and the response carries only the
tensor's metadata). This saves the copy through the socket for large tensors.

Security: registering makes the predictor map a host object the caller names,
with the predictor's own rights. The key is therefore checked to be a plain
POSIX shared memory name (``/name``: no further slash, not ``.`` or ``..``,
no control characters), opened under ``/dev/shm`` without following links and
only when it is a regular file; and the front ends require the ``admin``
scope to register or unregister (status and inference need ``predict``).
CUDA shared memory is not offered: its RPCs answer UNIMPLEMENTED, but unregister, which has
nothing to drop and succeeds (perf_analyzer unregisters every region, CUDA's too, as it ends).

The registry is protocol-neutral and owned by the data plane; the front ends
only turn their parameters into ``SharedMemoryRef`` values.
"""

from __future__ import annotations

import mmap
import os
import stat
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from trainwire_core.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError, TrainwireError

# Where Linux keeps POSIX shared memory objects (what shm_open("/name") opens).
SHM_DIR = "/dev/shm"
# NAME_MAX: the longest file name (the key without its slash).
_MAX_KEY = 255
# Request parameters that place a tensor in a region (Triton's names).
REGION, BYTE_SIZE, OFFSET = "shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"


class UnimplementedError(TrainwireError):
    """A protocol feature the predictor does not offer."""

    code = grpc.StatusCode.UNIMPLEMENTED


CUDA_UNIMPLEMENTED = (
    "CUDA shared memory is not supported by the trainwire predictor (it serves from CPU memory); "
    "use system shared memory (--shared-memory system) or send tensors in the request"
)


def cuda_unimplemented() -> UnimplementedError:
    """The error every CUDA shared memory call answers."""
    return UnimplementedError(CUDA_UNIMPLEMENTED)


@dataclass(frozen=True, slots=True)
class SharedMemoryRef:
    """Where one tensor lies in a registered region.

    Attributes:
        region: The region's registered name.
        byte_size: The tensor's bytes (an output: room for at most that many).
        offset: Where it starts within the region.
        field: The request's parameters holding these, for error messages (``inputs[0].parameters``).
    """

    region: str
    byte_size: int
    offset: int = 0
    field: str = "parameters"


@dataclass(frozen=True)
class RegionStatus:
    """One registered region, as the status call answers it."""

    name: str
    key: str
    offset: int
    byte_size: int


def check_key(key: str) -> str:
    """The file name under ``/dev/shm`` of a POSIX shared memory key (``/name``).

    Raises:
        InvalidArgumentError: Anything but one leading slash and a plain name (field ``key``).
    """
    name = key[1:] if key.startswith("/") else ""
    if (
        not name
        or len(name.encode()) > _MAX_KEY
        or "/" in name
        or "\\" in name
        or name in (".", "..")
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
    ):
        raise InvalidArgumentError(
            f"shared memory key {key!r} is not a POSIX shared memory name: give '/name' "
            "(one leading slash, no other slash, not '.' or '..', no control characters)",
            field="key",
        )
    return name


def _non_negative(value: Any, field: str) -> int:
    if type(value) is not int or value < 0:
        raise InvalidArgumentError(f"{field} must be a non-negative integer, not {value!r}", field=field)
    return value


class _Region:
    """A registered region: the mapping of the whole object, and the window the caller registered."""

    __slots__ = ("name", "key", "offset", "byte_size", "map")

    def __init__(self, name: str, key: str, offset: int, byte_size: int, mapping: mmap.mmap) -> None:
        self.name, self.key, self.offset, self.byte_size, self.map = name, key, offset, byte_size, mapping


class SharedMemoryRegistry:
    """The system shared memory regions registered with one predictor process."""

    def __init__(self, shm_dir: str = SHM_DIR) -> None:
        self.shm_dir = shm_dir
        self._regions: dict[str, _Region] = {}
        # Register and unregister may run on threads; reads and writes stay on the event loop.
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Maps ``byte_size`` bytes at ``offset`` of the object ``key`` as the region ``name``.

        Raises:
            InvalidArgumentError: No name, a bad key, or a window past the object's end.
            NotFoundError: No such shared memory object.
            AlreadyExistsError: A region of that name is registered.
        """
        if not name:
            raise InvalidArgumentError("a shared memory region needs a name", field="name")
        file_name = check_key(key)
        offset = _non_negative(offset, "offset")
        byte_size = _non_negative(byte_size, "byte_size")
        if byte_size == 0:
            raise InvalidArgumentError("byte_size must be positive", field="byte_size")
        with self._lock:
            if name in self._regions:
                raise AlreadyExistsError(
                    f"shared memory region {name!r} is already registered; unregister it first", field="name"
                )
            path = os.path.join(self.shm_dir, file_name)
            try:
                # O_NOFOLLOW: a link planted under /dev/shm must not lead the predictor elsewhere.
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                raise NotFoundError(f"no shared memory object {key!r}", field="key") from None
            except OSError as exc:
                raise InvalidArgumentError(
                    f"cannot open shared memory object {key!r}: {exc.strerror}", field="key"
                ) from None
            try:
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode):
                    raise InvalidArgumentError(f"shared memory object {key!r} is not a regular object", field="key")
                if offset + byte_size > info.st_size:
                    raise InvalidArgumentError(
                        f"offset {offset} + byte_size {byte_size} runs past the {info.st_size} bytes of {key!r}",
                        field="byte_size" if offset < info.st_size else "offset",
                    )
                mapping = mmap.mmap(fd, info.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(fd)
            self._regions[name] = _Region(name, key, offset, byte_size, mapping)

    def unregister(self, name: str = "") -> None:
        """Drops the region ``name`` (every region when ""); an unknown name is no error, as in Triton."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for n in names:
                region = self._regions.pop(n, None)
                if region is not None:
                    region.map.close()

    def status(self, name: str = "") -> list[RegionStatus]:
        """The region ``name`` (every region when "").

        Raises:
            NotFoundError: No region of that name.
        """
        with self._lock:
            if name and name not in self._regions:
                raise NotFoundError(f"no shared memory region {name!r} is registered", field="name")
            regions = [self._regions[name]] if name else list(self._regions.values())
            return [RegionStatus(r.name, r.key, r.offset, r.byte_size) for r in regions]

    def close(self) -> None:
        """Unmaps every region."""
        self.unregister()

    def _window(self, ref: SharedMemoryRef) -> tuple[_Region, int]:
        """The region of ``ref`` and the tensor's start in its mapping, bounds checked."""
        region = self._regions.get(ref.region)
        if region is None:
            raise InvalidArgumentError(
                f"no shared memory region {ref.region!r} is registered", field=f"{ref.field}.{REGION}"
            )
        if ref.offset > region.byte_size:
            raise InvalidArgumentError(
                f"{OFFSET} {ref.offset} is past the end of region {ref.region!r} ({region.byte_size} bytes)",
                field=f"{ref.field}.{OFFSET}",
            )
        if ref.offset + ref.byte_size > region.byte_size:
            raise InvalidArgumentError(
                f"{BYTE_SIZE} {ref.byte_size} at offset {ref.offset} runs past the end of region "
                f"{ref.region!r} ({region.byte_size} bytes)",
                field=f"{ref.field}.{BYTE_SIZE}",
            )
        return region, region.offset + ref.offset

    def read(self, ref: SharedMemoryRef) -> bytes:
        """A copy of the tensor's bytes (a copy: the caller may reuse the region as soon as it is answered)."""
        region, start = self._window(ref)
        return region.map[start : start + ref.byte_size]

    def write(self, ref: SharedMemoryRef, data: bytes) -> None:
        """Writes an output's bytes at its place.

        Raises:
            InvalidArgumentError: The output is larger than the room the request gave it.
        """
        region, start = self._window(ref)
        if len(data) > ref.byte_size:
            raise InvalidArgumentError(
                f"output needs {len(data)} bytes but {BYTE_SIZE} gives it {ref.byte_size}",
                field=f"{ref.field}.{BYTE_SIZE}",
            )
        region.map[start : start + len(data)] = data


def region_ref(params: dict[str, Any], field: str) -> SharedMemoryRef | None:
    """The region a tensor's parameters place it in (None: not in shared memory).

    Args:
        params: The parameters as plain values (name -> str or int).
        field: Where they sit in the request (``inputs[0].parameters``).

    Raises:
        InvalidArgumentError: A region without a byte size, or a value of the wrong type (the field names it).
    """
    region = params.get(REGION)
    if region is None:
        for key in (BYTE_SIZE, OFFSET):
            if key in params:
                raise InvalidArgumentError(f"{field}.{key} needs {field}.{REGION}", field=f"{field}.{REGION}")
        return None
    if not isinstance(region, str) or not region:
        raise InvalidArgumentError(f"{field}.{REGION} must be a region name", field=f"{field}.{REGION}")
    if BYTE_SIZE not in params:
        raise InvalidArgumentError(f"{field}.{BYTE_SIZE} is required with {REGION}", field=f"{field}.{BYTE_SIZE}")
    size = _non_negative(params[BYTE_SIZE], f"{field}.{BYTE_SIZE}")
    offset = _non_negative(params.get(OFFSET, 0), f"{field}.{OFFSET}")
    return SharedMemoryRef(region, size, offset, field)
