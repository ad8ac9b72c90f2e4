"""An HTTPS proxy in front of the real API server that loses answers after the server acted on the request.

A write whose answer is lost (a read timeout, a connection reset after the request was sent, a 504 from a proxy) has
an unknown outcome: the client cannot tell whether it landed. `AnswerLosingProxy` forwards every request and, for the
ones a test picks (`lose`), lets the server act and keeps its answer from the client: held until the client's
request timeout passes (`hold`), the connection closed (`close`), or a 504 in its place (`504`); `unsent` closes the
connection without forwarding (the request never arrived, and the client cannot tell that either); `unserved`
answers in its place, unforwarded, what an API server just started answers for a CRD's group until its CRD informer
has synced: 404 and a plain "404 page not found" (no Status); `unready`, what its /readyz answers meanwhile: 500 and
the checks, one failed; `busy`, what an API server over its max-in-flight answers: 429, Retry-After: 1; `page`, what
a proxy between answers in the server's place (200, its sign-in page); `cut`, an answer cut short. `halt_at`
halts the host, as SIGSTOP does (the kernel still takes requests in; the server reads and acts on them only once it runs
again): every request from then on is held, unanswered, until `resume()`, then forwarded (it lands) and its answer
lost (its client gave up long before). Every request's arrival is noted (`arrived`). It terminates TLS
with the API server's own self-signed certificate (valid for 127.0.0.1 on any port), so clients trust it as they trust
the server, and it sees each request's method and path.
"""
from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .kube import KubeApiserver

TEXT = [("Content-Type", "text/plain; charset=utf-8")]
# the answers given in place of the server's, unforwarded: (HTTP status, headers, body)
CANNED = {"unserved": (404, TEXT, b"404 page not found\n"),
          "unready": (500, TEXT, b"[+]ping ok\n[+]etcd ok\n[-]poststarthook/crd-informer-synced failed: reason "
                                 b"withheld\nreadyz check failed\n"),
          "busy": (429, [("Content-Type", "application/json"), ("Retry-After", "1")], json.dumps({
              "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429, "reason": "TooManyRequests",
              "message": "Too many requests, please try again later.", "details": {"retryAfterSeconds": 1}}).encode()),
          "page": (200, [("Content-Type", "text/html")], b"<html><body>Sign in to continue</body></html>\n"),
          "cut": (200, [("Content-Type", "application/json")], b'{"kind":"Namespace","metadata":{"na')}
HOW = ("hold", "close", "504", "unsent", *CANNED)


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
    arrived: list[tuple[float, str, str]] = field(default_factory=list)  # (time.monotonic(), method, path) of each
    _rules: list[_Rule] = field(default_factory=list, repr=False)
    _halt_at: tuple[str, str] | None = field(default=None, repr=False)
    _halted: bool = field(default=False, repr=False)
    _resumed: threading.Event = field(default_factory=threading.Event, repr=False)
    _held: int = field(default=0, repr=False)  # requests held while halted, not yet forwarded
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

    def halt_at(self, method: str, part: str) -> None:
        """The host halts at the next request `method` whose path holds `part` ("/workloads/": any Workload's): that
        request and every one after it are held until resume()."""
        with self._lock:
            self._halt_at, self._halted = (method, part), False
            self._resumed.clear()

    def resume(self, timeout: float = 30.0) -> None:
        """The host runs again: the requests held are forwarded (they land) and their answers lost; returns once
        they have been acted on."""
        with self._lock:
            self._halt_at, self._halted = None, False
        self._resumed.set()
        end = time.monotonic() + timeout
        while self._held and time.monotonic() < end:
            time.sleep(0.05)
        assert not self._held, f"{self._held} held requests not forwarded after {timeout} s"

    def _halts(self, method: str, path: str) -> bool:
        """The host is halted (or halts at this request): the request is held."""
        with self._lock:
            if self._halt_at is not None and method == self._halt_at[0] and self._halt_at[1] in path.split("?")[0]:
                self._halted = True
            if self._halted:
                self._held += 1
            return self._halted

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
                proxy.arrived.append((time.monotonic(), self.command, self.path))
                if proxy._halts(self.command, self.path):
                    proxy._resumed.wait()
                    try:
                        if not proxy._stopped.is_set():
                            self._send(body)  # it lands; the client has long given up on its answer
                            proxy.lost.append((self.command, self.path, "halted"))
                    finally:
                        with proxy._lock:
                            proxy._held -= 1
                    self.close_connection = True
                    return
                rule = proxy._picked(self.command, self.path)
                if rule is not None and rule.meanwhile is not None:
                    rule.meanwhile()
                if rule is not None and rule.how == "unsent":
                    proxy.lost.append((self.command, self.path, rule.how))
                    self.close_connection = True
                    return
                if rule is not None and rule.how in CANNED:
                    proxy.lost.append((self.command, self.path, rule.how))
                    self._answer(*CANNED[rule.how])
                    return
                status, headers, data = self._send(body)
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
                self._answer(status, headers, data)

            def _send(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                """The request, to the API server: its answer."""
                connection = http.client.HTTPSConnection("127.0.0.1", upstream.port, context=client_side, timeout=30)
                try:
                    connection.request(self.command, self.path, body, headers={
                        k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")})
                    answer = connection.getresponse()
                    return answer.status, answer.getheaders(), answer.read()
                finally:
                    connection.close()

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
        self._resumed.set()  # what is held goes unsent
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
