"""An HTTPS proxy in front of the real API server that loses answers after the server acted on the request.

A write whose answer is lost (a read timeout, a connection reset after the request was sent, a 504 from a proxy) has
an unknown outcome: the client cannot tell whether it landed. `AnswerLosingProxy` forwards every request and, for the
ones a test picks (`lose`), lets the server act and keeps its answer from the client: held until the client's
request timeout passes (`hold`), the connection closed (`close`), or a 504 in its place (`504`); `unsent` closes the
connection without forwarding (the request never arrived, and the client cannot tell that either). It terminates TLS
with the API server's own self-signed certificate (valid for 127.0.0.1 on any port), so clients trust it as they trust
the server, and it sees each request's method and path.
"""
from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .kube import KubeApiserver

HOW = ("hold", "close", "504", "unsent")


@dataclass
class _Rule:
    method: str
    path: str                         # a request whose path (without the query) ends with this
    how: str
    times: int
    meanwhile: Callable[[], object] | None  # run before the request is forwarded (or not): someone else's write


@dataclass
class AnswerLosingProxy:
    upstream: KubeApiserver
    hold_seconds: float = 30.0        # `hold`: how long the answer is held before the connection is closed
    lost: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, how) of each answer lost
    _rules: list[_Rule] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stopped: threading.Event = field(default_factory=threading.Event, repr=False)
    _server: ThreadingHTTPServer | None = field(default=None, repr=False)

    @property
    def host(self) -> str:
        assert self._server is not None, "start() first"
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def lose(self, method: str, path: str, how: str = "hold", times: int = 1,
             meanwhile: Callable[[], object] | None = None) -> None:
        """Lose the answer to the next `times` requests `method` ... `path` (the end of the request's path)."""
        assert how in HOW, how
        with self._lock:
            self._rules.append(_Rule(method, path, how, times, meanwhile))

    def _picked(self, method: str, path: str) -> _Rule | None:
        with self._lock:
            for rule in self._rules:
                if rule.times > 0 and rule.method == method and path.split("?")[0].endswith(rule.path):
                    rule.times -= 1
                    return rule
        return None

    def start(self) -> AnswerLosingProxy:
        proxy, upstream = self, self.upstream
        client_side = ssl.create_default_context(cafile=str(upstream.ca_file))
        server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_side.load_cert_chain(upstream.cert_dir / "apiserver.crt", upstream.cert_dir / "apiserver.key")

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                rule = proxy._picked(self.command, self.path)
                if rule is not None and rule.meanwhile is not None:
                    rule.meanwhile()
                if rule is not None and rule.how == "unsent":
                    proxy.lost.append((self.command, self.path, rule.how))
                    self.close_connection = True
                    return
                connection = http.client.HTTPSConnection("127.0.0.1", upstream.port, context=client_side, timeout=30)
                try:
                    connection.request(self.command, self.path, body, headers={
                        k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")})
                    answer = connection.getresponse()
                    data = answer.read()
                finally:
                    connection.close()
                if rule is not None:
                    proxy.lost.append((self.command, self.path, rule.how))
                    if rule.how == "504":
                        data = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 504,
                                           "reason": "Timeout", "message": "the proxy's upstream timed out"}).encode()
                        self._answer(504, [("Content-Type", "application/json")], data)
                        return
                    if rule.how == "hold":
                        proxy._stopped.wait(proxy.hold_seconds)
                    self.close_connection = True
                    return
                self._answer(answer.status, answer.getheaders(), data)

            def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = server_side.wrap_socket(server.socket, server_side=True)
        self._server = server
        threading.Thread(target=server.serve_forever, name="answer-losing proxy", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
