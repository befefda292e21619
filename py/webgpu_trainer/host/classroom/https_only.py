"""Plain http on the classroom's HTTPS port: a student who types ``192.168.1.5:8443`` gets
``http://`` from the browser, which a TLS server can only drop ("empty response"). Here each
connection's first byte decides: a TLS handshake (0x16) goes on to uvicorn's protocol over
TLS (asyncio's own SSLProtocol, as ``loop.start_tls`` makes it); anything else is answered
with a redirect to the same address over https and a sentence saying so, then closed.

``server(config)`` makes a ``uvicorn.Server`` that serves that way (one process;
``--workers`` keeps uvicorn's own TLS, without the redirect).
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import re

TLS_HANDSHAKE = 0x16
SILENT_S = 20.0  # a connection that sends no first bytes (or no request head) is closed
_HOST = re.compile(r"^[A-Za-z0-9.\-:\[\]]{1,300}$")


def redirect(request_head: bytes, port: int) -> bytes:
    """The answer to a plain http request: 301 to ``https://`` + its Host (this machine's
    address and ``port`` when it gave none or an odd one) + its path."""
    lines = request_head.split(b"\r\n")
    parts = lines[0].split(b" ")
    path = parts[1].decode("latin-1") if len(parts) == 3 and parts[1][:1] == b"/" else "/"
    path = path if re.fullmatch(r"/[\x21-\x7e]{0,2000}", path) else "/"
    host = next((ln[5:].strip().decode("latin-1") for ln in lines[1:]
                 if ln[:5].lower() == b"host:"), "")
    host = host if _HOST.match(host) else f"127.0.0.1:{port}"
    url = f"https://{host}{path}"
    body = (f"This classroom server speaks HTTPS only: open {url}\n").encode()
    return (f"HTTP/1.1 301 Moved Permanently\r\nLocation: {url}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


class _ClosesWhenSilent(asyncio.Protocol):
    """A connection closed ``SILENT_S`` seconds after it connects unless the timer is cancelled
    (Sniff cancels it on the first bytes; a plain http request is answered sooner)."""

    def connection_made(self, transport):
        self.transport = transport
        self.timer = asyncio.get_running_loop().call_later(SILENT_S, transport.close)

    def connection_lost(self, exc):
        self.timer.cancel()


def sniffing_protocol(inner, ssl_context, port: int):
    """A protocol class that peeks at each connection's first byte: TLS goes to ``inner``
    (uvicorn's HTTP protocol class) over ``ssl_context``, plain http gets ``redirect``."""

    class Sniff(_ClosesWhenSilent):
        def __init__(self, **kwargs):
            self.kwargs, self.transport, self.timer = kwargs, None, None

        def data_received(self, data):
            """The connection's first bytes: hand the connection over, these bytes first."""
            self.timer.cancel()
            if data[0] == TLS_HANDSHAKE:
                # what loop.start_tls builds, fed the ClientHello this protocol already read
                proto = asyncio.sslproto.SSLProtocol(
                    asyncio.get_running_loop(), inner(**self.kwargs), ssl_context, None,
                    server_side=True, ssl_handshake_timeout=20)
            else:
                proto = _Plain(self.transport, port)
            self.transport.set_protocol(proto)
            proto.connection_made(self.transport)
            if isinstance(proto, asyncio.BufferedProtocol):
                buf = proto.get_buffer(len(data))
                buf[:len(data)] = data
                proto.buffer_updated(len(data))
            else:
                proto.data_received(data)

    return Sniff


class _Plain(_ClosesWhenSilent):
    """Reads a plain http request's head (at most 8 KB) and answers with the redirect."""

    def __init__(self, transport, port):
        self.transport, self.port, self.head = transport, port, b""
        self.timer = None

    def data_received(self, data):
        self.head += data
        if b"\r\n\r\n" in self.head or len(self.head) > 8192:
            self.transport.write(redirect(self.head[:8192], self.port))
            self.transport.close()


def server(config):
    """A ``uvicorn.Server`` for ``config`` (with ``ssl_certfile``/``ssl_keyfile``): TLS on
    its port, and plain http requests there redirected to https. ``.run()`` serves."""
    import uvicorn
    config.load()
    ssl_context, config.ssl = config.ssl, None
    config.http_protocol_class = sniffing_protocol(config.http_protocol_class, ssl_context,
                                                   config.port)
    return uvicorn.Server(config)
