"""The SASL authentication of one connection, server side: a pure state machine.

Bytes in, decision out, as h11 does it: the server reads a frame (its size prefix already
stripped) and hands it to :meth:`SaslServerAuthenticator.receive` with the time; the
answer says what to do with it. No sockets, no clock, no randomness (the mechanisms are
made by factories the caller supplies). The states and their order are Kafka's
``SaslServerAuthenticator``'s (read for the rules; the code is our own):

    INITIAL_REQUEST --ApiVersions--> HANDSHAKE_REQUEST --SaslHandshake--> AUTHENTICATE
    INITIAL_REQUEST -----------------SaslHandshake-----------------------> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (more to come)--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (exchange complete)--> COMPLETE
    COMPLETE --SaslHandshake, session set to expire (KIP-368)--> AUTHENTICATE (re-auth)
    any state --anything else, or a failed exchange--> FAILED (the connection closes)

- Before COMPLETE only ApiVersions (answered by the broker as usual: :class:`Dispatch`)
  and the SASL requests are taken. Anything else closes the connection; in AUTHENTICATE
  the client first gets that request's error response with ILLEGAL_SASL_STATE where the
  response has an error field, as in Kafka.
- SaslHandshake v1 announces SaslAuthenticate requests (KIP-152); v0 announces the legacy
  framing, where each SASL token travels as a bare size-prefixed frame with no Kafka
  header, and a failure can only close the connection.
- A failed exchange answers SASL_AUTHENTICATION_FAILED with the mechanism's message when
  it is meant for the client, else with Kafka's generic message, then closes.
- While authenticating, frames are limited to ``sasl.server.max.receive.size``
  (:attr:`SaslServerAuthenticator.max_frame_bytes`); a larger one closes the connection.
- With ``connections.max.reauth.ms`` set, the session expires that long after it was
  established: the client may re-authenticate on the same connection with the same
  mechanism and must stay the same principal; a request other than SaslHandshake after
  expiry closes the connection. Re-authentication is refused (the handshake goes to the
  broker, which answers ILLEGAL_SASL_STATE) without a session expiry or within a second
  of the previous one.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.protocol import codec
from oncelog.protocol.api_versions import ApiKey, is_supported
from oncelog.protocol.errors import ErrorCode
from oncelog.security.mechanism import AuthenticationFailed, InvalidCredentials, MechanismServer
from oncelog.security.principal import KafkaPrincipal

__all__ = [
    "SASL_SERVER_MAX_RECEIVE_SIZE",
    "Authenticated",
    "Dispatch",
    "Refuse",
    "SaslServerAuthenticator",
    "SaslState",
    "Send",
]

# Kafka's default ``sasl.server.max.receive.size``.
SASL_SERVER_MAX_RECEIVE_SIZE = 524_288
# Kafka refuses a re-authentication started within a second of the previous one.
MIN_REAUTH_INTERVAL_MS = 1000


class SaslState(enum.Enum):
    """Where a connection is in Kafka's SASL server state machine (SaslServerAuthenticator)."""

    INITIAL_REQUEST = enum.auto()  # ApiVersions or SaslHandshake
    HANDSHAKE_OR_VERSIONS_REQUEST = enum.auto()  # after an unsupported ApiVersions version
    HANDSHAKE_REQUEST = enum.auto()  # after ApiVersions: SaslHandshake
    AUTHENTICATE = enum.auto()  # tokens of the chosen mechanism
    REAUTH_BAD_MECHANISM = enum.auto()  # re-authentication asked for another mechanism
    COMPLETE = enum.auto()  # authenticated: ordinary requests
    FAILED = enum.auto()


@dataclass(frozen=True, slots=True)
class Send:
    """Write this response frame (size prefix included); keep authenticating."""

    frame: bytes


@dataclass(frozen=True, slots=True)
class Dispatch:
    """An ordinary request: the broker answers it as usual."""


@dataclass(frozen=True, slots=True)
class Authenticated:
    """Write this response frame; from now on the connection acts as ``principal``.
    ``session_expiry_ms``: when the session ends (None: never)."""

    frame: bytes
    principal: KafkaPrincipal
    mechanism: str
    session_expiry_ms: int | None


@dataclass(frozen=True, slots=True)
class Refuse:
    """Write ``frame`` if there is one, then close the connection; ``reason`` is for the
    broker's log."""

    frame: bytes | None
    reason: str


Decision = Send | Dispatch | Authenticated | Refuse

MechanismFactory = Callable[[], MechanismServer]

_PREAUTH_STATES = (
    SaslState.INITIAL_REQUEST,
    SaslState.HANDSHAKE_OR_VERSIONS_REQUEST,
    SaslState.HANDSHAKE_REQUEST,
)


class SaslServerAuthenticator:
    """The authentication state of one connection of a SASL listener.

    ``mechanisms`` maps each enabled mechanism name, in the listener's order, to a factory
    of one exchange's server; ``reauth_ms`` maps a mechanism to its
    ``connections.max.reauth.ms`` (0 or absent: sessions never expire).
    """

    def __init__(
        self,
        mechanisms: Mapping[str, MechanismFactory],
        *,
        reauth_ms: Mapping[str, int] | None = None,
        max_receive_bytes: int = SASL_SERVER_MAX_RECEIVE_SIZE,
    ) -> None:
        if not mechanisms:
            raise ValueError("No SASL mechanisms are enabled")
        self._mechanisms = dict(mechanisms)
        self._reauth_ms = dict(reauth_ms or {})
        self._max_receive_bytes = max_receive_bytes
        self.state = SaslState.INITIAL_REQUEST
        self.principal: KafkaPrincipal | None = None
        self.session_expiry_ms: int | None = None
        self._mechanism_name: str | None = None
        self._exchange: MechanismServer | None = None
        self._framed = True  # SaslAuthenticate requests (handshake v1+), else bare tokens
        self._reauthenticating = False
        self._last_reauth_start_ms: int | None = None
        self._bad_mechanism_message = ""

    @property
    def authenticating(self) -> bool:
        """Frames must come here rather than go to the broker."""
        return self.state is not SaslState.COMPLETE

    @property
    def max_frame_bytes(self) -> int | None:
        """The largest frame accepted now; None: the broker's usual limit applies."""
        return self._max_receive_bytes if self.authenticating else None

    def receive(self, frame: bytes, now_ms: int) -> Decision:
        """Decide what to do with one frame that arrived at ``now_ms``."""
        if self.state is SaslState.FAILED:
            return Refuse(None, "a frame arrived after authentication failed")
        try:
            decision = self._receive(frame, now_ms)
        except _Failure as failure:
            decision = Refuse(failure.frame, failure.reason)
        if isinstance(decision, Refuse):
            self.state = SaslState.FAILED
            self._exchange = None
        return decision

    # -- per state --------------------------------------------------------------------

    def _receive(self, frame: bytes, now_ms: int) -> Decision:
        if self.state is SaslState.COMPLETE:
            return self._authenticated_request(frame, now_ms)
        if self.state in _PREAUTH_STATES:
            return self._handshake_stage(frame)
        if self.state is SaslState.REAUTH_BAD_MECHANISM:
            return Refuse(None, self._bad_mechanism_message)
        if not self._framed:
            return self._evaluate(frame, now_ms, None)
        api_key, version, correlation_id = _peek(frame)
        if api_key != ApiKey.SASL_AUTHENTICATE:
            reason = (
                f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication."
            )
            return Refuse(_illegal_state_reply(api_key, version, correlation_id), reason)
        request = _decode(frame, api_key, version)
        return self._evaluate(request.auth_bytes, now_ms, (version, correlation_id))

    def _authenticated_request(self, frame: bytes, now_ms: int) -> Decision:
        api_key, _, _ = _peek(frame)
        if api_key == ApiKey.SASL_HANDSHAKE and self._may_reauthenticate(now_ms):
            self._last_reauth_start_ms = now_ms
            self._reauthenticating = True
            self.state = SaslState.HANDSHAKE_REQUEST
            return self._handshake_stage(frame)
        if self.session_expiry_ms is not None and now_ms >= self.session_expiry_ms:
            return Refuse(
                None,
                f"the session expired and the client sent {_api_name(api_key)} instead of"
                " re-authenticating (connections.max.reauth.ms)",
            )
        return Dispatch()

    def _may_reauthenticate(self, now_ms: int) -> bool:
        if self.session_expiry_ms is None:
            return False
        last = self._last_reauth_start_ms
        return last is None or now_ms - last >= MIN_REAUTH_INTERVAL_MS

    def _handshake_stage(self, frame: bytes) -> Decision:
        try:
            api_key, version, correlation_id = _peek(frame)
        except _Failure:
            if self.state is SaslState.INITIAL_REQUEST:
                raise _Failure(None, _NOT_KAFKA) from None
            raise
        if api_key not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
            reason = f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake."
            if self.state is SaslState.INITIAL_REQUEST:
                reason = f"{_NOT_KAFKA} ({reason})"
            return Refuse(None, reason)
        if api_key == ApiKey.API_VERSIONS:
            if self._reauthenticating or self.state is SaslState.HANDSHAKE_REQUEST:
                return Refuse(
                    None, f"Unexpected ApiVersions request in SASL state {self.state.name}"
                )
            # An ApiVersions version we do not speak gets UNSUPPORTED_VERSION from the
            # broker and the client may ask again; a good one ends this stage.
            supported = is_supported(api_key, version)
            self.state = (
                SaslState.HANDSHAKE_REQUEST
                if supported
                else SaslState.HANDSHAKE_OR_VERSIONS_REQUEST
            )
            return Dispatch()
        request = _decode(frame, api_key, version)
        mechanism = request.mechanism
        offered = list(self._mechanisms)
        if mechanism not in self._mechanisms:
            reply = _encode(
                api_key,
                version,
                correlation_id,
                {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": offered},
            )
            return Refuse(reply, f"Unsupported SASL mechanism {mechanism}")
        reply = _encode(
            api_key, version, correlation_id, {"error_code": ErrorCode.none, "mechanisms": offered}
        )
        self._framed = version >= 1
        if self._reauthenticating and mechanism != self._mechanism_name:
            self._bad_mechanism_message = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._mechanism_name}'"
            )
            self.state = SaslState.REAUTH_BAD_MECHANISM
            return Send(reply)
        self._mechanism_name = mechanism
        self._exchange = self._mechanisms[mechanism]()
        self.state = SaslState.AUTHENTICATE
        return Send(reply)

    def _evaluate(self, token: bytes, now_ms: int, framing: tuple[int, int] | None) -> Decision:
        """Feed one token to the mechanism. ``framing``: (SaslAuthenticate version,
        correlation id) to answer in; None for bare legacy tokens."""
        exchange, mechanism = self._exchange, self._mechanism_name
        assert exchange is not None and mechanism is not None
        try:
            answer = exchange.evaluate(token)
            principal = (
                KafkaPrincipal.user(exchange.authorization_id) if exchange.complete else None
            )
            if principal is not None and self._reauthenticating and principal != self.principal:
                raise AuthenticationFailed(
                    "Cannot change principals during re-authentication from "
                    f"{_dotted(self.principal)}: {_dotted(principal)}"
                )
        except AuthenticationFailed as exc:
            raise _Failure(_auth_failure_reply(framing, str(exc)), str(exc)) from None
        except InvalidCredentials as exc:
            stage = "re-authentication" if self._reauthenticating else "authentication"
            message = (
                f"Authentication failed during {stage} due to invalid credentials with SASL "
                f"mechanism {mechanism}"
            )
            raise _Failure(_auth_failure_reply(framing, message), f"{message}: {exc}") from None
        lifetime_ms = self._reauth_ms.get(mechanism, 0) if principal is not None else 0
        if framing is None:
            reply = len(answer).to_bytes(4, "big") + answer
        else:
            version, correlation_id = framing
            body = {
                "error_code": ErrorCode.none,
                "error_message": None,
                "auth_bytes": answer,
                "session_lifetime": max(lifetime_ms, 0),
            }
            reply = _encode(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body)
        if principal is None:
            return Send(reply)
        self.state = SaslState.COMPLETE
        self.principal = principal
        self._exchange = None
        self._reauthenticating = False
        self.session_expiry_ms = now_ms + lifetime_ms if lifetime_ms > 0 else None
        return Authenticated(reply, principal, mechanism, self.session_expiry_ms)


_NOT_KAFKA = (
    "Invalid request, potential reasons: kafka client configured with the wrong security "
    "protocol, it does not support KIP-43 or it is not a kafka client."
)


class _Failure(Exception):
    """Ends authentication: ``frame`` (if any) is sent, then the connection closes."""

    def __init__(self, frame: bytes | None, reason: str) -> None:
        super().__init__(reason)
        self.frame = frame
        self.reason = reason


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api key {api_key}"


def _dotted(principal: KafkaPrincipal | None) -> str:
    return "none" if principal is None else f"{principal.type}.{principal.name}"


def _peek(frame: bytes) -> tuple[int, int, int]:
    try:
        return codec.peek_api(frame)
    except codec.MalformedRequest as exc:
        raise _Failure(None, str(exc)) from None


def _decode(frame: bytes, api_key: int, version: int) -> Any:
    if not is_supported(api_key, version):
        raise _Failure(None, f"Version {version} is not supported for {_api_name(api_key)}")
    try:
        return codec.decode_request(frame, codec.api_codec(api_key, version))[1]
    except codec.MalformedRequest as exc:
        raise _Failure(None, f"malformed {_api_name(api_key)} v{version} request: {exc}") from None


def _encode(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    return codec.encode_response(correlation_id, codec.api_codec(api_key, version), body)


def _auth_failure_reply(framing: tuple[int, int] | None, message: str) -> bytes | None:
    if framing is None:
        return None  # bare tokens have no way to carry an error
    version, correlation_id = framing
    body = {
        "error_code": ErrorCode.sasl_authentication_failed,
        "error_message": message,
        "auth_bytes": b"",
    }
    return _encode(ApiKey.SASL_AUTHENTICATE, version, correlation_id, body)


def _illegal_state_reply(api_key: int, version: int, correlation_id: int) -> bytes | None:
    """That request's response carrying ILLEGAL_SASL_STATE, if the API and version are
    ours and the response has a top-level error field."""
    if not is_supported(api_key, version):
        return None
    return codec.encode_error_response(
        correlation_id, codec.api_codec(api_key, version), ErrorCode.illegal_sasl_state
    )
