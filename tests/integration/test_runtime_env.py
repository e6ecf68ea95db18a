"""Runtime environments: a project's own code, data and pip requirements travel with its run."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import shutil
import subprocess
import sys
import threading
import zipfile

import grpc
import pytest
import sample_project
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwire import runtime_env
from trainwire_coordinator.admission.runtime_envs import PackageService, check_runtime_env
from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError
from trainwire_core.storage import Store
from trainwire_core.v1 import common_pb2, coordinator_pb2, coordinator_pb2_grpc

# --- packing on the caller's side ---------------------------------------------------------


def _tree(root, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def test_packing_honours_gitignore_excludes_and_is_deterministic(tmp_path):
    _tree(
        tmp_path,
        {
            "train.py": b"print(1)",
            "mypkg/__init__.py": b"",
            "mypkg/__pycache__/x.pyc": b"\0",
            ".git/HEAD": b"ref",
            ".gitignore": b"outputs/\n*.log\n",
            "outputs/big.bin": b"x" * 100,
            "run.log": b"log",
            "sub/.gitignore": b"secret.txt\n",
            "sub/secret.txt": b"s",
            "sub/kept.txt": b"k",
            "data/labels.txt": b"a,b",
            "data/raw/huge.csv": b"1,2",
        },
    )
    names = [name for name, _ in runtime_env.package_files(tmp_path, ["data/raw/"])]
    assert names == [".gitignore", "data/labels.txt", "mypkg/__init__.py", "sub/.gitignore", "sub/kept.txt", "train.py"]
    files = runtime_env.package_files(tmp_path, [])
    assert runtime_env.pack(files, "x") == runtime_env.pack(files, "x")  # the same content is stored once


def test_a_package_over_the_limit_names_its_largest_files(tmp_path):
    _tree(tmp_path, {"model.ckpt": b"x" * 5000, "small.py": b"x", "weights/w.bin": b"x" * 3000})
    with pytest.raises(InvalidArgumentError) as info:
        runtime_env.pack(runtime_env.package_files(tmp_path, []), "working_dir", max_bytes=4000)
    assert "model.ckpt" in info.value.message and "weights/w.bin" in info.value.message
    assert "excludes" in info.value.message


def test_unsupported_runtime_env_keys_are_refused_by_name():
    from trainwire import RunConfig

    with pytest.raises(InvalidArgumentError) as info:
        RunConfig(runtime_env={"conda": "env.yml"})
    assert info.value.field == "run_config.runtime_env.conda" and "pip" in info.value.message
    with pytest.raises(InvalidArgumentError) as info:
        RunConfig(runtime_env={"working_dir": "/no/such/dir"})
    assert info.value.field == "run_config.runtime_env.working_dir"
    assert RunConfig(worker_runtime_env={"env_vars": {"A": "1"}}).runtime_env == {"env_vars": {"A": "1"}}


def test_pip_takes_a_list_a_file_or_packages(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("# pinned\nrequests==2.0  # http\n\n--index-url https://example.invalid/simple\n")
    assert runtime_env.pip_lines(str(req)) == ["requests==2.0", "--index-url https://example.invalid/simple"]
    assert runtime_env.pip_lines({"packages": ["a"]}) == runtime_env.pip_lines(["a"]) == ["a"]


# --- archive checks (untrusted input at the coordinator) -----------------------------------


def _zip(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for info, data in entries:
            archive.writestr(info, data)
    return buf.getvalue()


def _symlink(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = 0o120777 << 16
    return info


@pytest.fixture(scope="module")
def stub(coordinator_address):
    channel = grpc.insecure_channel(coordinator_address)
    yield coordinator_pb2_grpc.CoordinatorStub(channel)
    channel.close()


def _upload(stub, data: bytes) -> coordinator_pb2.PackageInfo:
    sha = hashlib.sha256(data).hexdigest()
    parts = [
        coordinator_pb2.UploadPackageRequest(
            header=coordinator_pb2.UploadPackageHeader(sha256=sha, size_bytes=len(data))
        ),
        coordinator_pb2.UploadPackageRequest(chunk=data),
    ]
    return stub.UploadPackage(iter(parts))


@pytest.mark.parametrize(
    ("entries", "named"),
    [
        ([("../evil.py", b"x")], "../evil.py"),
        ([("/etc/cron.d/x", b"x")], "/etc/cron.d/x"),
        ([("ok/../../up.py", b"x")], "ok/../../up.py"),
        ([(_symlink("link"), b"/etc/passwd")], "link"),
        ([("bomb.bin", b"\0" * (50 << 20))], "bomb.bin"),
    ],
    ids=["dotdot", "absolute", "nested-dotdot", "symlink", "zip-bomb"],
)
def test_unsafe_archives_are_refused_naming_the_entry(stub, store, entries, named):
    data = _zip(entries)
    with pytest.raises(grpc.RpcError) as info:
        _upload(stub, data)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert repr(named) in info.value.details()
    assert not store.exists(store.path("packages", hashlib.sha256(data).hexdigest() + ".zip"))


def test_packages_are_stored_once_by_content(stub, store):
    data = _zip([("mypkg/__init__.py", b"VALUE = 1\n")])
    first, second = _upload(stub, data), _upload(stub, data)
    assert first == second and first.num_files == 1 and first.unpacked_bytes == 10
    assert stub.GetPackage(coordinator_pb2.GetPackageRequest(sha256=first.sha256)) == first
    with pytest.raises(grpc.RpcError) as info:
        stub.GetPackage(coordinator_pb2.GetPackageRequest(sha256="1" * 64))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_uploaded_as_a_package_are_stored_or_refused_cleanly(tmp_path_factory, data):
    packages = PackageService(Store(str(tmp_path_factory.mktemp("pkgs"))))
    try:
        packages.store_package(hashlib.sha256(data).hexdigest(), data)
    except InvalidArgumentError as exc:
        assert exc.field == "chunk"


@pytest.mark.parametrize(
    ("env", "field"),
    [
        (common_pb2.RuntimeEnv(working_dir="abc"), "run_config.runtime_env.working_dir"),
        (common_pb2.RuntimeEnv(py_modules=["2" * 64]), "run_config.runtime_env.py_modules[0]"),
        (common_pb2.RuntimeEnv(pip=["-r /etc/shadow"]), "run_config.runtime_env.pip[0]"),
        (common_pb2.RuntimeEnv(pip=["ok", "bad\nline"]), "run_config.runtime_env.pip[1]"),
        (common_pb2.RuntimeEnv(env_vars={"RAY_ADDRESS": "x"}), "run_config.runtime_env.env_vars[RAY_ADDRESS]"),
        (common_pb2.RuntimeEnv(env_vars={"1BAD": "x"}), "run_config.runtime_env.env_vars[1BAD]"),
    ],
)
def test_bad_runtime_envs_are_refused_naming_the_field(tmp_path, env, field):
    with pytest.raises(InvalidArgumentError) as info:
        check_runtime_env(env, PackageService(Store(str(tmp_path))), allow_pip=True)
    assert info.value.field == field


def test_a_coordinator_can_refuse_pip_installs(tmp_path):
    with pytest.raises(PermissionDeniedError) as info:
        check_runtime_env(common_pb2.RuntimeEnv(pip=["x"]), PackageService(Store(str(tmp_path))), allow_pip=False)
    assert "allow_pip_installs" in info.value.message


# --- a project from a directory no service starts in ----------------------------------------


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A package the workers' environment does not have, as a local wheel."""
    return sample_project.build_wheel(tmp_path_factory.mktemp("wheels"))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, wheel):
    """A package index on loopback (PEP 503 simple pages) that serves the wheel: its /simple/ URL."""
    root = tmp_path_factory.mktemp("index")
    (root / "files").mkdir()
    shutil.copy(wheel, root / "files" / wheel.name)
    (root / "simple" / "twtiny").mkdir(parents=True)
    (root / "simple" / "twtiny" / "index.html").write_text(f'<a href="/files/{wheel.name}">{wheel.name}</a>\n')
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()
    thread.join()


@pytest.fixture
def index_allowed(coordinator, local_index, monkeypatch):
    """The session's coordinator allows no index (pip may not read local wheels): this one, for a test."""
    monkeypatch.setattr(coordinator.server.runs.checks, "pip_allowed_index_urls", (local_index,))
    return local_index


_project = sample_project.write


def _run(project, coordinator_address) -> tuple[dict, float, str]:
    env = {**os.environ, "TRAINWIRE_ADDRESS": coordinator_address}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=project, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("METRICS"))
    metrics_text, seconds = line[len("METRICS ") :].rsplit(" ", 1)
    return eval(metrics_text), float(seconds), done.stderr  # noqa: S307 - our own script's dict


def test_a_multi_file_project_trains_with_its_runtime_env(coordinator_address, client, tmp_path, index_allowed):
    project = tmp_path / "project"
    # pip applies --index-url only on a line of its own (on a requirement's line it is ignored).
    pip = [f"--index-url {index_allowed}", "twtiny"]
    env = f'{{"working_dir": ".", "pip": {pip!r}, "env_vars": {{"MODE": "fast"}}}}'
    _project(project, "runtime-env-project", env)
    assert str(project) not in sys.path and os.getcwd() != str(project)
    metrics, first_s, _ = _run(project, coordinator_address)
    assert metrics["labels"] == 3 and metrics["width"] == 8 and metrics["tiny"] == 7 and metrics["mode"] == "fast"
    # The workers ran from the shipped copy, not from the project directory.
    assert metrics["project_on_path"] is False and metrics["cwd_is_project"] is False
    run = next(r for r in client.list_runs().runs if r.name == "runtime-env-project")
    reasons = [e.state_change.reason for e in client.watch_run(run.run_id) if e.WhichOneof("kind") == "state_change"]
    assert "installing runtime environment (2 packages)" in reasons  # the wait shows its reason
    metrics, second_s, _ = _run(project, coordinator_address)
    assert metrics["tiny"] == 7
    print(f"runtime_env fit: first {first_s:.1f} s (pip install), second {second_s:.1f} s (cached)")


def test_local_modules_travel_without_a_runtime_env(coordinator_address, tmp_path, wheel):
    project = tmp_path / "project"
    _project(project, "runtime-env-auto", "None")
    (project / "train.py").write_text(
        (project / "train.py")
        .read_text()
        .replace("    import twtiny\n", "")
        .replace('with open("data/labels.txt") as f:', "with open(os.path.join(PROJECT, 'data/labels.txt')) as f:")
        .replace('"tiny": twtiny.VALUE, ', "")
        .replace("verbose=0", "verbose=1")
    )
    metrics, _, stderr = _run(project, coordinator_address)
    assert metrics["width"] == 8 and metrics["project_on_path"] is False
    assert "shipping local module(s) mypkg" in stderr


def test_modules_imported_inside_the_loop_are_found(tmp_path, monkeypatch):
    (tmp_path / "localpkg").mkdir()
    (tmp_path / "localpkg" / "__init__.py").write_text("")
    (tmp_path / "localpkg" / "model.py").write_text("WIDTH = 8\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import localpkg.model  # noqa: F401 - as the caller's program has it imported

    def loop() -> int:

        return localpkg.model.WIDTH

    assert runtime_env.local_modules([loop]) == {"localpkg": str(tmp_path / "localpkg")}


def test_a_failing_pip_install_fails_the_run_with_pips_error(coordinator_address, tmp_path, index_allowed):
    project = tmp_path / "project"
    _project(project, "runtime-env-bad-pip", f'{{"pip": ["--index-url {index_allowed}", "trainwire-missing-pkg"]}}')
    env = {**os.environ, "TRAINWIRE_ADDRESS": coordinator_address}
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=project, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode != 0
    assert "pip could not install the runtime environment" in done.stderr
    assert "trainwire-missing-pkg" in done.stderr


def test_a_pip_line_that_reads_a_worker_file_is_refused_at_fit(coordinator_address, tmp_path):
    project = tmp_path / "project"
    _project(project, "runtime-env-read-file", '{"pip": ["--index-url=http://127.0.0.1:1 -r /etc/passwd"]}')
    env = {**os.environ, "TRAINWIRE_ADDRESS": coordinator_address}
    done = subprocess.run(
        [sys.executable, "train.py"], cwd=project, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode != 0
    assert "run_config.runtime_env.pip[0]" in done.stderr and "root:" not in done.stderr
