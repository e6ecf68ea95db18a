"""The path policy as pure logic: nothing a request names escapes the store or an allowed prefix."""

from __future__ import annotations

import posixpath

from hypothesis import given
from hypothesis import strategies as st

from trainwire_coordinator.admission.code_policy import CodePolicy
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.storage import Store

SEGMENTS = st.lists(st.sampled_from(["..", ".", "", "runs", "etc", "passwd", "store", "x%2F..", "a b"]), max_size=8)


def _policy(tmp_path) -> CodePolicy:
    return CodePolicy(
        Store(str(tmp_path / "store")), allowed_path_prefixes=["s3://team-data/prefix", f"file://{tmp_path}/shared/"]
    )


@given(segments=SEGMENTS, scheme=st.sampled_from(["", "file://", "s3://team-data/prefix/", "s3://other/"]))
def test_a_path_is_allowed_only_where_it_resolves_inside_an_allowed_root(tmp_path_factory, segments, scheme):
    tmp_path = tmp_path_factory.getbasetemp()
    policy = _policy(tmp_path)
    store_root = f"{tmp_path}/store"
    if scheme in ("", "file://"):
        uri = scheme + store_root + "/" + "/".join(segments)
        resolved = posixpath.normpath(store_root + "/" + "/".join(segments))
        inside = resolved == store_root or resolved.startswith(store_root + "/")
    else:
        uri = scheme + "/".join(segments)
        resolved = posixpath.normpath("/" + scheme.split("://", 1)[1] + "/".join(segments))
        inside = scheme.startswith("s3://team-data/") and (
            resolved == "/team-data/prefix" or resolved.startswith("/team-data/prefix/")
        )
    assert policy.allows_path(uri) == inside, (uri, resolved)


@given(st.text(max_size=120))
def test_any_text_is_allowed_or_refused_naming_the_field_never_crashes(tmp_path_factory, text):
    policy = _policy(tmp_path_factory.getbasetemp())
    try:
        policy.check_path(text, "run_config.storage_path")
    except InvalidArgumentError as exc:
        assert exc.field == "run_config.storage_path"
        assert "/etc" not in exc.message or "/etc" in str(tmp_path_factory.getbasetemp())


def test_query_options_must_match_an_allowed_prefix(tmp_path):
    policy = _policy(tmp_path)
    assert policy.allows_path("s3://team-data/prefix/a.parquet")
    # Another endpoint for an allowed bucket would send the coordinator's requests elsewhere.
    assert not policy.allows_path("s3://team-data/prefix/a.parquet?endpoint_override=127.0.0.1:1")
    assert not policy.allows_path("s3://team-data/prefixed/a.parquet")
    assert not policy.allows_path("datasets/../../etc/passwd")
