"""Progress display while a run is watched: metrics as they arrive, a bar when the length is known."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

_SHOWN = 4


class RunProgress:
    """A rich progress line per run; silent when disabled."""

    def __init__(self, name: str, total: int | None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.fields[name]}[/] {task.fields[state]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[metrics]}"),
            console=self.console,
            disable=not enabled,
        )
        self._task = self._progress.add_task("", total=total, name=name, state="PENDING", metrics="")

    def __enter__(self) -> RunProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)

    def metrics(self, metrics: dict[str, Any]) -> None:
        shown = [
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in metrics.items()
            if isinstance(v, int | float)
        ][:_SHOWN]
        self._progress.update(self._task, advance=1, metrics=" ".join(shown))

    def state(self, state: str, reason: str) -> None:
        self._progress.update(self._task, state=state + (f" ({reason})" if reason else ""))
