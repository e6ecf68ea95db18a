"""The ``trainwire`` command line: services, runs, searches, checkpoints, models, predictions."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from google.protobuf import json_format

from trainwire.client import CoordinatorClient, format_log_line
from trainwire_core.errors import TrainwireError
from trainwire_core.v1 import common_pb2, tune_pb2

DEFAULT_ADDRESS = "127.0.0.1:50051"
# What the service commands that trainwire's own distributions register do (shown by --help).
SERVICE_HELP = {
    "coordinator": "run the coordinator service",
    "predictor": "run the predictor service",
    "console": "run the web console (runs, curves, logs, checkpoints, models)",
    "ray-node-health": "exit 0 when this host's Ray node is live in the cluster (a probe)",
}


def _client(args: argparse.Namespace) -> CoordinatorClient:
    return CoordinatorClient(args.address or os.environ.get("TRAINWIRE_ADDRESS") or DEFAULT_ADDRESS, token=args.token)


def _print_json(message: object) -> None:
    print(json.dumps(json_format.MessageToDict(message), indent=2))


def _runs_list(args: argparse.Namespace) -> None:
    states = [common_pb2.RunState.Value(s.upper()) for s in args.state]
    response = _client(args).list_runs(states, args.page_size, args.page_token, submitted_by=args.submitted_by)
    print(f"{'RUN ID':<18} {'NAME':<24} {'STATE':<11} {'FRAMEWORK':<11} {'BY':<12} REASON")
    for run in response.runs:
        state = common_pb2.RunState.Name(run.state)
        by = run.submitted_by[:12]
        print(f"{run.run_id:<18} {run.name[:24]:<24} {state:<11} {run.framework:<11} {by:<12} {run.state_reason}")
    if response.next_page_token:
        print(f"next page: --page-token {response.next_page_token}")


def _runs_show(args: argparse.Namespace) -> None:
    run = _client(args).get_run(args.run)
    run.ClearField("request")
    _print_json(run)


def _runs_watch(args: argparse.Namespace) -> None:
    for event in _client(args).watch_run(args.run, args.after):
        kind = event.WhichOneof("kind")
        body = json_format.MessageToDict(getattr(event, kind))
        print(json.dumps({"event_id": event.event_id, kind: body}), flush=True)


def _runs_logs(args: argparse.Namespace) -> None:
    for line in _client(args).watch_logs(args.run, ranks=args.rank, follow=args.follow, after=args.after):
        print(format_log_line(line), flush=True)


def _runs_cancel(args: argparse.Namespace) -> None:
    run = _client(args).cancel_run(args.run)
    print(f"{run.run_id} {common_pb2.RunState.Name(run.state)}")


def _runs_plot(args: argparse.Namespace) -> None:
    from trainwire.plotting import fetch_history, plot_histories

    client = _client(args)
    histories = [fetch_history(client, run) for run in args.runs]
    try:
        print(plot_histories(histories, args.output, args.metric or None, args.x))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None


def _tune_trials_done(tune: tune_pb2.TuneRun) -> str:
    done = sum(t.state in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED) for t in tune.trials)
    planned = "?" if tune.num_trials_planned < 0 else str(tune.num_trials_planned or len(tune.trials))
    return f"{done}/{planned}"


def _tunes_list(args: argparse.Namespace) -> None:
    from trainwire.tune.progress import best_text

    response = _client(args).list_tunes(args.page_size, args.page_token)
    print(f"{'TUNE ID':<18} {'NAME':<24} {'STATE':<11} {'TRIALS':<9} BEST")
    for tune in response.tunes:
        state = common_pb2.RunState.Name(tune.state)
        print(f"{tune.tune_id:<18} {tune.name[:24]:<24} {state:<11} {_tune_trials_done(tune):<9} {best_text(tune)}")
    if response.next_page_token:
        print(f"next page: --page-token {response.next_page_token}")


def _tunes_show(args: argparse.Namespace) -> None:
    tune = _client(args).get_tune(args.tune)
    tune.request.ClearField("trainer")  # the trainer's pickled code and datasets: `runs show` a trial for it
    _print_json(tune)


def _tunes_watch(args: argparse.Namespace) -> int:
    """A line per trial state change and per new best trial; 0 once the search SUCCEEDED."""
    from trainwire.tune.progress import describe_changes

    client = _client(args)
    previous = client.get_tune(args.tune)
    for line in describe_changes(None, previous):
        print(line, flush=True)
    if previous.state not in (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED):
        for snapshot in client.watch_tune(previous.tune_id):
            for line in describe_changes(previous, snapshot):
                print(line, flush=True)
            previous = snapshot
    return 0 if previous.state == common_pb2.SUCCEEDED else 1


def _tunes_cancel(args: argparse.Namespace) -> None:
    tune = _client(args).cancel_tune(args.tune)
    print(f"{tune.tune_id} {common_pb2.RunState.Name(tune.state)}")


def _registry(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from trainwire.model_registry import ModelRegistryClient

    return ModelRegistryClient(args.address or os.environ.get("TRAINWIRE_ADDRESS") or DEFAULT_ADDRESS, token=args.token)


def _models_alias(args: argparse.Namespace) -> int:
    """Moves an alias (MODEL ALIAS VERSION), removes one (--delete), or lists them (MODEL) and their history."""
    import time

    with _registry(args) as registry:
        if args.delete:
            if not args.alias or args.version or args.history:
                raise SystemExit("error: removing an alias takes MODEL ALIAS --delete")
            registry.delete_alias(args.model, args.alias)
            print(f"{args.model} {args.alias} removed")
            return 0
        if args.alias and args.version:
            if args.history:
                raise SystemExit("error: --history lists moves; give MODEL alone (or with ALIAS to filter)")
            state = registry.set_alias(args.model, args.alias, args.version)
            print(f"{args.model} {args.alias} -> {state.aliases[args.alias]}")
            return 0
        if args.version:
            raise SystemExit("error: moving an alias takes MODEL ALIAS VERSION")
        state = registry.get_aliases(args.model, include_history=args.history)
    if args.history:
        print(f"{'REV':>4} {'TIME (UTC)':<20} {'ALIAS':<16} {'FROM':<24} {'TO':<24} BY")
        for move in state.history:
            if args.alias and move.alias != args.alias:
                continue
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(move.time))
            previous, version = move.previous_version or "-", move.version or "(removed)"
            print(f"{move.revision:>4} {when:<20} {move.alias:<16} {previous:<24} {version:<24} {move.moved_by}")
        return 0
    print(f"{'ALIAS':<16} VERSION")
    for alias, version in sorted(state.aliases.items()):
        if not args.alias or alias == args.alias:
            print(f"{alias:<16} {version}")
    return 0


def _models_route(args: argparse.Namespace) -> int:
    """Sets a model's traffic policy (--weights, --shadow), clears it (--clear), or shows it."""
    from trainwire.model_registry import parse_weights

    with _registry(args) as registry:
        if args.weights is not None or args.shadow is not None or args.clear:
            if args.clear and (args.weights or args.shadow):
                raise SystemExit("error: --clear takes no --weights or --shadow")
            policy = registry.set_route(args.model, parse_weights(args.weights or ""), args.shadow or "")
        else:
            policy = registry.get_route(args.model)
    weights = ",".join(f"{w.version}={w.weight}" for w in policy.weights) or "(default version)"
    shadow = f" shadow {policy.shadow}" if policy.shadow else ""
    print(f"{policy.model} weights {weights}{shadow} (revision {policy.revision})")
    return 0


def _checkpoints_download(args: argparse.Namespace) -> None:
    print(_client(args).download_checkpoint(args.checkpoint, args.directory))


def _health(args: argparse.Namespace) -> int:
    """The gRPC health check (grpc.health.v1) of a server: 0 when SERVING (a compose/Kubernetes probe)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from trainwire_core.serving import open_channel
    from trainwire_core.tls import ClientTLS

    tls = ClientTLS.from_files(args.tls_ca or "", args.tls_cert or "", args.tls_key or "")
    options = [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
    with open_channel(args.target, options, tls) as channel:
        request = health_pb2.HealthCheckRequest(service=args.service)
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(request, timeout=args.timeout_s)
        except grpc.RpcError as err:
            print(f"{args.target}: {err.code().name}: {err.details()}", file=sys.stderr)
            return 2
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    print(f"{args.target}: {status}")
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


def _tls_init(args: argparse.Namespace) -> int:
    """Makes a deployment's CA and certificates (docker-compose.yml mounts the directory)."""
    from trainwire_core.certificates import init_directory

    files = init_directory(
        args.directory,
        names=tuple(args.name or ()),
        days=args.days,
        force=args.force,
        keep_ca_key=args.keep_ca_key,
        owner=args.owner,
    )
    print(f"CA {files.ca}; server certificate {files.server_cert} (key {files.server_key});")
    print(f"client certificate {files.client_cert} (key {files.client_key}). Clients: TRAINWIRE_TLS_CA={files.ca}")
    return 0


# Service commands (coordinator, predictor, node probe) belong to their own distributions, which
# register them here; the SDK names none of them, and lists whichever are installed.
COMMANDS_GROUP = "trainwire.commands"


def _service_commands() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=COMMANDS_GROUP)}


def _predict(argv: list[str]) -> int:
    from trainwire.predictor_client import predict_main

    return predict_main(argv)


# Subcommands of the SDK's own that own their whole argument list.
_PASSTHROUGH: dict[str, Callable[[list[str]], int | None]] = {"predict": _predict}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trainwire", description="Ray Train as a service.")
    parser.add_argument("--address", help=f"coordinator host:port (default: $TRAINWIRE_ADDRESS or {DEFAULT_ADDRESS})")
    parser.add_argument("--token", default=os.environ.get("TRAINWIRE_TOKEN"), help="bearer token")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("predict", help="ask a predictor for predictions", add_help=False)
    for name, ep in sorted(_service_commands().items()):
        dist = ep.dist.name if ep.dist is not None else "a plugin"
        sub.add_parser(name, help=f"{SERVICE_HELP.get(name, 'a service command')} (from {dist})", add_help=False)

    runs = sub.add_parser("runs", help="list, show, watch, follow the logs of and cancel runs").add_subparsers(
        dest="action", required=True
    )
    p = runs.add_parser("list", help="list runs, newest first")
    p.add_argument("--state", action="append", default=[], choices=[s.lower() for s in common_pb2.RunState.keys()][1:])
    p.add_argument("--page-size", type=int, default=50)
    p.add_argument("--page-token", default="")
    p.add_argument("--submitted-by", default="", help="only runs started with this token name")
    p.set_defaults(fn=_runs_list)
    for action, fn, help_text in [
        ("show", _runs_show, "show a run as JSON"),
        ("watch", _runs_watch, "stream a run's events as JSON lines"),
        ("logs", _runs_logs, "print the workers' output (stdout, stderr, logging)"),
        ("cancel", _runs_cancel, "cancel a run"),
    ]:
        p = runs.add_parser(action, help=help_text)
        p.add_argument("run", help="run id or name")
        if action == "watch":
            p.add_argument("--after", type=int, default=0, help="start after this event id")
        if action == "logs":
            p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
            p.add_argument("--rank", type=int, action="append", default=[], help="only this rank (repeatable)")
            p.add_argument("--after", default="", help="start after this cursor (LogLine.cursor)")
        p.set_defaults(fn=fn)

    p = runs.add_parser("plot", help="draw runs' metric curves into a PNG (needs matplotlib: trainwire[plot])")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run ids or names; their curves are overlaid")
    p.add_argument("--metric", action="append", default=[], help="a metric to draw (repeatable; default: all)")
    p.add_argument("--x", choices=["training_iteration", "time"], default="training_iteration", help="x axis")
    p.add_argument("-o", "--output", default="curves.png", help="the PNG to write (default: curves.png)")
    p.set_defaults(fn=_runs_plot)

    tunes = sub.add_parser("tunes", help="list, show, watch and cancel hyperparameter searches").add_subparsers(
        dest="action", required=True
    )
    p = tunes.add_parser("list", help="list searches, newest first")
    p.add_argument("--page-size", type=int, default=50)
    p.add_argument("--page-token", default="")
    p.set_defaults(fn=_tunes_list)
    for action, fn, help_text in [
        ("show", _tunes_show, "show a search and its trials as JSON"),
        ("watch", _tunes_watch, "print trials' state changes until the search ends (exit 0: SUCCEEDED)"),
        ("cancel", _tunes_cancel, "cancel a search: no new trials, running ones are cancelled"),
    ]:
        p = tunes.add_parser(action, help=help_text)
        p.add_argument("tune", help="tune id or name")
        p.set_defaults(fn=fn)

    p = sub.add_parser("health", help="gRPC health check of a server: exit 0 when SERVING")
    p.add_argument("target", metavar="ADDRESS", help="host:port of a coordinator or predictor")
    p.add_argument("--service", default="", help="service name to check (default: the whole server)")
    p.add_argument("--timeout-s", type=float, default=3.0, help="deadline of the check")
    p.add_argument("--tls-ca", help="PEM CA that verifies the server (default: $TRAINWIRE_TLS_CA)")
    p.add_argument("--tls-cert", help="PEM client certificate for mutual TLS (default: $TRAINWIRE_TLS_CERT)")
    p.add_argument("--tls-key", help="PEM key of --tls-cert (default: $TRAINWIRE_TLS_KEY)")
    p.add_argument("--tls-server-name", help="name the server's certificate must carry (probes that dial localhost)")
    p.set_defaults(fn=_health)

    tls = sub.add_parser("tls", help="certificates for a deployment").add_subparsers(dest="action", required=True)
    p = tls.add_parser("init", help="make a self-signed CA, a server certificate for the compose services, a client's")
    p.add_argument(
        "directory", help="where the PEM files go (docker-compose.yml reads $TRAINWIRE_TLS_DIR, ./deploy/tls)"
    )
    p.add_argument("--name", action="append", help="another host name or IP address the services are reached by")
    p.add_argument("--days", type=int, default=825, help="validity of the certificates")
    p.add_argument("--force", action="store_true", help="replace certificates already in the directory")
    p.add_argument("--keep-ca-key", action="store_true", help="also write ca-key.pem (to sign more later)")
    p.add_argument("--owner", type=int, help="uid to own the files (the image's services run as 10001)")
    p.set_defaults(fn=_tls_init)

    models = sub.add_parser("models", help="model aliases and traffic policies").add_subparsers(
        dest="action", required=True
    )
    p = models.add_parser(
        "alias",
        help="move an alias (MODEL ALIAS VERSION), remove one (--delete), or list them (MODEL [ALIAS]) and --history",
    )
    p.add_argument("model", help="run name or run id")
    p.add_argument("alias", nargs="?", default="", help="e.g. production")
    p.add_argument("version", nargs="?", default="", help="a committed checkpoint id, or another alias")
    p.add_argument("--history", action="store_true", help="list every move, oldest first (a rollback is a move back)")
    p.add_argument("--delete", action="store_true", help="remove ALIAS (refused while the traffic policy names it)")
    p.set_defaults(fn=_models_alias)
    p = models.add_parser("route", help="set or show a model's traffic policy: weights over versions, a shadow")
    p.add_argument("model", help="run name or run id")
    p.add_argument("--weights", help="VERSION=PERCENT,... adding up to 100 (versions or aliases), e.g. a=90,b=10")
    p.add_argument("--shadow", help="a version or alias that gets a copy of each request (answer compared, discarded)")
    p.add_argument("--clear", action="store_true", help="remove the policy: requests go to the default version")
    p.set_defaults(fn=_models_route)

    ckpts = sub.add_parser("checkpoints", help="checkpoint files").add_subparsers(dest="action", required=True)
    p = ckpts.add_parser("download", help="download a checkpoint")
    p.add_argument("checkpoint", help="URI, or RUN/CHECKPOINT_ID, or RUN for its latest")
    p.add_argument("directory")
    p.set_defaults(fn=_checkpoints_download)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for i, word in enumerate(argv):
        if word in _PASSTHROUGH:
            return _PASSTHROUGH[word](argv[i + 1 :]) or 0
        if not word.startswith("-"):
            if (service := _service_commands().get(word)) is not None:
                return service.load()(argv[i + 1 :]) or 0
            break
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args) or 0
    except TrainwireError as err:
        where = f" (field {err.field})" if err.field else ""
        print(f"error: {err.code.name}: {err.message}{where}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
