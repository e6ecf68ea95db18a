"""The forged-request check on its own: a tiny app behind csrf.ForgedRequestGuard, through Starlette's TestClient."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from trainwire_console.csrf import CSRF_COOKIE, ForgedRequestGuard, origin_of

OWN = "http://testserver"  # TestClient's Host
PAIR = {"Cookie": f"{CSRF_COOKIE}=form-token"}
FORM = {"csrf_token": "form-token", "token": "t"}


async def echo(request: Request) -> PlainTextResponse:
    # The route reads the body the guard already read: it must arrive whole.
    return PlainTextResponse((await request.body()).decode())


@pytest.fixture(scope="module")
def client() -> TestClient:
    routes = [Route("/", echo, methods=["GET", "POST", "PUT"])]
    return TestClient(Starlette(routes=routes, middleware=[Middleware(ForgedRequestGuard)]))


def test_origins_compare_with_default_ports_filled_in():
    assert origin_of("http://Console.example/page?x=1") == "http://console.example:80"
    assert origin_of("https://console.example:443") == origin_of("https://console.example")
    assert origin_of("http://[::1]:8265/") == "http://::1:8265"
    assert origin_of("null") is None and origin_of("file:///etc") is None and origin_of("http://h:bad") is None


@pytest.mark.parametrize(
    ("headers", "data"),
    [
        ({"X-Requested-By": "trainwire-console"}, None),
        ({"HX-Request": "true", "Origin": OWN}, None),
        ({**PAIR, "Origin": OWN}, FORM),
        ({**PAIR, "Origin": "http://TESTSERVER:80"}, FORM),
        ({**PAIR, "Referer": f"{OWN}/signin"}, FORM),
        (PAIR, FORM),  # no Origin and no Referer: a non-browser client, judged by its token
    ],
)
def test_a_request_of_the_consoles_own_pages_passes_with_its_body(client, headers, data):
    answer = client.post("/", headers=headers, data=data)
    assert answer.status_code == 200, answer.text
    if data:
        assert "csrf_token=form-token" in answer.text and "token=t" in answer.text


@pytest.mark.parametrize(
    ("headers", "data"),
    [
        ({}, {"token": "t"}),  # no token at all
        (PAIR, {"token": "t"}),  # a cookie but no field
        ({}, FORM),  # a field but no cookie
        ({"Cookie": f"{CSRF_COOKIE}=other"}, FORM),  # mismatched
        ({"X-Requested-By": "someone-else"}, None),
        ({**PAIR, "Origin": "http://attacker.example"}, FORM),
        ({"X-Requested-By": "trainwire-console", "Origin": "http://attacker.example"}, None),
        ({**PAIR, "Origin": "null"}, FORM),
        ({**PAIR, "Origin": "https://testserver"}, FORM),  # another scheme is another origin
        ({**PAIR, "Origin": "http://testserver:8080"}, FORM),  # and another port
        ({**PAIR, "Referer": "http://attacker.example/page"}, FORM),
        ({**PAIR, "Origin": "http://attacker.example", "Referer": f"{OWN}/"}, FORM),  # Origin decides
    ],
)
def test_a_forged_request_is_refused_before_the_route(client, headers, data):
    answer = client.post("/", headers=headers, data=data)
    assert answer.status_code == 403
    assert answer.json()["error"] == "PERMISSION_DENIED" and answer.json()["message"]
    assert "set-cookie" not in answer.headers


def test_every_state_changing_method_is_checked_and_reads_are_not(client):
    assert client.put("/", headers={"Origin": "http://attacker.example"}).status_code == 403
    assert client.get("/", headers={"Origin": "http://attacker.example"}).status_code == 200
