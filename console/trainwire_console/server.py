"""``trainwire console``: the web console, served by uvicorn."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from trainwire_core.tls import ClientTLS

DEFAULT_PORT = 8265
DEFAULT_ADDRESS = "127.0.0.1:50051"


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        prog="trainwire console", description="A web page of runs, curves, logs, checkpoints and served models."
    )
    parser.add_argument(
        "--address",
        default=env("TRAINWIRE_ADDRESS") or DEFAULT_ADDRESS,
        help=f"coordinator host:port (default: $TRAINWIRE_ADDRESS or {DEFAULT_ADDRESS})",
    )
    parser.add_argument(
        "--token", default=env("TRAINWIRE_TOKEN"), help="the console's token (default: $TRAINWIRE_TOKEN)"
    )
    parser.add_argument(
        "--predictor",
        default=env("TRAINWIRE_PREDICTOR_ADDRESS", ""),
        help="predictors' gRPC target; dns:///name:port reaches every replica (default: $TRAINWIRE_PREDICTOR_ADDRESS)",
    )
    parser.add_argument(
        "--predictor-token",
        default=env("TRAINWIRE_PREDICTOR_TOKEN"),
        help="token for the predictors (default: $TRAINWIRE_PREDICTOR_TOKEN, else --token)",
    )
    parser.add_argument(
        "--predictor-metrics",
        default=env("TRAINWIRE_PREDICTOR_METRICS_URLS", ""),
        help="comma-separated predictors' Prometheus URLs (http://host:8002/metrics; dns:///name:port for every "
        "address of a name), for p99 latencies (default: $TRAINWIRE_PREDICTOR_METRICS_URLS; none: no p99)",
    )
    parser.add_argument(
        "--host",
        default=env("TRAINWIRE_CONSOLE_HOST", "127.0.0.1"),
        help="address to listen on (default: $TRAINWIRE_CONSOLE_HOST, else loopback only)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(env("TRAINWIRE_CONSOLE_PORT", str(DEFAULT_PORT))),
        help=f"HTTP port (default: $TRAINWIRE_CONSOLE_PORT, else {DEFAULT_PORT})",
    )
    parser.add_argument("--tls-ca", default=env("TRAINWIRE_TLS_CA", ""), help="PEM CA that verifies the services")
    parser.add_argument("--tls-cert", default=env("TRAINWIRE_TLS_CERT", ""), help="PEM client certificate (mTLS)")
    parser.add_argument("--tls-key", default=env("TRAINWIRE_TLS_KEY", ""), help="PEM key of --tls-cert")
    parser.add_argument("--log-level", default="warning", help="uvicorn's log level")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="exit 0 when the console on --port answers /healthz (a compose or Kubernetes probe), else 1",
    )
    return parser


def probe(port: int, timeout_s: float = 5.0) -> int:
    """0 when the console on this host's ``port`` is healthy (it reaches the coordinator), else 1."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout_s) as answer:
            return 0 if answer.status == 200 else 1
    except (urllib.error.URLError, OSError) as err:
        print(f"console on port {port}: {err}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Serves the console until interrupted (SIGINT or SIGTERM)."""
    import uvicorn

    from trainwire_console.app import create_app
    from trainwire_console.backend import ConsoleBackend

    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.probe:
        return probe(args.port)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tls = ClientTLS.from_files(args.tls_ca, args.tls_cert, args.tls_key)
    metrics = [url.strip() for url in args.predictor_metrics.split(",") if url.strip()]
    backend = ConsoleBackend(args.address, args.token, args.predictor, args.predictor_token, tls, metrics)
    app = create_app(backend)
    print(f"trainwire console on http://{args.host}:{args.port} (coordinator {args.address})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, timeout_graceful_shutdown=3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
