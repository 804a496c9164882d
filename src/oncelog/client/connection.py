"""A small blocking Kafka-protocol client for oncelog's admin tools and tests.

It sends one request at a time and picks, for each API, the highest version both sides
support. It is not a producer or consumer: those are confluent-kafka's job.
"""

from __future__ import annotations

import socket
from typing import Any

from oncelog.protocol import codec
from oncelog.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey


class ProtocolClientError(Exception):
    """The broker could not be reached or answered something unreadable."""


class KafkaConnection:
    """One blocking connection to one broker: requests go one at a time, each at the
    highest version both sides support (ApiVersions is asked once, on connect)."""

    def __init__(
        self, bootstrap: str, *, client_id: str = "oncelog-cli", timeout_s: float = 10.0
    ) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        if not port.isdigit():
            raise ProtocolClientError(f"{bootstrap!r} is not HOST:PORT")
        self.client_id = client_id
        try:
            self._sock = socket.create_connection(
                (host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s
            )
        except OSError as exc:
            raise ProtocolClientError(f"cannot connect to {bootstrap}: {exc}") from exc
        self._correlation_id = 0
        self._broker_versions = self._negotiate()

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> KafkaConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version_for(self, api_key: int) -> int:
        ours = SUPPORTED_VERSIONS.get(api_key, (0, 0))
        theirs = self._broker_versions.get(api_key)
        if theirs is None:
            raise ProtocolClientError(f"the broker does not support {ApiKey(api_key).name}")
        version = min(ours[1], theirs[1])
        if version < max(ours[0], theirs[0]):
            raise ProtocolClientError(f"no common version of {ApiKey(api_key).name}")
        return version

    def request(self, api_key: int, body: dict[str, Any], version: int | None = None) -> Any:
        """Send one request and return the decoded response entity."""
        api = codec.api_codec(api_key, self.version_for(api_key) if version is None else version)
        _, response = codec.decode_response(api, self.exchange(api, body))
        return response

    def exchange(self, api: codec.ApiCodec, body: dict[str, Any]) -> bytes:
        """Send one request and return its response frame undecoded (its correlation id
        checked): for the responses kio cannot read, see
        :mod:`oncelog.protocol.describe_transactions`."""
        name = ApiKey(api.request_type.__api_key__).name
        self._correlation_id += 1
        try:
            self.send_raw(codec.encode_request(api, self._correlation_id, self.client_id, body))
            frame = self.receive_frame()
        except OSError as exc:  # timeouts and resets: the caller sees one error type
            raise ProtocolClientError(f"{name} request failed: {exc}") from exc
        answered = int.from_bytes(frame[:4], "big", signed=True)
        if answered != self._correlation_id:
            raise ProtocolClientError(
                f"{name}: response correlation id {answered}, expected {self._correlation_id}"
            )
        return frame

    def send_raw(self, data: bytes) -> None:
        self._sock.sendall(data)

    def receive_frame(self) -> bytes:
        size = int.from_bytes(self._receive_exactly(4), "big")
        return self._receive_exactly(size)

    def _receive_exactly(self, count: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < count:
            chunk = self._sock.recv(count - len(chunks))
            if not chunk:
                raise ProtocolClientError("the broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def _negotiate(self) -> dict[int, tuple[int, int]]:
        response = self.request(
            ApiKey.API_VERSIONS,
            {"client_software_name": "oncelog", "client_software_version": "0"},
            version=3,
        )
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
