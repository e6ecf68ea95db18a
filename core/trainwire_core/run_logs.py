"""Where workers' log lines live in the store, and how a reader says where it got to.

Each rank and attempt writes numbered chunks of JSON lines, each chunk written whole
(``runs/<id>/logs/rank-<r>/attempt-<a>/<seq>.jsonl``), and a ``done`` file when its
output has ended. A chunk is never changed once written, so a reader that remembers the
chunk and line it got to resumes exactly there, on any coordinator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LOGS_DIR = "logs"
DONE_NAME = "done"
CHUNK_NAME = re.compile(r"^(\d{8})\.jsonl$")
_RANK_DIR = re.compile(r"^rank-(\d{1,6})$")
_ATTEMPT_DIR = re.compile(r"^attempt-(\d{1,6})$")
_CURSOR_PART = re.compile(r"^(\d{1,6})\.(\d{1,6}):(\d{1,8})\.(\d{1,9})$")
# A longer line is split: a reader never holds more than this per line.
MAX_LINE_CHARS = 64 * 1024


def chunk_name(seq: int) -> str:
    return f"{seq:08d}.jsonl"


def stream_dir(run_dir: str, rank: int, attempt: int) -> str:
    return f"{run_dir}/{LOGS_DIR}/rank-{rank}/attempt-{attempt}"


def parse_rank_dir(name: str) -> int | None:
    m = _RANK_DIR.match(name)
    return int(m.group(1)) if m else None


def parse_attempt_dir(name: str) -> int | None:
    m = _ATTEMPT_DIR.match(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class Position:
    """The last line read of one stream: chunk ``seq``, line ``line`` (0-based) of it."""

    seq: int
    line: int


def encode_cursor(positions: dict[tuple[int, int], Position]) -> str:
    """``rank.attempt:seq.line`` per stream, comma-separated."""
    return ",".join(f"{r}.{a}:{p.seq}.{p.line}" for (r, a), p in sorted(positions.items()))


def decode_cursor(cursor: str) -> dict[tuple[int, int], Position]:
    """The positions a cursor holds.

    Raises:
        ValueError: Not a cursor this module wrote.
    """
    positions: dict[tuple[int, int], Position] = {}
    if not cursor:
        return positions
    if len(cursor) > 100_000:
        raise ValueError("cursor is too long")
    for part in cursor.split(","):
        m = _CURSOR_PART.match(part)
        if not m:
            raise ValueError(f"bad cursor part {part[:40]!r}")
        r, a, seq, line = map(int, m.groups())
        positions[(r, a)] = Position(seq, line)
    return positions
