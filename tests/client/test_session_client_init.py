"""``trainwire.init()`` takes ``ray.init``'s keywords: derived from Ray's own signature, so it cannot drift."""

from __future__ import annotations

import inspect
import warnings

import pytest
import ray

import trainwire
from trainwire import session_client

RAY_PARAMETERS = {
    name: p for name, p in inspect.signature(ray.init).parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD
}
# Not a coordinator's address: the channel opens lazily, so nothing is dialled.
REMOTE = "127.0.0.1:9"


@pytest.fixture
def fresh(monkeypatch):
    """init() as in a new program: no client yet, no TRAINWIRE_ADDRESS; closes the client it made."""
    monkeypatch.setattr(session_client, "_client", None)
    monkeypatch.setattr(session_client, "settings", dict(session_client.settings))
    monkeypatch.delenv("TRAINWIRE_ADDRESS", raising=False)
    yield
    if session_client._client is not None:
        session_client._client.close()


def test_init_takes_every_ray_init_keyword_with_rays_kind_and_default():
    ours = inspect.signature(trainwire.init).parameters
    assert RAY_PARAMETERS, "ray.init's signature has no parameters?"
    for name, theirs in RAY_PARAMETERS.items():
        assert name in ours, f"trainwire.init lacks ray.init's {name!r}"
        assert ours[name].kind is theirs.kind, name
        if name != "dashboard_host":  # Ray's default is this machine's loopback address, computed at import
            assert ours[name].default == theirs.default, name
    assert any(p.kind is inspect.Parameter.VAR_KEYWORD for p in ours.values())
    # trainwire's own keywords stay.
    assert {"store", "state", "token"} <= set(ours)


def test_a_keyword_ray_does_not_take_is_refused_before_anything_starts(fresh, monkeypatch):
    def no_start(*args):
        raise AssertionError("nothing may start for a refused keyword")

    monkeypatch.setattr(session_client, "_start_embedded", no_start)
    with pytest.raises(TypeError, match="Unknown keyword argument.*num_cpu") as caught:
        trainwire.init(num_cpu=4)
    assert isinstance(caught.value, RuntimeError)  # what ray.init raises for it
    with pytest.raises(RuntimeError, match="Unknown keyword argument"):
        trainwire.init(REMOTE, not_a_ray_keyword=1)
    assert session_client._client is None


def test_with_a_coordinators_address_ray_only_keywords_are_named_in_one_warning(fresh):
    with pytest.warns(UserWarning) as caught:
        client = trainwire.init(
            REMOTE,
            num_cpus=2,
            namespace="team",
            configure_logging=False,
            _temp_dir="/tmp/ray-elsewhere",
            log_to_driver=False,  # trainwire's: it applies to fit() with any coordinator
            runtime_env={"env_vars": {"A": "1"}},  # trainwire's: every run's default environment
        )
    assert len(caught) == 1
    message = str(caught[0].message)
    assert f"the coordinator at {REMOTE}" in message
    assert message.endswith("do not apply: _temp_dir, configure_logging, namespace, num_cpus")
    assert caught[0].filename == __file__  # it points at the caller's line
    assert client.address == REMOTE
    assert session_client.settings["log_to_driver"] is False
    assert session_client.settings["runtime_env"] == {"env_vars": {"A": "1"}}


def test_defaults_and_trainwire_keywords_warn_nothing(fresh):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainwire.init(REMOTE, configure_logging=True, log_to_driver=True, logging_level="info", token="t")


def test_init_twice_raises_as_ray_unless_told_to_ignore(fresh):
    client = trainwire.init(REMOTE)
    with pytest.raises(RuntimeError, match="ignore_reinit_error=True"):
        trainwire.init(REMOTE)
    assert trainwire.init("127.0.0.1:10", ignore_reinit_error=True) is client
    assert trainwire.get_client() is client


def test_on_the_embedded_default_ray_keywords_go_to_the_programs_ray(fresh, monkeypatch):
    started = []
    monkeypatch.setattr(session_client, "_start_embedded", lambda *args: started.append(args) or REMOTE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainwire.init(
            num_cpus=4, num_gpus=0, namespace="ns", configure_logging=False, _system_config={"k": 1}, store="s"
        )
    [(store, state, ray_address, options)] = started
    assert (store, state, ray_address) == ("s", None, None)
    assert options == {
        "num_cpus": 4,
        "num_gpus": 0,
        "namespace": "ns",
        "configure_logging": False,
        "_system_config": {"k": 1},
    }


@pytest.mark.parametrize(("address", "ray_address"), [(None, None), ("auto", "auto"), ("local", "local")])
def test_rays_own_addresses_name_the_embedded_coordinators_ray(fresh, monkeypatch, address, ray_address):
    started = []
    monkeypatch.setattr(session_client, "_start_embedded", lambda *args: started.append(args) or REMOTE)
    trainwire.init(address)
    assert started[0][2] == ray_address


def test_what_ray_260_refuses_is_refused_before_anything_starts(fresh, monkeypatch):
    monkeypatch.setattr(session_client, "_start_embedded", lambda *args: pytest.fail("started"))
    with pytest.raises(RuntimeError, match="local_mode"):
        trainwire.init(local_mode=True)
    with pytest.raises(RuntimeError, match="storage"):
        trainwire.init(storage="/tmp/ray-storage")
