"""The compose twin: docker-compose.yml started as separate hosts on one Linux machine, no Docker engine.

Every replica of every compose service gets its own network namespace (``ip netns``), a veth
pair on a private bridge, an address, and ``/etc/netns/<ns>/hosts`` so it finds the others by
their compose names (a scaled service's name lists every replica, as Docker's DNS does). Each
runs the command and environment that ``docker compose config`` gives it, with images mapped to
local programs: ``redis`` -> ``redis-server``; MinIO -> moto's S3 server; ``minio/mc`` ->
``deploy/mc.py``; the trainwire image -> this project's virtualenv. Ray nodes see the machine's
real CPUs. Healthchecks, ``depends_on`` conditions and restart policies are honoured.

Everything made is named ``tw<pid>...`` (one prefix per twin), recorded in a state file as it is
made, and removed on success, failure and Ctrl-C: processes by the namespaces they run in and by
their process groups, then namespaces, links, ``/etc/netns`` directories and the work directory.
Namespaces have no route out: traffic stays on addresses inside them (a ``client`` namespace is
there for callers; ``--host-access`` also gives the host an address on the bridge).

    sudo python -m deploy.twin up --scale ray-worker=2 --detach --state deploy/.twin/state.json
    sudo python -m deploy.twin exec --state deploy/.twin/state.json client -- trainwire health coordinator:50051
    sudo python -m deploy.twin down --state deploy/.twin/state.json
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compose

REPO = Path(__file__).resolve().parent.parent
COMPOSE_BINARY = Path(compose.__file__).parent / "docker-compose"
LOCK_PATH = "/run/lock/trainwire-twin.lock"
CLIENT = "client"


class TwinError(RuntimeError):
    """The twin could not bring the topology up."""


class Stopped(Exception):
    """SIGINT or SIGTERM arrived."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _duration_s(value: str | int | float | None, default: float) -> float:
    """Compose durations (``10s``, ``1m30s``, ``500ms``) in seconds."""
    if value is None or value == "":
        return default
    if isinstance(value, int | float):
        return value / 1e9 if value > 10_000 else float(value)  # compose's JSON gives nanoseconds
    total, number = 0.0, ""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    i = 0
    while i < len(value):
        c = value[i]
        if c.isdigit() or c == ".":
            number += c
            i += 1
            continue
        unit = value[i : i + 2] if value[i : i + 2] in units else c
        total += float(number) * units[unit]
        number, i = "", i + len(unit)
    return total + (float(number) if number else 0.0)


def load_compose(compose_file: Path, env_file: Path | None, project: str | None = None) -> dict[str, Any]:
    """The normalized model of a compose file (``docker compose config --format json``)."""
    cmd = [str(COMPOSE_BINARY), "-f", str(compose_file)]
    if env_file is not None:
        cmd += ["--env-file", str(env_file)]
    if project:
        cmd += ["-p", project]
    done = subprocess.run([*cmd, "config", "--format", "json"], capture_output=True, text=True)
    if done.returncode != 0:
        raise TwinError(f"docker compose config failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


@dataclass
class Replica:
    """One running copy of a service: its namespace, address and process."""

    service: str
    index: int
    name: str
    netns: str
    ip: str
    veth: str
    workdir: str
    pid: int = 0
    proc: subprocess.Popen | None = field(default=None, repr=False)
    restarts: int = 0
    exited_at: float = 0.0
    healthy: bool = False
    check: Future | None = field(default=None, repr=False)


class Twin:
    """Brings a compose file up as one network namespace per replica, and tears it down.

    Args:
        compose_file: The compose file.
        env_file: Its ``.env`` (interpolation variables), e.g. ``.env.example``.
        scale: Replicas per service, overriding ``deploy.replicas``.
        state_path: Where the state file goes (default: in the work directory).
        host_access: Give the host an address on the bridge, so it can reach the services.
        venv: The virtualenv that stands in for the trainwire image.
    """

    def __init__(
        self,
        compose_file: Path = REPO / "docker-compose.yml",
        env_file: Path | None = REPO / ".env.example",
        scale: dict[str, int] | None = None,
        state_path: Path | None = None,
        host_access: bool = False,
        venv: Path | None = None,
        keep_workdir: bool = False,
    ) -> None:
        self.prefix = f"tw{os.getpid()}"
        self.model = load_compose(compose_file, env_file)
        self.services: dict[str, dict[str, Any]] = self.model["services"]
        self.scale = dict(scale or {})
        for name in self.scale:
            if name not in self.services:
                raise TwinError(f"--scale {name}: no such service in {compose_file}")
        self.venv_bin = (venv or Path(sys.prefix)) / "bin"
        self.workdir = Path(f"/tmp/{self.prefix}")
        self.state_path = state_path or self.workdir / "state.json"
        self.host_access = host_access
        self.keep_workdir = keep_workdir
        self.bridge = f"{self.prefix}-br"
        self.replicas: dict[str, Replica] = {}
        self.client: Replica | None = None
        self.state: dict[str, Any] = {
            "prefix": self.prefix,
            "supervisor_pid": os.getpid(),
            "status": "starting",
            "workdir": str(self.workdir),
            "bridge": "",
            "links": [],
            "namespaces": [],
            "netns_dirs": [],
            "process_groups": [],
            "replicas": {},
            "keep_workdir": keep_workdir,
        }

    # ---- state -------------------------------------------------------------------------

    def _save(self) -> None:
        self.state["replicas"] = {
            r.name: {"service": r.service, "netns": r.netns, "ip": r.ip, "veth": r.veth, "pid": r.pid}
            for r in [*self.replicas.values(), *([self.client] if self.client else [])]
        }
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=2))
        tmp.replace(self.state_path)

    # ---- network -----------------------------------------------------------------------

    def _pick_subnet(self) -> ipaddress.IPv4Network:
        """A /24 under 10.0.0.0/8 that no route or address of the host overlaps."""
        used = []
        for line in (_ip("-4", "-o", "addr").stdout + _ip("-4", "route").stdout).splitlines():
            for word in line.split():
                with contextlib.suppress(ValueError):
                    if "/" in word or word[0].isdigit():
                        used.append(ipaddress.ip_network(word, strict=False))
        pid = os.getpid()
        for step in range(256 * 100):
            n = pid + step
            net = ipaddress.ip_network(f"10.{100 + (n // 256) % 100}.{n % 256}.0/24")
            if not any(net.overlaps(u) for u in used if u.prefixlen > 0):
                return net
        raise TwinError("no free /24 under 10.0.0.0/8")

    def _make_network(self, names: list[str]) -> dict[str, tuple[str, str, str]]:
        """Bridge + one namespace per name; returns ``name -> (netns, ip, host veth)``."""
        Path(LOCK_PATH).parent.mkdir(parents=True, exist_ok=True)
        with open(LOCK_PATH, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # parallel twins pick distinct subnets
            subnet = self._pick_subnet()
            hosts = list(subnet.hosts())
            _ip("link", "add", self.bridge, "type", "bridge")
            self.state["bridge"] = self.bridge
            self.state["subnet"] = str(subnet)
            self._save()
            if self.host_access:
                _ip("addr", "add", f"{hosts[0]}/{subnet.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        # With br_netfilter on (Docker hosts), iptables' FORWARD chain also sees bridged frames.
        iptables = shutil.which("iptables")
        nf = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
        if iptables and nf.exists() and nf.read_text().strip() == "1":
            rules = subprocess.run([iptables, "-S", "FORWARD"], capture_output=True, text=True).stdout
            if "-P FORWARD DROP" in rules:
                print("twin: iptables' FORWARD policy is DROP and bridged frames pass it: the bridge may be cut")
        out = {}
        for i, name in enumerate(names):
            netns, ip, veth, peer = (
                f"{self.prefix}-{name}",
                str(hosts[i + 1]),
                f"{self.prefix}-v{i}",
                f"{self.prefix}-p{i}",
            )
            _ip("netns", "add", netns)
            self.state["namespaces"].append(netns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            self.state["links"].append(veth)
            self._save()
            _ip("link", "set", peer, "netns", netns)
            _ip("link", "set", veth, "master", self.bridge, "up")
            for args in (
                ("link", "set", "lo", "up"),
                ("link", "set", peer, "name", "eth0"),
                ("addr", "add", f"{ip}/{subnet.prefixlen}", "dev", "eth0"),
                ("link", "set", "eth0", "up"),
                # On-link only, no gateway: lets programs find their own address (Ray asks the
                # kernel for the route to a public IP) while nothing leaves the bridge.
                ("route", "add", "default", "dev", "eth0"),
            ):
                _ip("-n", netns, *args)
            out[name] = (netns, ip, veth)
        return out

    def _write_hosts(self) -> None:
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        project = self.model.get("name", "")
        for r in self.replicas.values():
            aliases = [r.name, r.service, f"{project}-{r.name}"] if project else [r.name, r.service]
            lines.append(f"{r.ip}\t{' '.join(dict.fromkeys(aliases))}")
        if self.client is not None:
            lines.append(f"{self.client.ip}\t{CLIENT}")
        # Namespaces share the machine's hostname; as in a container, it names the host itself.
        hostname = socket.gethostname()
        for r in [*self.replicas.values(), *([self.client] if self.client else [])]:
            etc = Path("/etc/netns") / r.netns
            etc.mkdir(parents=True, exist_ok=True)
            self.state["netns_dirs"].append(str(etc))
            (etc / "hosts").write_text("\n".join([*lines, f"{r.ip}\t{hostname}"]) + "\n")
            # No DNS server: names outside the hosts file fail at once, nothing goes out.
            (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        self._save()

    # ---- programs ----------------------------------------------------------------------

    def _is_trainwire_image(self, spec: dict[str, Any]) -> bool:
        return "build" in spec or str(spec.get("image", "")).split(":")[0].endswith("trainwire")

    def _program(self, name: str) -> list[str]:
        """A compose executable name as a local program."""
        if name == "mc":
            return [str(self.venv_bin / "python"), str(REPO / "deploy" / "mc.py")]
        local = self.venv_bin / name
        if local.exists():
            return [str(local)]
        found = shutil.which(name)
        if found is None:
            raise TwinError(f"{name!r} is not installed here (needed by the compose file)")
        return [found]

    def command(self, service: str) -> list[str]:
        """The argv that stands in for a service's container."""
        spec = self.services[service]
        image = str(spec.get("image", ""))
        entrypoint = list(spec.get("entrypoint") or [])
        cmd = list(spec.get("command") or [])
        if image.startswith("minio/minio"):
            port = "9000"
            if "--address" in cmd:
                port = cmd[cmd.index("--address") + 1].rsplit(":", 1)[-1]
            return [*self._program("moto_server"), "-H", "0.0.0.0", "-p", port]
        if self._is_trainwire_image(spec):
            argv = (entrypoint or ["trainwire"]) + cmd
        elif image.startswith("minio/mc"):
            argv = (entrypoint or ["mc"]) + cmd
        elif image.startswith("redis"):
            argv = cmd or ["redis-server"]
        else:
            raise TwinError(f"service {service}: no local program stands in for image {image!r}")
        return [*self._program(argv[0]), *(self._host_path(service, a) for a in argv[1:])]

    def _own_ray_dir(self, argv: list[str], r: Replica) -> list[str]:
        """Gives a joining Ray node this host's own directory, as its container's /tmp would be.

        Ray hands a joining node the head's directory path. In a container that path is the
        node's own; here every host shares one filesystem, and nodes starting side by side in
        one directory race for the same socket names ("bind: Address already in use").
        """
        if Path(argv[0]).name == "ray" and argv[1:2] == ["start"] and "--head" not in argv:
            if not any(a.startswith("--temp-dir") for a in argv):
                return [*argv, f"--temp-dir={Path(r.workdir) / 't' / 'ray'}"]
        return argv

    def _healthcheck(self, service: str) -> tuple[list[str], float] | None:
        check = self.services[service].get("healthcheck") or {}
        test = list(check.get("test") or [])
        if not test or check.get("disable") or test[0] == "NONE":
            return None
        timeout_s = _duration_s(check.get("timeout"), 30.0)
        if test[0] == "CMD-SHELL":
            return ["sh", "-c", test[1]], timeout_s
        argv = test[1:] if test[0] == "CMD" else test
        return [*self._program(argv[0]), *(self._host_path(service, a) for a in argv[1:])], timeout_s

    def _host_path(self, service: str, value: str) -> str:
        """A path inside the service's container as this machine's: its bind mounts' sources stand in.

        Every host here shares one filesystem, so a file a container sees at a mount's target
        (``/etc/trainwire/tls/ca.pem``) is read at the mount's source.
        """
        for volume in self.services[service].get("volumes") or []:
            if volume.get("type") != "bind":
                continue
            target = volume["target"].rstrip("/")
            if value == target or value.startswith(target + "/"):
                return volume["source"] + value[len(target) :]
        return value

    def _env(self, r: Replica) -> dict[str, str]:
        env = {
            k: self._host_path(r.service, "" if v is None else str(v))
            for k, v in (self.services[r.service].get("environment") or {}).items()
        }
        home = Path(r.workdir) / "home"
        tmp = Path(r.workdir) / "t"
        home.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(parents=True, exist_ok=True)
        base = {
            "PATH": f"{self.venv_bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "RAY_TMPDIR": str(tmp),  # each host its own Ray session directory, as in a container
            "HOSTNAME": r.name,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            # gRPC's default resolver (c-ares) merges hosts-file lines that share a name, so a
            # replica's own name would resolve to every replica; glibc's does not (DNS, as
            # Docker serves it, has no such problem).
            "GRPC_DNS_RESOLVER": "native",
        }
        return {**base, **env}

    def _start(self, r: Replica) -> None:
        self._sweep(r.netns)  # a restarted container starts empty
        log = open(Path(r.workdir) / "log", "ab")  # noqa: SIM115 - the child owns it
        r.proc = subprocess.Popen(
            ["ip", "netns", "exec", r.netns, *self._own_ray_dir(self.command(r.service), r)],
            cwd=r.workdir,
            env=self._env(r),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        r.pid = r.proc.pid
        self.state["process_groups"].append(r.pid)
        self._save()

    def _sweep(self, netns: str) -> None:
        _kill_namespace(netns, grace_s=5.0)

    def healthy(self, r: Replica) -> bool:
        check = self._healthcheck(r.service)
        if check is None:
            return r.proc is not None and r.proc.poll() is None
        argv, timeout_s = check
        # No pipes (nothing to drain after a kill) and its own process group (killed whole).
        probe = subprocess.Popen(
            ["ip", "netns", "exec", r.netns, *argv],
            env=self._env(r),
            cwd=r.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            return probe.wait(timeout_s) == 0
        except subprocess.TimeoutExpired:
            return False
        finally:
            if probe.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(probe.pid, signal.SIGKILL)
                probe.wait()

    # ---- lifecycle ---------------------------------------------------------------------

    def _order(self) -> list[str]:
        order: list[str] = []
        seen: set[str] = set()

        def visit(name: str, path: tuple[str, ...] = ()) -> None:
            if name in seen:
                return
            if name in path:
                raise TwinError(f"depends_on cycle: {' -> '.join((*path, name))}")
            for dep in self.services[name].get("depends_on") or {}:
                visit(dep, (*path, name))
            seen.add(name)
            order.append(name)

        for name in self.services:
            visit(name)
        return order

    def replicas_of(self, service: str) -> list[Replica]:
        return [r for r in self.replicas.values() if r.service == service]

    def _satisfied(self, service: str, condition: str) -> bool:
        """Whether ``service`` meets a ``depends_on`` condition now (health as last checked)."""
        reps = self.replicas_of(service)
        if condition == "service_completed_successfully":
            codes = [r.proc.poll() if r.proc else None for r in reps]
            failed = [c for c in codes if c not in (None, 0)]
            if failed and not str(self.services[service].get("restart", "no")).startswith("on-failure"):
                raise TwinError(f"{service} exited with {failed[0]}:\n{self._tail(reps[0])}")
            return all(c == 0 for c in codes)
        if condition == "service_healthy":
            return all(r.healthy for r in reps)
        return all(r.proc is not None for r in reps)

    def _refresh_health(self, pool: ThreadPoolExecutor) -> None:
        """Runs the healthchecks of started, not yet healthy replicas, side by side."""
        for r in self.replicas.values():
            if r.check is not None and r.check.done():
                r.healthy, r.check = bool(r.check.result()), None
                if r.healthy:
                    self._log(f"{r.name} healthy")
            if r.proc is not None and not r.healthy and r.check is None:
                r.check = pool.submit(self.healthy, r)

    def _tail(self, r: Replica, lines: int = 30) -> str:
        path = Path(r.workdir) / "log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _check_bind_sources(self) -> None:
        """Refuses to start when a bind mount's source is missing (Docker would mount an empty directory).

        The TLS directory is the usual one: a service would crash-loop on its unreadable
        certificate instead of saying what to run.
        """
        for name, spec in self.services.items():
            for volume in spec.get("volumes") or []:
                if volume.get("type") == "bind" and not Path(volume["source"]).exists():
                    hint = " (make it with `trainwire tls init`)" if "tls" in volume["target"] else ""
                    raise TwinError(f"service {name}: the bind mount {volume['source']} does not exist{hint}")

    def _log(self, message: str) -> None:
        print(f"[twin +{time.monotonic() - self._t0:5.1f} s] {message}", flush=True)

    def up(self, timeout_s: float = 300.0) -> None:
        """Makes the network, starts every service in dependency order, waits for its conditions."""
        self._t0 = time.monotonic()
        self._check_bind_sources()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.state["workdir"] = str(self.workdir)
        self._save()
        names: list[tuple[str, int, str]] = []
        for service in self._order():
            count = self.scale.get(service, (self.services[service].get("deploy") or {}).get("replicas", 1))
            for i in range(1, int(count) + 1):
                names.append((service, i, f"{service}-{i}"))
        network = self._make_network([n for _, _, n in names] + [CLIENT])
        for service, i, name in names:
            netns, ip, veth = network[name]
            workdir = self.workdir / name
            workdir.mkdir(parents=True, exist_ok=True)
            self.replicas[name] = Replica(service, i, name, netns, ip, veth, str(workdir))
        netns, ip, veth = network[CLIENT]
        (self.workdir / CLIENT).mkdir(exist_ok=True)
        self.client = Replica(CLIENT, 1, CLIENT, netns, ip, veth, str(self.workdir / CLIENT))
        self._write_hosts()
        deadline = time.monotonic() + timeout_s
        oneshots = {
            dep
            for spec in self.services.values()
            for dep, how in (spec.get("depends_on") or {}).items()
            if how.get("condition") == "service_completed_successfully"
        }
        final = {s: "service_completed_successfully" if s in oneshots else "service_healthy" for s in self.services}
        pending = self._order()
        pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="twin-health")
        try:
            while True:
                self._refresh_health(pool)
                # Start every service whose depends_on conditions hold, as compose does.
                for service in list(pending):
                    deps = (self.services[service].get("depends_on") or {}).items()
                    if all(self._satisfied(d, how.get("condition", "service_started")) for d, how in deps):
                        for r in self.replicas_of(service):
                            self._start(r)
                        pending.remove(service)
                        self._log(f"started {service} x{len(self.replicas_of(service))}")
                if not pending and all(self._satisfied(s, c) for s, c in final.items()):
                    break
                self._restart_exited()
                if time.monotonic() > deadline:
                    waiting = [s for s, c in final.items() if s in pending or not self._satisfied(s, c)]
                    tails = "\n".join(f"--- {r.name}:\n{self._tail(r)}" for s in waiting for r in self.replicas_of(s))
                    raise TwinError(f"not up after {timeout_s:.0f} s: {', '.join(waiting)}\n{tails}")
                time.sleep(0.5)
        finally:
            # Never wait here for a probe still running: it ends within its own timeout.
            pool.shutdown(wait=False, cancel_futures=True)
            for r in self.replicas.values():
                r.check = None
        self._log("up")
        self.state["status"] = "up"
        self._save()

    def _restart_exited(self) -> None:
        """Applies each service's restart policy to replicas that exited."""
        now = time.monotonic()
        for r in self.replicas.values():
            if r.proc is None or (rc := r.proc.poll()) is None:
                continue
            policy = str(self.services[r.service].get("restart", "no"))
            again = policy in ("always", "unless-stopped") or (policy.startswith("on-failure") and rc != 0)
            if policy.startswith("on-failure:") and r.restarts >= int(policy.split(":")[1]):
                again = False
            if not again:
                continue
            if not r.exited_at:
                r.exited_at = now
            if now - r.exited_at < min(30.0, 2.0 ** min(r.restarts, 5)):
                continue  # back off, as Docker does
            with open(Path(r.workdir) / "log", "ab") as log:
                log.write(f"\n[twin] {r.name} exited with {rc}; restarting ({policy})\n".encode())
            r.restarts += 1
            r.exited_at = 0.0
            r.healthy = False
            self._start(r)

    def supervise(self) -> None:
        """Keeps the restart policies until SIGINT/SIGTERM (raised as Stopped)."""
        while True:
            self._restart_exited()
            time.sleep(1.0)

    def down(self) -> None:
        self.state["status"] = "stopping"
        with contextlib.suppress(OSError):
            self._save()
        teardown(self.state)
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()


def _namespace_pids(netns: str) -> list[int]:
    done = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _kill_namespace(netns: str, grace_s: float) -> None:
    """Ends every process in a namespace: SIGTERM, then SIGKILL after ``grace_s``."""
    pids = _namespace_pids(netns)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = _namespace_pids(netns)
    for _ in range(50):
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        pids = _namespace_pids(netns)


def teardown(state: dict[str, Any], grace_s: float = 10.0) -> None:
    """Removes everything a twin's state names: processes, namespaces, links, /etc/netns dirs."""
    namespaces = list(state.get("namespaces", []))
    # SIGTERM to everything at once, one grace period for all, then SIGKILL what is left.
    for netns in namespaces:
        for pid in _namespace_pids(netns):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_namespace_pids(n) for n in namespaces):
        time.sleep(0.2)
    for netns in namespaces:
        _kill_namespace(netns, 0.0)
    # Anything that left its namespace, by id: the processes that carry this twin's work
    # directory in their environment (every process it started, and their children).
    for pid in _processes_of(state.get("prefix", "")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for netns in namespaces:
        _ip("netns", "del", netns, check=False)
    for link in state.get("links", []):
        _ip("link", "del", link, check=False)
    if state.get("bridge"):
        _ip("link", "del", state["bridge"], check=False)
    for path in state.get("netns_dirs", []):
        if Path(path).parent == Path("/etc/netns"):
            shutil.rmtree(path, ignore_errors=True)


def leftovers(prefix: str) -> list[str]:
    """What of a twin is still on the machine: namespaces, links, /etc/netns dirs, processes."""
    found = [f"netns {n}" for n in _ip("netns", "list").stdout.split() if n.startswith(f"{prefix}-")]
    for line in _ip("-o", "link").stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(f"{prefix}-"):
            found.append(f"link {name}")
    etc = Path("/etc/netns")
    if etc.exists():
        found += [f"dir {p}" for p in etc.iterdir() if p.name.startswith(f"{prefix}-")]
    found += [f"process {pid}" for pid in _processes_of(prefix)]
    return found


def _processes_of(prefix: str) -> list[int]:
    """Processes the twin ``prefix`` started: they carry its work directory in their environment."""
    if not prefix.startswith("tw"):
        return []
    marker = f"/tmp/{prefix}/".encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in (proc / "environ").read_bytes():
                    pids.append(int(proc.name))
    return pids


# ---- the command line ------------------------------------------------------------------


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


def _parse_scale(values: list[str]) -> dict[str, int]:
    scale = {}
    for value in values:
        name, _, count = value.partition("=")
        if not count.isdigit():
            raise SystemExit(f"--scale {value}: expected SERVICE=N")
        scale[name] = int(count)
    return scale


def _up(args: argparse.Namespace) -> int:
    if args.detach:
        state_path = Path(args.state).resolve()
        if state_path.exists():
            raise SystemExit(f"{state_path} exists: a twin is up (make twin-down) or left a state file")
        state_path.parent.mkdir(parents=True, exist_ok=True)
        log_path = state_path.with_suffix(".log")
        argv = [
            sys.executable,
            "-m",
            "deploy.twin",
            "up",
            "--state",
            str(state_path),
            "--timeout-s",
            str(args.timeout_s),
        ]
        argv += [f"--scale={s}" for s in args.scale] + (["--host-access"] if args.host_access else [])
        argv += ["-f", args.file, "--env-file", args.env_file] + (["--keep-workdir"] if args.keep_workdir else [])
        with open(log_path, "ab") as log:
            child = subprocess.Popen(
                argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + args.timeout_s + 60
        while time.monotonic() < deadline:
            if child.poll() is not None:
                print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
                return 1
            if state_path.exists():
                with contextlib.suppress(ValueError):
                    state = json.loads(state_path.read_text())
                    if state.get("status") == "up":
                        _print_summary(state, state_path)
                        return 0
            time.sleep(0.5)
        os.kill(child.pid, signal.SIGTERM)
        return 1

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise_stopped)
    twin = None
    try:
        twin = Twin(
            Path(args.file),
            Path(args.env_file) if args.env_file else None,
            _parse_scale(args.scale),
            Path(args.state).resolve() if args.state else None,
            host_access=args.host_access,
            keep_workdir=args.keep_workdir,
        )
        twin.up(args.timeout_s)
        _print_summary(twin.state, twin.state_path)
        twin.supervise()
    except Stopped as stop:
        print(f"twin: {stop}: tearing down", flush=True)
    except TwinError as err:
        print(f"twin: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut the teardown short
        if twin is not None:
            twin.down()
    return 0


def _print_summary(state: dict[str, Any], state_path: Path) -> None:
    print(f"twin {state['prefix']} up on {state.get('subnet')} (state: {state_path})")
    for name, r in state["replicas"].items():
        print(f"  {name:<16} {r['ip']:<15} netns {r['netns']}")
    client = state["replicas"].get(CLIENT, {}).get("netns", "")
    print(
        f"  run a client: ip netns exec {client} env GRPC_DNS_RESOLVER=native TRAINWIRE_ADDRESS=coordinator:50051 ...",
        flush=True,
    )


def _read_state(path: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SystemExit(f"{path}: no twin state (is a twin up?)") from None


def _is_twin(pid: int) -> bool:
    with contextlib.suppress(OSError):
        return b"deploy.twin" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def _down(args: argparse.Namespace) -> int:
    state = _read_state(args.state)
    pid = int(state.get("supervisor_pid", 0))
    if pid and pid != os.getpid() and _is_twin(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 90
        while _is_twin(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    teardown(state)  # whatever the supervisor did not get to
    if state.get("workdir", "").startswith("/tmp/tw") and not state.get("keep_workdir"):
        shutil.rmtree(state["workdir"], ignore_errors=True)
    Path(args.state).unlink(missing_ok=True)
    left = leftovers(state["prefix"])
    if left:
        print("twin: still there: " + ", ".join(left), file=sys.stderr)
        return 1
    print(f"twin {state['prefix']} down")
    return 0


def _exec(args: argparse.Namespace) -> int:
    state = _read_state(args.state)
    replica = _replica(state, args.replica)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return subprocess.call(["ip", "netns", "exec", replica["netns"], *command])


def _replica_name(state: dict[str, Any], name: str) -> str:
    for candidate in (name, f"{name}-1"):
        if candidate in state["replicas"]:
            return candidate
    raise SystemExit(f"no replica {name!r}; one of: {', '.join(state['replicas'])}")


def _replica(state: dict[str, Any], name: str) -> dict[str, Any]:
    return state["replicas"][_replica_name(state, name)]


def _logs(args: argparse.Namespace) -> int:
    """Prints the last lines each replica's host wrote (its program's output), as `compose logs`."""
    state = _read_state(args.state)
    names = [n for n in state["replicas"] if n != CLIENT]
    if args.replica:
        names = [_replica_name(state, n) for n in args.replica]
    for name in names:
        host = Path(state["workdir"]) / name
        logs = [host / "log"]
        if args.ray:  # a Ray node's own daemons log under its session directory (RAY_TMPDIR)
            for daemon in ("raylet", "gcs_server"):
                logs += sorted(host.glob(f"t/ray/session_2*/logs/{daemon}.*"))  # not session_latest
        for log in logs:
            lines = log.read_text(errors="replace").splitlines() if log.exists() else []
            print(f"--- {name}: {log.relative_to(host)} ({len(lines)} lines)")
            print("\n".join(lines[-args.tail :]), flush=True)
    return 0


def _kill(args: argparse.Namespace) -> int:
    """Kills every process of one replica's host (the twin restarts it if its policy says so)."""
    replica = _replica(_read_state(args.state), args.replica)
    pids = _namespace_pids(replica["netns"])
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.Signals[f"SIG{args.signal}"])
    print(f"{args.replica}: sent SIG{args.signal} to {len(pids)} processes")
    return 0


def _link(args: argparse.Namespace) -> int:
    """Takes one replica's link down (a cut host) or up again."""
    replica = _replica(_read_state(args.state), args.replica)
    _ip("link", "set", replica["veth"], args.updown)
    print(f"{args.replica}: link {replica['veth']} {args.updown}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.twin", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("up", help="bring the compose topology up as network namespaces")
    p.add_argument("-f", "--file", default=str(REPO / "docker-compose.yml"))
    p.add_argument("--env-file", default=str(REPO / ".env.example"))
    p.add_argument("--scale", action="append", default=[], metavar="SERVICE=N")
    p.add_argument("--state", help="state file (default: in the twin's work directory)")
    p.add_argument("--detach", action="store_true", help="leave it running; `down --state` ends it")
    p.add_argument("--host-access", action="store_true", help="give the host an address on the bridge")
    p.add_argument("--keep-workdir", action="store_true", help="keep logs under /tmp/tw<pid> after teardown")
    p.add_argument("--timeout-s", type=float, default=300.0)
    p.set_defaults(fn=_up)
    p = sub.add_parser("down", help="tear down the twin a state file names")
    p.add_argument("--state", required=True)
    p.set_defaults(fn=_down)
    p = sub.add_parser("exec", help="run a command in a replica's namespace (or 'client')")
    p.add_argument("--state", required=True)
    p.add_argument("replica")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(fn=_exec)
    p = sub.add_parser("logs", help="print the last lines of each replica's output (or the ones named)")
    p.add_argument("--state", required=True)
    p.add_argument("--tail", type=int, default=40)
    p.add_argument("--ray", action="store_true", help="also the raylet's and GCS's logs of Ray nodes")
    p.add_argument("replica", nargs="*")
    p.set_defaults(fn=_logs)
    p = sub.add_parser("kill", help="signal every process of a replica's host (e.g. a lost Ray worker)")
    p.add_argument("--state", required=True)
    p.add_argument("--signal", default="KILL", choices=["KILL", "TERM", "INT", "STOP", "CONT"])
    p.add_argument("replica")
    p.set_defaults(fn=_kill)
    p = sub.add_parser("link", help="take a replica's link down or up (a cut host)")
    p.add_argument("--state", required=True)
    p.add_argument("replica")
    p.add_argument("updown", choices=["down", "up"])
    p.set_defaults(fn=_link)
    args = parser.parse_args(argv)
    if args.verb == "up" and args.detach and not args.state:
        parser.error("--detach needs --state")
    if os.geteuid() != 0:
        parser.error("the twin makes network namespaces: run it as root")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
