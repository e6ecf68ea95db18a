"""``RunConfig(log_to_file=...)``: a run's worker output written to files in its directory, as Ray's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainwire.client import format_log_line
from trainwire.config import log_file_names
from trainwire_core.storage import resolve

if TYPE_CHECKING:
    from trainwire.client import CoordinatorClient


def write_log_files(
    client: CoordinatorClient, run_id: str, run_path: str, log_to_file: bool | str | tuple[str, str]
) -> None:
    """Writes an ended run's captured stdout and stderr lines to the files ``log_to_file`` names.

    Ray writes a trial's output to the files as it goes; here the SDK writes them from the run's
    captured logs (every rank, every attempt, each line with its rank prefix) once the run has ended,
    in the run's directory of the shared store. One name for both streams gets both, in order.

    Args:
        client: The coordinator client the run was started with.
        run_id: The run.
        run_path: The run's directory (``Result.path``).
        log_to_file: ``RunConfig.log_to_file``.
    """
    names = log_file_names(log_to_file)
    if names is None or not run_path:
        return
    out: dict[str, list[str]] = {names[0]: [], names[1]: []}
    for line in client.watch_logs(run_id, follow=True):  # the run has ended: to its last line
        out[names[1] if line.stream == "stderr" else names[0]].append(format_log_line(line) + "\n")
    fs, root = resolve(run_path)
    for name, lines in out.items():
        path = f"{root.rstrip('/')}/{name}"
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as f:
            f.write("".join(lines).encode())
