"""A kafka-python request whose answer is decoded by kdiag's own reader (and, optionally, whose body kdiag encodes).

kafka-python's generated codecs make an object for every field of every partition: 2.5 us each, seconds a fetch at
100,000 partitions. Its parser asks the in-flight request header for its answer's class, so a request handed through
`ReadBy` names a class that hands the answer's body to a plain function; the client's connections, SASL, TLS and
timeouts stay kafka-python's. A cut or malformed answer must raise ValueError, which kafka-python's parser turns into
its protocol error (the request fails).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

_FRAME = struct.Struct(">i")


class _Answer:
    """What kafka-python's parser asks of a response class: read the header, then decode the body into the value."""

    def __init__(self, response_class: Any, decode: Callable[[bytes], Any]):
        self._response_class = response_class
        self._decode = decode

    def parse_header(self, buffer: Any) -> Any:
        return self._response_class.parse_header(buffer)

    def decode(self, buffer: Any) -> Any:
        return self._decode(buffer.read())


class _Header:
    """The request's header as kafka-python keeps it in flight, naming _Answer as its answer's class."""

    def __init__(self, header: Any, decode: Callable[[bytes], Any]):
        self._header = header
        self._decode = decode

    def __getattr__(self, name: str) -> Any:
        return getattr(self._header, name)

    def get_response_class(self) -> _Answer:
        return _Answer(self._header.get_response_class(), self._decode)


class ReadBy:
    """A request of a versioned kafka-python class (its API version fixed, so the connection writes nothing on it)
    whose answer arrives as decode(body); with `body`, those bytes are sent after its header instead of its encoding."""

    def __init__(self, request: Any, version: int, decode: Callable[[bytes], Any], body: bytes | None = None):
        if version != request.API_VERSION:
            raise ValueError(f"a {type(request).__name__} v{version} request, not v{request.API_VERSION}")
        self._request = request
        self._decode = decode
        self._body = body
        self.header: _Header | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)

    def __str__(self) -> str:
        return str(self._request)

    def with_header(self, **header: Any) -> None:
        """Give the request its header (the connection's correlation id and client id)."""
        self._request.with_header(**header)
        self.header = _Header(self._request.header, self._decode)

    def encode(self, framed: bool = False, header: bool = False) -> bytes:
        """The request's bytes: kafka-python's encoding, or its header and the body given."""
        if self._body is None:
            return bytes(self._request.encode(framed=framed, header=header))
        data = (bytes(self._request.encode_header(flexible=self._request.flexible_version_q(self._request.API_VERSION)))
                if header else b"") + self._body
        return _FRAME.pack(len(data)) + data if framed else data
