"""A real S3-compatible server for the tests: moto's threaded server on 127.0.0.1, started inside
the test session and stopped with it; the standard AWS environment variables point clients at it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from datareel.testing import free_port


@contextmanager
def s3_server() -> Iterator[str]:
    """Run the server; yields its endpoint URL with AWS_* set for this process (and its children)."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ENV}
    os.environ.update({**ENV, "AWS_ENDPOINT_URL": endpoint})
    try:
        yield endpoint
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": "",
}


def make_bucket(name: str) -> None:
    import boto3

    boto3.client("s3").create_bucket(Bucket=name)


class FaultyProxy:
    """An HTTP proxy in front of the server that breaks ranged GETs on purpose.

    ``fail_first``: answer the first N ranged GETs with ``status`` (503 by default) instead of
    forwarding them (``fail_only``: only ranged GETs whose path holds that text, counted in
    ``failed``); ``drop_first``: forward the next N ranged GETs but close the connection halfway
    through the body; ``delay``: hold each ranged GET that long before forwarding it. Every other
    request passes through unchanged; ``ranged_gets`` counts them all, ``max_in_flight`` the most
    ranged GETs served at one time.
    """

    def __init__(
        self,
        upstream: str,
        *,
        fail_first: int = 0,
        status: int = 503,
        drop_first: int = 0,
        delay: float = 0.0,
        fail_only: str | None = None,
    ):
        import http.client
        import http.server
        import threading
        import time
        from urllib.parse import urlsplit

        self.fail_first, self.status, self.drop_first, self.ranged_gets = fail_first, status, drop_first, 0
        self.delay, self.in_flight, self.max_in_flight = delay, 0, 0
        self.fail_only, self.failed = fail_only, 0
        lock = threading.Lock()
        target = urlsplit(upstream)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                ranged = self.command == "GET" and "Range" in self.headers
                if ranged:
                    with lock:
                        proxy.ranged_gets += 1
                        fail = proxy.fail_first > 0 and (proxy.fail_only is None or proxy.fail_only in self.path)
                        proxy.fail_first -= fail
                        proxy.failed += fail
                        drop = not fail and proxy.drop_first > 0
                        proxy.drop_first -= drop
                    if fail:
                        self.send_response(proxy.status)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    with lock:
                        proxy.in_flight += 1
                        proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                    time.sleep(proxy.delay)
                    with lock:
                        proxy.in_flight -= 1
                upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = target.netloc
                upstream_conn.request(self.command, self.path, body=body or None, headers=headers)
                reply = upstream_conn.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                length = reply.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))  # a HEAD's is the object's size
                self.end_headers()
                if self.command == "HEAD":
                    return
                if ranged and drop and len(data) > 1:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the connection drops mid-body
                    return
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        class Server(http.server.ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                import sys

                if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):  # a client gave up, say
                    super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class StalledServer:
    """A TCP server on 127.0.0.1 that accepts every connection, reads the request sent on it, and never
    answers (a store that hangs). ``connections`` and ``requests`` count what it received; :meth:`close`
    drops every connection and stops it (also as a context manager)."""

    def __init__(self) -> None:
        import socket
        import threading

        self.connections = self.requests = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._held: dict[socket.socket, bool] = {}  # open connection -> whether a request came in on it
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import select

        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                conn = None
            except OSError:
                return
            with self._lock:
                if conn is not None:
                    conn.setblocking(False)
                    self.connections += 1
                    self._held[conn] = False
                held = list(self._held)
            for sock in select.select(held, [], [], 0)[0] if held else []:
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                with self._lock:
                    if not data:  # the client gave up and closed it
                        del self._held[sock]
                        sock.close()
                    elif not self._held[sock]:  # a client sends one request and waits for its answer
                        self._held[sock] = True
                        self.requests += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._listener.close()
        with self._lock:
            for sock in self._held:
                sock.close()
            self._held.clear()

    def __enter__(self) -> StalledServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def upload(local: Path, url: str) -> None:
    """Copy a local file or directory tree to ``url`` (s3://bucket/prefix)."""
    import boto3

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client = boto3.client("s3")
    files = [local] if local.is_file() else sorted(p for p in local.rglob("*") if p.is_file())
    for path in files:
        key = f"{prefix}/{path.relative_to(local.parent if local.is_file() else local).as_posix()}".lstrip("/")
        client.upload_file(str(path), bucket, key)
