"""Who may send worker reports, and what a report may name in the store.

Each run's workers get a secret when they start: an HMAC of the run id under the
coordinator's report key. A coordinator started again with the same key (a
setting) accepts the streams of workers that outlived its predecessor, and no
per-run secret needs storing.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError
from trainwire_core.serving import REPORT_RUN_ID_METADATA as RUN_ID_METADATA
from trainwire_core.serving import REPORT_SECRET_METADATA as SECRET_METADATA
from trainwire_core.storage import RANK_STAGING_PREFIX, is_path_component, is_relative_path
from trainwire_core.v1 import worker_reports_pb2

_SHA256 = re.compile(r"[0-9a-f]{64}")


class ReportSecrets:
    """Issues and checks the per-run secrets of report streams.

    Args:
        key: The coordinator's report key; empty makes a random one for this process.
    """

    def __init__(self, key: str = "") -> None:
        self._key = (key or secrets.token_hex(32)).encode()

    def secret_for(self, run_id: str) -> str:
        """The secret that the workers of ``run_id`` present on their report streams."""
        return hmac.new(self._key, run_id.encode(), hashlib.sha256).hexdigest()

    def authorize(self, metadata: dict[str, str]) -> str:
        """Checks a report stream's metadata; returns the run id it may report for.

        Raises:
            UnauthenticatedError: no run id or no secret.
            PermissionDeniedError: the secret is not this run's.
        """
        run_id = metadata.get(RUN_ID_METADATA, "")
        secret = metadata.get(SECRET_METADATA, "")
        if not run_id or not secret:
            raise UnauthenticatedError(
                f"a report stream needs '{RUN_ID_METADATA}' and '{SECRET_METADATA}' metadata; "
                "only a run's own workers may report"
            )
        if not hmac.compare_digest(self.secret_for(run_id), secret):
            raise PermissionDeniedError(f"the report secret is not the one of run {run_id!r}")
        return run_id


def check_report(report: worker_reports_pb2.WorkerReport, run_id: str) -> None:
    """Checks one report of a stream authorized for ``run_id`` before it touches the store.

    Raises:
        PermissionDeniedError: the report is for another run.
        InvalidArgumentError: a checkpoint id or file path that is not a plain store path.
    """
    if report.run_id != run_id:
        raise PermissionDeniedError(f"a stream of run {run_id!r} cannot report for run {report.run_id!r}")
    if report.WhichOneof("kind") != "report":
        return
    msg = report.report
    if msg.checkpoint_id and not is_path_component(msg.checkpoint_id):
        raise InvalidArgumentError(
            f"report.checkpoint_id must be a plain path component, got {msg.checkpoint_id!r}",
            field="report.checkpoint_id",
        )
    if msg.files and not msg.checkpoint_id:
        raise InvalidArgumentError("report.files needs a report.checkpoint_id", field="report.files")
    for i, f in enumerate(msg.files):
        if not is_relative_path(f.path):
            field = f"report.files[{i}].path"
            raise InvalidArgumentError(
                f"{field} must be a relative path inside the checkpoint, got {f.path!r}", field=field
            )
        if f.path.startswith(RANK_STAGING_PREFIX):
            field = f"report.files[{i}].path"
            raise InvalidArgumentError(f"{field} may not start with {RANK_STAGING_PREFIX!r} (reserved)", field=field)
        if f.size_bytes < 0:
            field = f"report.files[{i}].size_bytes"
            raise InvalidArgumentError(f"{field} must be >= 0", field=field)
        if not _SHA256.fullmatch(f.sha256):
            raise InvalidArgumentError(
                f"report.files[{i}].sha256 must be 64 lowercase hex digits", field=f"report.files[{i}].sha256"
            )
