"""The coordinator's checks of a Fit's runtime_env: pip lines read as pip reads them, loader variables refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwire_coordinator.admission.runtime_envs import check_pip_line, check_runtime_env
from trainwire_core.errors import InvalidArgumentError
from trainwire_core.v1 import common_pb2

INDEX = "https://pypi.internal/simple/"
# The first line of /etc/passwd: a refusal must never quote a worker file.
PASSWD_LINE = "root:"


class _Packages:
    """Every package is uploaded: only the pip lines and variables are under test."""

    def exists(self, sha256: str) -> bool:
        return True


def _check(env: common_pb2.RuntimeEnv, allowed_index_urls: list[str] | None = None) -> None:
    check_runtime_env(env, _Packages(), allow_pip=True, allowed_index_urls=allowed_index_urls or [])


def _refused_pip(line: str, allowed_index_urls: list[str] | None = None) -> InvalidArgumentError:
    with pytest.raises(InvalidArgumentError) as info:
        _check(common_pb2.RuntimeEnv(pip=["numpy", line]), allowed_index_urls)
    assert info.value.field == "run_config.runtime_env.pip[1]"
    assert PASSWD_LINE not in info.value.message
    return info.value


# --- pip lines ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "named"),
    [
        # The first option passed the old check; pip then read /etc/passwd and quoted it.
        ("--index-url=http://127.0.0.1:1 -r /etc/passwd", "--index-url"),
        (f"--index-url={INDEX} -r /etc/passwd", "-r"),
        ("--find-links /tmp -e /tmp/x", "--find-links"),
        ("--no-index -c /etc/passwd", "--no-index"),
        ("numpy -r /etc/passwd", "-r"),
        ("numpy -r/etc/passwd", "-r"),
        ("numpy --requirement=/etc/passwd", "--requirement"),
        ("numpy --constraint /etc/passwd", "--constraint"),
        ("numpy -e /tmp/x", "-e"),
        ("numpy --trusted-host evil.example", "--trusted-host"),
        ("numpy --global-option=--x", "--global-option"),
        ("numpy --config-settings k=v", "--config-settings"),
        ("numpy --target /tmp/t", "--target"),
        ("numpy --prefix /tmp/p", "--prefix"),
        ("numpy --root /tmp/r", "--root"),
        ("numpy --src /tmp/s", "--src"),
        ("numpy --cert /etc/passwd", "--cert"),
        ("numpy --client-cert /etc/passwd", "--client-cert"),
        ("numpy --proxy http://evil.example", "--proxy"),
        ("numpy --user", "--user"),
        ("numpy --break-system-packages", "--break-system-packages"),
        ("numpy --requir /etc/passwd", "--requir"),  # optparse takes abbreviations: only exact names pass
        ("numpy -Ur /etc/passwd", "-U"),  # grouped short options
        ("numpy --pre=/etc/passwd", "--pre"),
    ],
)
def test_every_option_of_a_pip_line_is_checked(line, named):
    error = _refused_pip(line, [INDEX])
    assert named in error.message


@pytest.mark.parametrize(
    "line",
    [
        "/etc/passwd",
        "./pkg",
        "~/pkg",
        "../pkg",
        "pkg.whl",
        "twtiny-0.1-py3-none-any.whl",
        "pkg.zip",
        "pkg.tar.gz",
        "C:\\pkg",
        "pkg @ file:///etc/passwd",
        "pkg@https://evil.example/pkg.whl",
        "pkg@file:pkg",
        "numpy scipy ==",
        "file:passwd",
    ],
)
def test_a_pip_requirement_must_be_an_index_package(line):
    _refused_pip(line)


@pytest.mark.parametrize(
    "line",
    [
        "numpy 'x -r /etc/passwd'",  # quotes: pip splits requirements on spaces, options as a shell does
        'numpy "-r" /etc/passwd',
        "numpy \\",  # a trailing backslash joins the next line for pip
        "foo===${TRAINWIRE_TOKEN}",  # pip substitutes the worker's variables
        "numpy -i",
        "-i",
        "numpy\t-r\t/etc/passwd",
        "",
        "   ",
        "x" * 1001,
    ],
)
def test_a_pip_line_pip_could_read_otherwise_is_refused(line):
    _refused_pip(line, [INDEX])


@pytest.mark.parametrize(
    "line",
    [
        f"--index-url {INDEX} torch",
        f"--index-url={INDEX} torch",
        f"-i {INDEX} torch",
        f"-i{INDEX} torch",
        f"--extra-index-url {INDEX.rstrip('/')} torch",
        f"torch --extra-index-url={INDEX}",
    ],
)
def test_an_allowed_index_may_be_named_in_every_form(line):
    _check(common_pb2.RuntimeEnv(pip=[line]), [INDEX])
    _check(common_pb2.RuntimeEnv(pip=[line]), [INDEX.rstrip("/")])


@pytest.mark.parametrize(
    "line",
    [
        f"--index-url {INDEX} torch",
        f"-i{INDEX} torch",
        f"--extra-index-url={INDEX} torch",
    ],
)
def test_an_index_the_coordinator_does_not_allow_is_refused(line):
    error = _refused_pip(line)
    assert "pip_allowed_index_urls" in error.message or "allows none" in error.message
    _refused_pip(line, ["https://other.internal/simple/"])


def test_an_index_url_with_credentials_is_refused_without_echoing_them():
    error = _refused_pip("--index-url https://user:s3cret@pypi.internal/simple/ torch", [INDEX])
    assert "credentials" in error.message and "s3cret" not in error.message


@pytest.mark.parametrize(
    "line",
    [
        "numpy==2.*",
        "requests>=2 --no-deps",
        "numpy[extra]>=1,<2",
        "torch --pre --upgrade -U --prefer-binary",
        "numpy --only-binary=:all:",
        "numpy --only-binary :none:",
        "numpy --no-binary=numpy,scipy",
        "numpy scipy",
    ],
)
def test_legitimate_pip_lines_pass(line):
    _check(common_pb2.RuntimeEnv(pip=[line]))


def test_binary_options_take_all_none_or_package_names():
    error = _refused_pip("numpy --only-binary=/etc/passwd")
    assert "--only-binary" in error.message
    _refused_pip("numpy --no-binary")


def test_the_pure_check_names_the_field_it_is_given():
    with pytest.raises(InvalidArgumentError) as info:
        check_pip_line("-r /etc/passwd", "f[3]")
    assert info.value.field == "f[3]" and "-r" in info.value.message
    check_pip_line(f"-i {INDEX} torch", "f[3]", allowed_index_urls=(INDEX,))


_WORDS = st.sampled_from(
    ["-r", "-e", "-i", "-U", "-Ur", "--pre", "--index-url", "--index-url=", "--only-binary", ":all:", INDEX,
     "/etc/passwd", "numpy", "numpy==2.*", "@", "'", '"', "\\", "${HOME}", "=", "--", "-", "#"]
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=200), st.lists(st.one_of(_WORDS, st.text(max_size=12))).map(" ".join)))
def test_any_pip_line_passes_or_is_refused_naming_its_field(line):
    try:
        env = common_pb2.RuntimeEnv(pip=[line])
    except ValueError:
        return  # not a string protobuf can carry (a lone surrogate): no request holds it
    try:
        _check(env, [INDEX])
    except InvalidArgumentError as exc:
        assert exc.field == "run_config.runtime_env.pip[0]"
        assert PASSWD_LINE not in exc.message or PASSWD_LINE in line


# --- variables ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "ld_preload",
        "LD_LIBRARY_PATH",
        "LD_AUDIT",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "PythonHome",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONINSPECT",
        "PYTHONWARNINGS",
        "PATH",
        "path",
        "BASH_ENV",
        "ENV",
        "IFS",
        "PERL5OPT",
        "NODE_OPTIONS",
        "GCONV_PATH",
        "HOSTALIASES",
    ],
)
def test_variables_that_change_what_the_worker_loads_are_refused(name):
    with pytest.raises(InvalidArgumentError) as info:
        _check(common_pb2.RuntimeEnv(env_vars={"OMP_NUM_THREADS": "2", name: "/tmp/x"}))
    assert info.value.field == f"run_config.runtime_env.env_vars[{name}]"
    assert "loader/interpreter" in info.value.message


@pytest.mark.parametrize(
    "name", ["OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONHASHSEED", "pythonioencoding", "MALLOC_ARENA_MAX", "MODE"]
)
def test_ordinary_variables_pass(name):
    _check(common_pb2.RuntimeEnv(env_vars={name: "1"}))


def test_reserved_variables_are_still_refused():
    with pytest.raises(InvalidArgumentError) as info:
        _check(common_pb2.RuntimeEnv(env_vars={"ray_address": "x"}))
    assert info.value.field == "run_config.runtime_env.env_vars[ray_address]" and "reserved" in info.value.message
