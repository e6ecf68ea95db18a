"""The shared store on S3: a real S3-compatible server (moto's standalone server) on loopback.

Nothing is mocked in-process: moto runs as a subprocess and pyarrow's S3 filesystem talks HTTP to it,
from the test, from the coordinator and from the Ray workers alike.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator

import pyarrow.fs as pafs
import pytest

from trainwire.checkpoint import METADATA_NAME, Checkpoint
from trainwire_core.errors import NotFoundError
from trainwire_core.storage import INDEX_NAME, MANIFEST_NAME, Store

pytestmark = pytest.mark.timeout(300)

BUCKET = "trainwire-test"
# moto accepts any credentials; these only have to be present (and survive URI round trips).
ACCESS_KEY, SECRET_KEY = "testing", "testing"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Starts moto's S3 server on a free loopback port for the session; yields ``127.0.0.1:PORT``."""
    # This interpreter's moto (pinned in constraints.txt): pyarrow's multipart uploads need moto >= 5.2.2.
    if importlib.util.find_spec("moto") is None:
        pytest.fail("moto[server] is not installed; `make test` installs it from requirements.txt")
    command = [sys.executable, "-m", "moto.server"]
    port = _free_port()
    workdir = tmp_path_factory.mktemp("moto")
    log = workdir / "moto.log"
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
    proc = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        cwd=workdir,
        env=env,
        stdout=open(log, "wb"),  # noqa: SIM115 - the server owns it
        stderr=subprocess.STDOUT,
    )
    endpoint = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"moto server exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(f"http://{endpoint}/moto-api/", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"moto server did not answer on {endpoint} within 30s:\n{log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _s3_uri(endpoint: str, prefix: str) -> str:
    # pyarrow's S3 URIs take credentials as user info; the rest are query options.
    return (
        f"s3://{ACCESS_KEY}:{SECRET_KEY}@{BUCKET}/{prefix}"
        f"?endpoint_override={endpoint}&scheme=http&region=us-east-1&allow_bucket_creation=true"
    )


@pytest.fixture(scope="session")
def bucket_fs(moto_endpoint: str) -> pafs.S3FileSystem:
    """A plain pyarrow S3 filesystem on the server, with the test bucket created."""
    fs = pafs.S3FileSystem(
        access_key=ACCESS_KEY,
        secret_key=SECRET_KEY,
        endpoint_override=moto_endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )
    fs.create_dir(BUCKET)
    assert fs.get_file_info(BUCKET).type == pafs.FileType.Directory
    try:
        with fs.open_output_stream(f"{BUCKET}/probe") as f:
            f.write(b"probe")
    except OSError as exc:
        pytest.fail(f"the S3 server at {moto_endpoint} rejects pyarrow's writes (moto < 5.2.2?): {exc}")
    fs.delete_file(f"{BUCKET}/probe")
    return fs


@pytest.fixture
def s3_store(moto_endpoint: str, bucket_fs: pafs.S3FileSystem) -> Store:
    """A Store under a fresh prefix of the bucket."""
    return Store(_s3_uri(moto_endpoint, f"unit-{uuid.uuid4().hex[:8]}"))


def _fill(directory) -> dict[str, bytes]:
    files = {
        "model.bin": os.urandom(3 * (1 << 20) + 17),  # several of the store's 1 MiB chunks
        "nested/deeper/state.json": b'{"step": 7}',
        "empty.txt": b"",
    }
    for rel, data in files.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


# --- the Store on S3 --------------------------------------------------------


def test_store_is_remote_and_uri_of_keeps_the_query(s3_store, moto_endpoint):
    assert not s3_store.is_local
    assert isinstance(s3_store.fs, pafs.S3FileSystem)
    assert s3_store.root.startswith(f"{BUCKET}/unit-")
    uri = s3_store.uri_of(s3_store.path("runs", "r1"))
    assert uri.startswith("s3://") and uri.split("?")[0].endswith("/runs/r1")
    assert f"endpoint_override={moto_endpoint}" in uri and "scheme=http" in uri
    # A URI from uri_of opens the same place in a fresh Store (as a worker does).
    s3_store.write_bytes(s3_store.path("runs", "r1", "x.txt"), b"x")
    other = Store(uri)
    assert other.root == s3_store.path("runs", "r1")
    assert other.read_bytes(other.path("x.txt")) == b"x"


def test_write_read_exists_list_and_delete(s3_store):
    path = s3_store.path("a", "b", "c.json")
    assert not s3_store.exists(path)
    s3_store.write_json(path, {"k": [1, 2]})
    assert s3_store.exists(path)
    assert s3_store.read_json(path) == {"k": [1, 2]}
    s3_store.write_bytes(path, b'{"k": 3}')  # overwrite
    assert s3_store.read_json(path) == {"k": 3}
    s3_store.write_bytes(s3_store.path("a", "b", "d.bin"), b"\x00\x01")
    assert sorted(s3_store.list_dir(s3_store.path("a", "b"))) == ["c.json", "d.bin"]
    assert s3_store.list_dir(s3_store.path("nope")) == []
    with pytest.raises(NotFoundError):
        s3_store.read_bytes(s3_store.path("a", "missing.json"))
    s3_store.delete_dir(s3_store.path("a"))
    assert not s3_store.exists(path)
    assert s3_store.list_dir(s3_store.path("a", "b")) == []
    s3_store.delete_dir(s3_store.path("a"))  # deleting what is gone is fine


def test_upload_walk_and_download_round_trip(s3_store, tmp_path):
    src = tmp_path / "src"
    files = _fill(src)
    dest = s3_store.path("runs", "r", "checkpoints", "c1")
    entries = s3_store.upload_dir(src, dest)
    assert [e.path for e in entries] == sorted(files)
    for e in entries:
        assert e.size_bytes == len(files[e.path])
        assert e.sha256 == hashlib.sha256(files[e.path]).hexdigest()
    assert s3_store.walk_files(dest) == sorted((rel, len(data)) for rel, data in files.items())
    out = tmp_path / "out"
    s3_store.download_dir(dest, out)
    for rel, data in files.items():
        assert (out / rel).read_bytes() == data
    with pytest.raises(NotFoundError):
        s3_store.download_dir(s3_store.path("runs", "r", "checkpoints", "nope"), tmp_path / "none")
    assert s3_store.walk_files(s3_store.path("nope")) == []


def test_checkpoint_on_s3(s3_store, tmp_path):
    src = tmp_path / "src"
    files = _fill(src)
    dest = s3_store.path("runs", "r", "checkpoints", "c2")
    s3_store.upload_dir(src, dest)
    ckpt = Checkpoint(s3_store.uri_of(dest))
    assert not ckpt.is_local
    assert ckpt.uri.startswith("s3://")

    target = ckpt.to_directory(str(tmp_path / "copy"))
    assert all((tmp_path / "copy" / rel).read_bytes() == data for rel, data in files.items())
    with ckpt.as_directory() as d:
        assert d != str(src)
        assert all(open(os.path.join(d, rel), "rb").read() == data for rel, data in files.items())
    assert not os.path.exists(d)  # the temporary copy is removed
    assert target == str(tmp_path / "copy")

    assert ckpt.get_metadata() == {}
    ckpt.set_metadata({"epoch": 3})
    ckpt.update_metadata({"loss": 0.5})
    assert ckpt.get_metadata() == {"epoch": 3, "loss": 0.5}
    assert s3_store.read_json(f"{dest}/{METADATA_NAME}") == {"epoch": 3, "loss": 0.5}
    # Pickled (as it travels to Ray workers) it still reads the same objects.
    import pickle

    again = pickle.loads(pickle.dumps(ckpt))
    assert again.get_metadata() == {"epoch": 3, "loss": 0.5}


# --- a coordinator whose shared store is on S3 -------------------------------


@pytest.fixture(scope="module")
def s3_coordinator(ray_cluster, moto_endpoint, bucket_fs, tmp_path_factory):
    from trainwire_coordinator.server import CoordinatorThread
    from trainwire_coordinator.settings import CoordinatorSettings

    state = tmp_path_factory.mktemp("s3-coordinator") / "state.db"
    thread = CoordinatorThread(
        CoordinatorSettings(
            host="127.0.0.1",
            port=0,
            store=_s3_uri(moto_endpoint, "store"),
            state=str(state),
            worker_pool_idle_s=0,
            watch_poll_s=0.2,
        )
    )
    address = thread.start()
    yield thread, address
    thread.stop()


def test_xgboost_fit_with_the_store_on_s3(s3_coordinator, bucket_fs, cancer_data, tmp_path):
    import xgboost

    from trainwire import RunConfig, ScalingConfig
    from trainwire.client import CoordinatorClient
    from trainwire.xgboost import XGBoostTrainer
    from trainwire_core.v1 import common_pb2

    _, address = s3_coordinator
    client = CoordinatorClient(address)
    try:
        request = XGBoostTrainer(
            params={"objective": "binary:logistic"},
            label_column="target",
            num_boost_round=3,
            datasets={"train": cancer_data[0]},
            scaling_config=ScalingConfig(num_workers=2),
            run_config=RunConfig(name="on-s3", verbose=0),
        ).build_request(client)
        dataset_uri = request.datasets["train"].uri
        run = client.fit(request)
        events = list(client.watch_run(run.run_id))
        assert events
        run = client.get_run(run.run_id)
        assert run.state == common_pb2.SUCCEEDED, (run.state_reason, run.error)
        assert run.path.startswith("s3://")

        ckpt_uri = run.latest_checkpoint.uri
        assert ckpt_uri.startswith("s3://"), ckpt_uri
        # The committed index and the checkpoint's manifest are objects in the bucket.
        run_key = f"{BUCKET}/store/runs/{run.run_id}"
        ckpt_key = f"{run_key}/checkpoints/{run.latest_checkpoint.checkpoint_id}"
        assert bucket_fs.get_file_info(f"{run_key}/{INDEX_NAME}").type == pafs.FileType.File
        assert bucket_fs.get_file_info(f"{ckpt_key}/{MANIFEST_NAME}").type == pafs.FileType.File
        with bucket_fs.open_input_stream(f"{ckpt_key}/{MANIFEST_NAME}") as f:
            manifest = json.loads(f.read())
        assert "model.ubj" in {e["path"] for e in manifest["files"]}
        with bucket_fs.open_input_stream(f"{run_key}/{INDEX_NAME}") as f:
            index = json.loads(f.read())
        assert index["latest"] == run.latest_checkpoint.checkpoint_id

        out = client.download_checkpoint("on-s3", tmp_path / "dl")
        booster = xgboost.Booster(model_file=os.path.join(out, "model.ubj"))
        assert booster.num_boosted_rounds() == 3
        # The same checkpoint read straight from S3 through its URI.
        with Checkpoint(ckpt_uri).as_directory() as d:
            assert open(os.path.join(d, "model.ubj"), "rb").read() == open(os.path.join(out, "model.ubj"), "rb").read()

        # The uploaded training data landed content-addressed in the bucket.
        sha = client.upload_table(_table(cancer_data[0])).sha256
        assert sha in dataset_uri
        info = bucket_fs.get_file_info(f"{BUCKET}/store/datasets/{sha}/data.parquet")
        assert info.type == pafs.FileType.File and info.size > 0
    finally:
        client.close()


def _table(df):
    import pyarrow as pa

    return pa.Table.from_pandas(df, preserve_index=False)
