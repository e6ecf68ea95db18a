"""Who calls, and what they may do: named bearer tokens with scopes.

A deployment gives each user or service its own token, with the scopes it needs:

- ``submit-code``: runs that carry code (pickled functions, runtime environments); implies ``submit``;
- ``submit``: declarative trainers and installed entry points, dataset and checkpoint uploads;
- ``read``: get, list and watch runs, download checkpoints;
- ``cancel``: cancel runs;
- ``predict``: inference;
- ``serve``: move model aliases and set traffic policies (what predictors serve);
- ``admin``: everything.

The table comes from JSON, ``{"alice": {"token": "...", "scopes": ["submit-code", "read"]}}``
(a file, or the same text in a setting). One plain token, as before, holds every scope. An
entry may carry ``"weight": 2``: its share of a predictor's generation slots (equal by default).
"""

from __future__ import annotations

import argparse
import contextvars
import hmac
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trainwire_core.errors import InvalidArgumentError, PermissionDeniedError

SUBMIT_CODE, SUBMIT, READ, CANCEL, PREDICT, ADMIN = "submit-code", "submit", "read", "cancel", "predict", "admin"
SERVE = "serve"
SCOPES = frozenset({SUBMIT_CODE, SUBMIT, READ, CANCEL, PREDICT, SERVE, ADMIN})
# A scope a token holds implies these too.
_IMPLIED = {SUBMIT_CODE: {SUBMIT}, ADMIN: set(SCOPES)}


@dataclass(frozen=True)
class Caller:
    """The holder of the token a call came with.

    Args:
        name: The token's name, recorded as who started a run ("" where no tokens are configured).
        scopes: What it may do (implied scopes included).
        weight: Its share of a predictor's generation slots against other tokens' (above 0).
    """

    name: str
    scopes: frozenset[str]
    weight: float = 1.0

    def require(self, scope: str) -> None:
        """Raises PermissionDeniedError naming ``scope`` unless the caller holds it."""
        if scope not in self.scopes:
            raise PermissionDeniedError(f"token {self.name!r} lacks the {scope!r} scope", field=scope)


# Where no tokens are configured (a loopback service), every caller may do everything.
ANYONE = Caller("", SCOPES)
# The "scope" of a method any known token may call (it says who the token is, and changes nothing).
ANY_TOKEN = ""
_current: contextvars.ContextVar[Caller] = contextvars.ContextVar("trainwire_caller", default=ANYONE)


def current_caller() -> Caller:
    """The caller of the RPC being handled (set by the token interceptor)."""
    return _current.get()


def set_caller(caller: Caller) -> contextvars.Token[Caller]:
    return _current.set(caller)


def reset_caller(token: contextvars.Token[Caller]) -> None:
    _current.reset(token)


def _expand(scopes: Iterable[str]) -> frozenset[str]:
    held = set(scopes)
    for scope in list(held):
        held |= _IMPLIED.get(scope, set())
    return frozenset(held)


class TokenTable:
    """Bearer tokens by value, each naming its holder and scopes.

    Args:
        tokens: Token value -> Caller.
    """

    def __init__(self, tokens: Mapping[str, Caller]) -> None:
        if any(not value for value in tokens):
            raise InvalidArgumentError("a token may not be empty", field="tokens")
        self._tokens = {f"Bearer {value}".encode(): caller for value, caller in tokens.items()}

    def __bool__(self) -> bool:
        return bool(self._tokens)

    @classmethod
    def from_settings(cls, token: str = "", tokens: str = "") -> TokenTable:
        """The table of a service's settings: a plain ``token`` (every scope) and/or ``tokens``.

        Args:
            token: One token holding every scope ("" for none).
            tokens: A JSON object of named tokens, or the path of a file holding one ("" for none).

        Raises:
            InvalidArgumentError: ``tokens`` is not such an object (field ``tokens``).
        """
        table: dict[str, Caller] = {}
        if token:
            table[token] = Caller("default", SCOPES)
        if tokens:
            text = tokens
            if not tokens.lstrip().startswith("{") and os.path.exists(tokens):
                with open(tokens) as f:
                    text = f.read()
            table.update(parse_tokens(text))
        return cls(table)

    def identify(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> Caller | None:
        """The caller whose token the metadata carries; None for no or an unknown token."""
        for key, value in metadata or ():
            if key == "authorization":
                got = value if isinstance(value, bytes) else value.encode()
                found = None
                # Compare with every token, in constant time each, so timing tells nothing.
                for expected, caller in self._tokens.items():
                    if hmac.compare_digest(got, expected):
                        found = caller
                return found
        return None


def parse_tokens(text: str) -> dict[str, Caller]:
    """Token value -> Caller, from ``{"name": {"token": "...", "scopes": [...]}, ...}``.

    Raises:
        InvalidArgumentError: Not such an object, an unknown scope, or a token used twice (field ``tokens``).
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgumentError(f"tokens: not JSON ({exc})", field="tokens") from None
    if not isinstance(raw, dict):
        raise InvalidArgumentError('tokens must be {"name": {"token": ..., "scopes": [...]}}', field="tokens")
    table: dict[str, Caller] = {}
    for name, entry in raw.items():
        value = entry.get("token") if isinstance(entry, dict) else None
        scopes = entry.get("scopes") if isinstance(entry, dict) else None
        if not isinstance(value, str) or not value or not isinstance(scopes, list):
            raise InvalidArgumentError(f"tokens[{name!r}] needs a token and a list of scopes", field="tokens")
        unknown = sorted(set(map(str, scopes)) - SCOPES)
        if unknown:
            raise InvalidArgumentError(
                f"tokens[{name!r}]: unknown scopes {unknown}; known: {', '.join(sorted(SCOPES))}", field="tokens"
            )
        if value in table:
            raise InvalidArgumentError(f"tokens[{name!r}] reuses the token of {table[value].name!r}", field="tokens")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1e6:
            raise InvalidArgumentError(f"tokens[{name!r}].weight must be a number above 0", field="tokens")
        table[value] = Caller(str(name), _expand(scopes), float(weight))
    return table


def add_auth_arguments(parser: argparse.ArgumentParser) -> None:
    """The token flags every trainwire server takes (settings ``tokens``, ``allow_unauthenticated``)."""
    parser.add_argument(
        "--tokens",
        help='named tokens with scopes: a JSON file, {"name": {"token": ..., "scopes": [...]}} (trainwire_core.auth)',
    )
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        default=None,
        help="listen beyond loopback without a token (anyone who reaches the port can use it)",
    )
