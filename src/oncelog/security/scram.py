"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka implements them: pure.

The broker stores, per user and mechanism, a :class:`ScramCredential` (salt, StoredKey,
ServerKey, iteration count), never the password; AlterUserScramCredentials sends the salt
and the *salted* password, from which the keys are derived here. The exchange is four
messages:

    client-first   n,,n=alice,r=<client nonce>
    server-first   r=<client nonce><server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<ClientProof>
    server-final   v=<ServerSignature>

:class:`ScramServer` checks the client's proof against the stored key; :class:`ScramClient`
is the other side, for oncelog's own connections (the command line, inter-broker
traffic). Message grammar, limits and failure messages follow Kafka's ``ScramMessages``,
``ScramSaslServer`` and ``ScramMechanism``: only the ``n`` gs2 flag (no channel binding),
ASCII user names with ``=2C``/``=3D`` escapes, an authorization id equal to the user name
or absent, extensions ignored (delegation-token authentication is not supported), at least
4096 iterations. Unlike Kafka, the ``c=`` attribute must encode the gs2 header the client
sent, as RFC 5802 requires, and the signatures cover the messages exactly as received.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from oncelog.security.mechanism import AuthenticationFailed, InvalidCredentials

__all__ = [
    "MAX_ITERATIONS",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "new_credential",
    "salted_password",
]

# Kafka refuses more than this in AlterUserScramCredentials (``ScramMechanism`` has the
# minimum, 4096 for both hashes; the maximum is the admin API's bound).
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramMechanism(enum.Enum):
    """A SCRAM mechanism: its SASL name, hash, minimum iterations and wire type code
    (DescribeUserScramCredentials/AlterUserScramCredentials ``mechanism`` byte)."""

    SCRAM_SHA_256 = ("SCRAM-SHA-256", "sha256", 4096, 1)
    SCRAM_SHA_512 = ("SCRAM-SHA-512", "sha512", 4096, 2)

    def __init__(self, mechanism_name: str, hash_name: str, min_iterations: int, code: int):
        self.mechanism_name = mechanism_name
        self.hash_name = hash_name
        self.min_iterations = min_iterations
        self.code = code

    @classmethod
    def by_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def by_code(cls, code: int) -> ScramMechanism | None:
        return next((m for m in cls if m.code == code), None)

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of a password (RFC 5802's StoredKey and ServerKey)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``, as stored in ZooKeeper."""
        b64 = _b64encode
        return (
            f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
            f"server_key={b64(self.server_key)},iterations={self.iterations}"
        )

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        """Parse :meth:`to_text`'s form; raise ValueError when a field is missing or bad."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(
                salt=base64.b64decode(fields["salt"], validate=True),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
                iterations=int(fields["iterations"]),
            )
        except (KeyError, ValueError, binascii.Error) as exc:
            raise ValueError(f"invalid SCRAM credential {text!r}: {exc}") from None

    @classmethod
    def from_salted_password(
        cls, mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
    ) -> ScramCredential:
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(
            salt=salt,
            stored_key=mechanism.digest(client_key),
            server_key=mechanism.hmac(salted, b"Server Key"),
            iterations=iterations,
        )


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """RFC 5802's Hi(password, salt, i): PBKDF2 with the mechanism's HMAC. Like Kafka, the
    password's UTF-8 bytes are used without SASLprep."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def new_credential(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    salted = salted_password(mechanism, password, salt, iterations)
    return ScramCredential.from_salted_password(mechanism, salt, salted, iterations)


# Kafka's grammar (ScramMessages), ASCII only as in Kafka's Java character classes.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>(?:m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})"
    rf"(?P<extensions>{_EXTENSIONS}))"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+)"
    rf"{_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS})"
    rf",p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(
    rf"(?:e=(?P<error>[\x01-\x2b\x2d-\x3c\x3e-\x7f]+)|v=(?P<signature>{_BASE64})){_EXTENSIONS}"
)


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _decode(token: bytes, what: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidCredentials(f"Invalid SCRAM {what} message: not UTF-8") from None


def username_from_saslname(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname_from_username(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _xor(left: bytes, right: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(left, right, strict=True))


class _Step(enum.Enum):
    """Where a server-side exchange is (Kafka's ``ScramSaslServer.State``)."""

    RECEIVE_CLIENT_FIRST = enum.auto()
    RECEIVE_CLIENT_FINAL = enum.auto()
    COMPLETE = enum.auto()
    FAILED = enum.auto()


class ScramServer:
    """The server side of one SCRAM exchange.

    ``credential_for(user)`` returns the stored credential of that mechanism, or None;
    ``server_nonce`` is this exchange's random part of the nonce (printable, no comma).
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        credential_for: Callable[[str], ScramCredential | None],
        server_nonce: str,
    ) -> None:
        self.mechanism = mechanism
        self._credential_for = credential_for
        self._server_nonce = server_nonce
        self._step = _Step.RECEIVE_CLIENT_FIRST
        self._user = ""
        self._credential: ScramCredential | None = None
        self._auth_prefix = ""  # client-first-bare + "," + server-first
        self._gs2_header = ""
        self._nonce = ""

    @property
    def complete(self) -> bool:
        return self._step is _Step.COMPLETE

    @property
    def authorization_id(self) -> str:
        assert self.complete, "authentication exchange has not completed"
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._step is _Step.RECEIVE_CLIENT_FIRST:
                return self._client_first(_decode(token, "client first"))
            if self._step is _Step.RECEIVE_CLIENT_FINAL:
                return self._client_final(_decode(token, "client final"))
            raise InvalidCredentials(
                f"Unexpected challenge in SCRAM server state {self._step.name}"
            )
        except (AuthenticationFailed, InvalidCredentials):
            self._step = _Step.FAILED
            self._credential = None
            raise

    def _client_first(self, message: str) -> bytes:
        match = _CLIENT_FIRST.fullmatch(message)
        if match is None:
            raise InvalidCredentials(f"Invalid SCRAM client first message format: {message}")
        user = username_from_saslname(match["saslname"])
        if "tokenauth=true" in match["extensions"].lower().split(","):
            raise InvalidCredentials("delegation-token authentication is not supported")
        credential = self._credential_for(user)
        if credential is None:
            raise InvalidCredentials("Authentication failed: Invalid user credentials")
        authzid = match["authzid"]
        if authzid is not None and username_from_saslname(authzid) != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username"
            )
        if credential.iterations < self.mechanism.min_iterations:
            raise InvalidCredentials(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{self.mechanism.min_iterations} for {self.mechanism.mechanism_name}"
            )
        self._user = user
        self._credential = credential
        self._gs2_header = match["gs2"]
        self._nonce = match["nonce"] + self._server_nonce
        server_first = f"r={self._nonce},s={_b64encode(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{match['bare']},{server_first}"
        self._step = _Step.RECEIVE_CLIENT_FINAL
        return server_first.encode()

    def _client_final(self, message: str) -> bytes:
        match = _CLIENT_FINAL.fullmatch(message)
        if match is None:
            raise InvalidCredentials(f"Invalid SCRAM client final message format: {message}")
        if match["nonce"] != self._nonce:
            raise InvalidCredentials("Invalid client nonce in the final client message.")
        if base64.b64decode(match["channel"]) != self._gs2_header.encode():
            raise InvalidCredentials("Invalid channel binding in the final client message.")
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._auth_prefix},{match['without_proof']}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        proof = base64.b64decode(match["proof"])
        if len(proof) != len(client_signature):
            raise InvalidCredentials("Invalid client credentials")
        client_key = _xor(proof, client_signature)
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise InvalidCredentials("Invalid client credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        self._step = _Step.COMPLETE
        self._credential = None
        return f"v={_b64encode(server_signature)}".encode()


class ScramClient:
    """The client side of one SCRAM exchange, for oncelog's own connections."""

    def __init__(
        self, mechanism: ScramMechanism, username: str, password: str, client_nonce: str
    ) -> None:
        self.mechanism = mechanism
        self._password = password
        self._bare = f"n={saslname_from_username(username)},r={client_nonce}"
        self._client_nonce = client_nonce
        self._server_signature = b""

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        """Answer the server-first message; raise AuthenticationFailed if it is invalid."""
        text = _decode(server_first, "server first")
        match = _SERVER_FIRST.fullmatch(text)
        if match is None or not match["nonce"].startswith(self._client_nonce):
            raise AuthenticationFailed(f"Invalid SCRAM server first message: {text}")
        iterations = int(match["iterations"])
        if iterations < self.mechanism.min_iterations:
            raise AuthenticationFailed(f"the server asks for too few iterations: {iterations}")
        salted = salted_password(
            self.mechanism, self._password, base64.b64decode(match["salt"]), iterations
        )
        client_key = self.mechanism.hmac(salted, b"Client Key")
        without_proof = f"c={_b64encode(b'n,,')},r={match['nonce']}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        signature = self.mechanism.hmac(self.mechanism.digest(client_key), auth_message)
        server_key = self.mechanism.hmac(salted, b"Server Key")
        self._server_signature = self.mechanism.hmac(server_key, auth_message)
        return f"{without_proof},p={_b64encode(_xor(client_key, signature))}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        """Check that the server knew the credential; raise AuthenticationFailed if not."""
        text = _decode(server_final, "server final")
        match = _SERVER_FINAL.fullmatch(text)
        if match is None or match["error"] is not None:
            raise AuthenticationFailed(f"SCRAM authentication failed: {text}")
        if not hmac.compare_digest(base64.b64decode(match["signature"]), self._server_signature):
            raise AuthenticationFailed("Invalid server signature in the SCRAM server final message")
