"""Readiness of a Ray worker host: has this host's Ray node registered with the head?

``ray health-check --address HEAD`` only shows that the head's GCS answers. A host whose
``ray start --address`` is still starting its daemons (or whose raylet died) passes it, and a
Fit sent then finds fewer CPUs than the deployment has. This check asks the GCS for its live
nodes and looks for one at the address this host reaches the head from, which is the address
``ray start`` registers the node under.
"""

from __future__ import annotations

import argparse
import socket
import sys


def _address_towards(host: str, port: int) -> str:
    """This host's source address for packets to ``host:port`` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, port))
        return probe.getsockname()[0]


def live_node_addresses(gcs_address: str, timeout_s: float) -> set[str]:
    """The node manager addresses of the cluster's live nodes.

    Uses Ray's GCS client, the one ``ray health-check`` uses: it starts no driver, so a probe
    every second stays cheap.
    """
    import ray._raylet  # Ray's GCS client; Ray is pinned in constraints.txt
    from ray.core.generated import gcs_pb2

    client = ray._raylet.GcsClient(address=gcs_address)
    nodes = client.get_all_node_info(timeout=timeout_s)
    return {n.node_manager_address for n in nodes.values() if n.state == gcs_pb2.GcsNodeInfo.ALIVE}


def build_parser() -> argparse.ArgumentParser:
    """The arguments of ``trainwire ray-node-health``."""
    parser = argparse.ArgumentParser(prog="trainwire ray-node-health", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="the Ray head's GCS, host:port")
    parser.add_argument("--timeout-s", type=float, default=5.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """``trainwire ray-node-health --address HEAD:PORT``: 0 when this host's node is live."""
    args = build_parser().parse_args(argv)
    host, _, port = args.address.rpartition(":")
    try:
        head = socket.gethostbyname(host)  # the GCS client takes an IP, as `ray start` resolves it
        mine = _address_towards(head, int(port))
        live = live_node_addresses(f"{head}:{port}", args.timeout_s)
    except Exception as err:  # a probe answers with its exit code, whatever went wrong
        print(f"{args.address}: {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if mine in live:
        print(f"node {mine}: alive in the cluster at {args.address}")
        return 0
    print(f"node {mine}: not registered at {args.address} (live: {', '.join(sorted(live)) or 'none'})", file=sys.stderr)
    return 1
