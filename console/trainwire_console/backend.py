"""What the console's pages ask of the coordinator and the predictors, over their public APIs only.

Their gRPC APIs, and the predictors' Prometheus metrics (plain HTTP, as Triton's metrics port)
for what ModelStatistics lacks (percentiles). Every call here blocks (the SDK's clients, urllib);
the endpoints run them in threads, off the event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.request
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from trainwire.client import CoordinatorClient
from trainwire.predictor_client import PredictorClient
from trainwire_console.feeds import Feeds
from trainwire_console.quantiles import Buckets, duration_buckets, quantiles_ms, sum_buckets
from trainwire_console.scores import score_config, served_checkpoint_id
from trainwire_console.sparklines import Sparklines
from trainwire_core.auth import CANCEL, READ
from trainwire_core.errors import InvalidArgumentError, TrainwireError
from trainwire_core.grpc_status import from_rpc_error
from trainwire_core.inference import grpc_service_pb2 as pb
from trainwire_core.storage import MANIFEST_NAME
from trainwire_core.tls import ClientTLS
from trainwire_core.v1 import common_pb2, coordinator_pb2

STATES = [name for name in common_pb2.RunState.keys() if name != "RUN_STATE_UNSPECIFIED"]
# ListRuns pages scanned at most for one filtered page of the runs list (name and framework
# filters are the console's own: ListRuns filters by state only).
MAX_SCAN_PAGES = 20
# Signed-in users' sessions kept at once.
MAX_SESSIONS = 256
# A predictor's metrics endpoint that answers slower is left out of that refresh's p99.
METRICS_TIMEOUT_S = 2.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Abilities:
    """What the console's token may do, learned from the coordinator (never assumed)."""

    read: bool
    cancel: bool


def probe_abilities(client: CoordinatorClient) -> Abilities:
    """Asks the coordinator what the token may do (GetCaller: its scopes); an unknown token may do nothing."""
    try:
        scopes = set(client.get_caller().scopes)
    except TrainwireError:
        return Abilities(read=False, cancel=False)
    return Abilities(read=READ in scopes, cancel=CANCEL in scopes)


def predictor_targets(address: str) -> list[str]:
    """One ``host:port`` per predictor replica: a ``dns:///name:port`` resolves to each address it holds."""
    if not address.startswith("dns:"):
        return [address]
    name = address.split("///", 1)[-1] if "///" in address else address[len("dns:") :]
    host, _, port = name.rpartition(":")
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return [name]
    ips = sorted({info[4][0] for info in infos})
    return [f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips] or [name]


def predictor_server_name(address: str) -> str | None:
    """The name a ``dns:///name:port`` address's replicas carry in their TLS certificate; None for others."""
    if not address.startswith("dns:"):
        return None
    name = address.split("///", 1)[-1] if "///" in address else address[len("dns:") :]
    return name.rpartition(":")[0] or None


def metrics_urls(entries: Sequence[str]) -> list[str]:
    """The predictors' metrics URLs: ``dns:///name:port`` stands for ``http://ADDRESS:port/metrics`` of each address."""
    urls = []
    for entry in entries:
        if entry.startswith("dns:"):
            urls += [f"http://{target}/metrics" for target in predictor_targets(entry)]
        else:
            urls.append(entry)
    return urls


def replica_histograms(url: str, timeout_s: float = METRICS_TIMEOUT_S) -> dict[tuple[str, str], Buckets] | None:
    """One predictor's request-duration histograms from its metrics URL; None (logged) when it fails."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return duration_buckets(answer.read().decode())
    except (OSError, ValueError) as err:
        log.warning("predictor metrics %s left out of p99: %s", url, err)
        return None


def run_summary(run: coordinator_pb2.Run, now_s: float) -> dict[str, Any]:
    """A run as a row of the runs list."""
    created = run.created_at.ToMicroseconds() / 1e6
    score_attribute, order = score_config(run)
    return {
        "run_id": run.run_id,
        "name": run.name,
        "state": common_pb2.RunState.Name(run.state),
        "reason": run.state_reason,
        "framework": run.framework,
        "workers": run.request.scaling_config.num_workers,
        "min_workers": run.request.scaling_config.min_workers,
        "attempts": run.attempt + 1,
        "failures": run.num_failures,
        "coordinator_restarts": run.num_coordinator_restarts,
        "submitted_by": run.submitted_by,
        "reports": run.last_report_index,
        "created_s": created,
        "age_s": max(now_s - created, 0.0),
        "score_attribute": score_attribute,
        "score_order": order,
    }


class Session:
    """What one token may see and do: the coordinator's client with that token, and its scopes.

    Args:
        client: The coordinator's client, with the token.
    """

    def __init__(self, client: CoordinatorClient) -> None:
        self.client = client
        self._abilities: Abilities | None = None

    def abilities(self) -> Abilities:
        if self._abilities is None:
            self._abilities = probe_abilities(self.client)
        return self._abilities

    def list_runs(
        self, states: list[str], name: str, framework: str, page_size: int, page_token: str
    ) -> tuple[list[dict[str, Any]], str]:
        """A page of runs, newest first, filtered; and the token of the next page ("" at the end)."""
        wanted = [common_pb2.RunState.Value(s) for s in states if s in STATES]
        rows: list[dict[str, Any]] = []
        now = time.time()
        token = page_token
        for _ in range(MAX_SCAN_PAGES):
            response = self.client.list_runs(wanted, page_size, token)
            for run in response.runs:
                if name and name.lower() not in run.name.lower() and name != run.run_id:
                    continue
                if framework and run.framework != framework:
                    continue
                rows.append(run_summary(run, now))
            token = response.next_page_token
            if len(rows) >= page_size or not token:
                break
        return rows, token

    def get_run(self, run: str) -> coordinator_pb2.Run:
        return self.client.get_run(run)

    def cancel(self, run: str) -> coordinator_pb2.Run:
        return self.client.cancel_run(run)

    async def logs(self, run_id: str, ranks: list[int], after: str, follow: bool) -> AsyncIterator[list[dict]]:
        """Batches of the workers' lines (WatchLogs), read in a thread; the stream is cancelled on exit."""
        request = coordinator_pb2.WatchLogsRequest(run_id=run_id, ranks=ranks, follow=follow, after=after)
        call = self.client.stub.WatchLogs(request, metadata=self.client._metadata)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def pump() -> None:
            try:
                for batch in call:
                    lines = [
                        {"rank": ln.world_rank, "attempt": ln.attempt + 1, "stream": ln.stream, "text": ln.text}
                        | {"cursor": ln.cursor}
                        for ln in batch.lines
                    ]
                    loop.call_soon_threadsafe(queue.put_nowait, lines)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.CANCELLED:
                    loop.call_soon_threadsafe(queue.put_nowait, from_rpc_error(err))
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        threading.Thread(target=pump, daemon=True, name=f"logs-{run_id}").start()
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, TrainwireError):
                    raise item
                yield item
        finally:
            call.cancel()

    def close(self) -> None:
        self.client.close()


class ConsoleBackend:
    """The console's clients of the coordinator and the predictors, and what it keeps of them.

    Args:
        address: The coordinator's ``host:port``.
        token: The console's bearer token for the coordinator (pages use it unless a user signs in).
        predictor: The predictors' gRPC target ("" for none), e.g. ``dns:///predictor:8001``.
        predictor_token: Bearer token for the predictors (default: ``token``).
        tls: What to trust and present (default: the ``TRAINWIRE_TLS_*`` environment).
        predictor_metrics: The predictors' Prometheus URLs (``http://host:8002/metrics``, or
            ``dns:///name:port`` for every address of a name), for p99 latencies; none: no p99.
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        predictor: str = "",
        predictor_token: str | None = None,
        tls: ClientTLS | None = None,
        predictor_metrics: Sequence[str] = (),
    ) -> None:
        self.address = address
        self.tls = tls if tls is not None else ClientTLS.from_files()
        self.default = Session(CoordinatorClient(address, token=token or "", tls=self.tls))
        self.client = self.default.client
        self.feeds = Feeds()
        self.sparklines = Sparklines(self.feeds)
        self.predictor = predictor
        self._predictor_token = predictor_token if predictor_token is not None else (token or "")
        self._predictors: dict[str, PredictorClient] = {}
        # (run id, checkpoint number) -> checkpoint id: the predictors report a version by its number,
        # which is never reused in a run, so what is learnt once holds.
        self._numbered: dict[tuple[str, str], str] = {}
        self._numbered_lock = threading.Lock()
        self.predictor_metrics = list(predictor_metrics)
        # Signed-in users' sessions by token, the least recently used closed first.
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._sessions_lock = threading.Lock()
        self._downloads = Path(tempfile.mkdtemp(prefix="trainwire-console-"))
        self._download_lock = threading.Lock()

    def session(self, token: str | None) -> Session:
        """The session of a signed-in user's token; the console's own without one."""
        if not token:
            return self.default
        with self._sessions_lock:
            session = self._sessions.get(token)
            if session is None:
                session = self._sessions[token] = Session(CoordinatorClient(self.address, token=token, tls=self.tls))
                while len(self._sessions) > MAX_SESSIONS:
                    self._sessions.popitem(last=False)[1].close()
            self._sessions.move_to_end(token)
        return session

    # --- checkpoints ------------------------------------------------------------------
    def checkpoint_dir(self, session: Session, run: str, checkpoint_id: str) -> Path:
        """The checkpoint's files, downloaded once through the coordinator (DownloadCheckpoint).

        The session's token must read the run (GetRun) before it is handed files another token fetched.
        """
        if "/" in checkpoint_id or checkpoint_id in ("", ".", ".."):
            raise InvalidArgumentError("not a checkpoint id", field="checkpoint")
        run_id = session.get_run(run).run_id
        target = self._downloads / run_id / checkpoint_id
        with self._download_lock:
            if not target.exists():
                partial = Path(tempfile.mkdtemp(dir=self._downloads))
                try:
                    session.client.download_checkpoint(f"{run_id}/{checkpoint_id}", partial)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(partial, target)
                finally:
                    shutil.rmtree(partial, ignore_errors=True)
        return target

    def checkpoint_files(self, session: Session, run: str, checkpoint_id: str) -> list[dict[str, Any]]:
        """The checkpoint's files with their size and sha256, as its manifest lists them."""
        directory = self.checkpoint_dir(session, run, checkpoint_id)
        manifest = directory / MANIFEST_NAME
        if manifest.exists():
            files = json.loads(manifest.read_text())["files"]
            return [{"path": f["path"], "size_bytes": f["size_bytes"], "sha256": f["sha256"]} for f in files]
        out = []
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            data = path.read_bytes()
            rel = path.relative_to(directory).as_posix()
            out.append({"path": rel, "size_bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        return out

    # --- models ----------------------------------------------------------------------------
    def _predictor(self, target: str) -> PredictorClient:
        client = self._predictors.get(target)
        if client is None:
            client = PredictorClient(
                target,
                timeout_s=10,
                tls=self.tls,
                token=self._predictor_token,
                server_name=predictor_server_name(self.predictor),
            )
            self._predictors[target] = client
        return client

    def models(self) -> list[dict[str, Any]]:
        """Each served model version, with its statistics summed over the replicas that serve it."""
        if not self.predictor:
            return []
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for target in predictor_targets(self.predictor):
            client = self._predictor(target)
            try:
                index = client._call("RepositoryIndex", pb.RepositoryIndexRequest())
                stats = client._call("ModelStatistics", pb.ModelStatisticsRequest())
            except TrainwireError as err:
                rows[("", target)] = _empty_row("", "") | {"state": "UNREACHABLE", "reason": f"{target}: {err}"}
                continue
            for model in index.models:
                row = rows.setdefault((model.name, model.version), _empty_row(model.name, model.version))
                row["replicas"].append(target)
                row["state"] = model.state if row["state"] in ("", "UNAVAILABLE") else row["state"]
                row["reason"] = row["reason"] or model.reason
            for s in stats.model_stats:
                row = rows.setdefault((s.name, s.version), _empty_row(s.name, s.version))
                st = s.inference_stats
                row["inference_count"] += s.inference_count
                row["execution_count"] += s.execution_count
                row["success_count"] += st.success.count
                row["success_ns"] += st.success.ns
                row["fail_count"] += st.fail.count
                row["queue_count"] += st.queue.count
                row["queue_ns"] += st.queue.ns
                row["infer_ns"] += st.compute_infer.ns
                row["last_inference_ms"] = max(row["last_inference_ms"], s.last_inference)
        p99 = self.p99_latencies_ms()
        self._name_checkpoints(list(rows.values()))
        out = []
        for row in rows.values():
            row["p99_latency_ms"] = p99.get((row["model"], row["version"]))
            row["mean_latency_ms"] = row["success_ns"] / row["success_count"] / 1e6 if row["success_count"] else None
            row["mean_queue_ms"] = row["queue_ns"] / row["queue_count"] / 1e6 if row["queue_count"] else None
            out.append(row)
        return sorted(out, key=lambda r: (r["model"], r["version"]))

    def _name_checkpoints(self, rows: list[dict[str, Any]]) -> None:
        """Adds each row's checkpoint id and whether it is its run's served (default) version.

        The predictors report a version by its number; the coordinator names the run's kept
        checkpoints (GetRun of the model's name, with the console's token), and the predictors give
        the number of each (ModelStatistics of a checkpoint id reports it under its number). What is
        learnt is kept, so each checkpoint is asked about once.
        """
        for model in {r["model"] for r in rows if r["model"]}:
            try:
                run = self.client.get_run(model)
            except TrainwireError:
                continue
            served = served_checkpoint_id(run)
            kept = [c.checkpoint_id for c in run.best_checkpoints]
            if run.HasField("latest_checkpoint"):
                kept.append(run.latest_checkpoint.checkpoint_id)
            with self._numbered_lock:
                known = {n: cid for (rid, n), cid in self._numbered.items() if rid == run.run_id}
            numbers = {r["version"] for r in rows if r["model"] == model and r["version"].isdigit()}
            if not numbers <= set(known) and self.predictor:
                asked = set(known.values())
                for cid in dict.fromkeys(kept):
                    if cid in asked:
                        continue
                    request = pb.ModelStatisticsRequest(name=model, version=cid)
                    try:
                        stats = self._predictor(predictor_targets(self.predictor)[0])._call("ModelStatistics", request)
                    except TrainwireError:
                        continue  # not in the predictors' index yet: asked again on the next refresh
                    for s in stats.model_stats:
                        if s.version.isdigit():
                            known[s.version] = cid
                            with self._numbered_lock:
                                self._numbered[(run.run_id, s.version)] = cid
            for row in rows:
                if row["model"] == model:
                    checkpoint = known.get(row["version"], "" if row["version"].isdigit() else row["version"])
                    row["checkpoint_id"] = checkpoint
                    row["served"] = bool(checkpoint) and checkpoint == served

    def p99_latencies_ms(self) -> dict[tuple[str, str], float]:
        """p99 request latency per (model, version), from the predictors' histograms summed over replicas.

        A replica whose metrics do not answer is left out (logged); none configured: none known.
        """
        urls = metrics_urls(self.predictor_metrics)
        if not urls:
            return {}
        with ThreadPoolExecutor(max_workers=min(len(urls), 16), thread_name_prefix="metrics") as pool:
            replicas = [h for h in pool.map(replica_histograms, urls) if h is not None]
        return quantiles_ms(sum_buckets(replicas), 0.99)

    def predict(self, model: str, version: str, body: str, fmt: str) -> list[dict[str, Any]]:
        """Scores one request from JSON (an object of columns or a list of rows) or CSV (a header and rows)."""
        import io

        import pandas as pd

        if not self.predictor:
            raise InvalidArgumentError("the console was started without --predictor", field="predictor")
        try:
            if fmt == "csv":
                frame = pd.read_csv(io.StringIO(body))
            else:
                data = json.loads(body)
                frame = pd.DataFrame(data if isinstance(data, list) else {k: _listed(v) for k, v in data.items()})
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(f"the request is not {fmt.upper()} rows: {exc}", field="body") from None
        result = self._predictor(self.predictor).predict(model, frame, version=version)
        return json.loads(result.to_json(orient="records"))

    def close(self) -> None:
        self.default.close()
        for session in self._sessions.values():
            session.close()
        for client in self._predictors.values():
            client.close()
        shutil.rmtree(self._downloads, ignore_errors=True)


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _empty_row(model: str, version: str) -> dict[str, Any]:
    return {
        "model": model,
        "version": version,
        "state": "",
        "reason": "",
        "replicas": [],
        "inference_count": 0,
        "execution_count": 0,
        "success_count": 0,
        "success_ns": 0,
        "fail_count": 0,
        "queue_count": 0,
        "queue_ns": 0,
        "infer_ns": 0,
        "last_inference_ms": 0,
        "checkpoint_id": "",
        "served": False,
    }
