"""Kafka's inline JAAS configuration (``sasl.jaas.config``), read as Kafka's ``JaasConfig``.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret"
        user_admin="admin-secret" user_alice="alice-secret";

One login module: its class, a control flag (required, requisite, sufficient, optional),
then ``name=value`` options, values quoted (with backslash escapes) or bare, and a closing
semicolon. On a broker listener the options give the broker's own credentials
(``username``, ``password``: what it uses for inter-broker connections) and, for PLAIN,
the users it accepts (``user_<name>``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "PLAIN_LOGIN_MODULE",
    "SCRAM_LOGIN_MODULE",
    "JaasConfigError",
    "LoginModule",
    "parse_jaas_config",
]

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_VALUES = ("word", "value")
_FLAGS = ("required", "requisite", "sufficient", "optional")
_TOKEN = re.compile(
    r'\s*(?:(?P<quoted>"(?:[^"\\]|\\.)*")|(?P<word>[^\s=;"]+)|(?P<punct>[=;]))', re.S
)


class JaasConfigError(ValueError):
    """The configuration does not parse; the message says where."""


@dataclass(frozen=True)
class LoginModule:
    """One JAAS login module entry: class, control flag and options."""

    class_name: str
    flag: str
    options: Mapping[str, str]

    def users(self) -> dict[str, str]:
        """PLAIN's accepted users: ``user_<name>`` options, name -> password."""
        return {k[len("user_") :]: v for k, v in self.options.items() if k.startswith("user_")}


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        if not text[position:].strip():
            break
        match = _TOKEN.match(text, position)
        if match is None:
            raise JaasConfigError(f"unexpected character at {position}: {text[position:][:20]!r}")
        if match["quoted"] is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", match["quoted"][1:-1], flags=re.S)))
        elif match["word"] is not None:
            tokens.append(("word", match["word"]))
        else:
            tokens.append((match["punct"], match["punct"]))
        position = match.end()
    return tokens


def parse_jaas_config(text: str) -> LoginModule:
    """Parse one login module; raise JaasConfigError (Kafka requires exactly one)."""
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word":
        raise JaasConfigError("expected: <LoginModuleClass> <flag> [name=value ...];")
    class_name, flag = tokens[0][1], tokens[1][1].lower()
    if flag not in _FLAGS:
        raise JaasConfigError(f"invalid login module control flag {tokens[1][1]!r}")
    options: dict[str, str] = {}
    rest = tokens[2:]
    while rest and rest[0][0] != ";":
        if len(rest) < 3 or rest[0][0] != "word" or rest[1][0] != "=" or rest[2][0] not in _VALUES:
            raise JaasConfigError(f"expected name=value after {class_name}, got {rest[0][1]!r}")
        options[rest[0][1]] = rest[2][1]
        rest = rest[3:]
    if not rest:
        raise JaasConfigError("the login module must end with ';'")
    if rest[1:]:
        raise JaasConfigError("JAAS config property contains more than one login module")
    return LoginModule(class_name, flag, MappingProxyType(options))
