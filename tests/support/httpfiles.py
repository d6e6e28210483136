"""Real HTTP servers on 127.0.0.1 (http.server in a thread): `directory_server`, a
directory served as it is (a PEP 503 index, a folder of bundles), and `file_server`, one
file whose misbehaviour tests choose: a connection that drops mid-body, Range ignored,
If-Range ignored, the file replaced between requests (the URL tests of unpack, test_fetch).
"""

from __future__ import annotations

import functools
import http.server
import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PATH = "/b.tar"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def directory_server(root: Path) -> Iterator[str]:
    """`root` served by http.server's own file handler: its URL, `http://127.0.0.1:PORT`."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@dataclass(frozen=True)
class Version:
    """The file as the server has it for a request: its bytes and its ETag."""

    body: bytes
    etag: str | None = '"v1"'


@dataclass
class FileServer:
    """The file's URL, and each request's headers in the order they came."""

    url: str
    requests: list[dict[str, str]] = field(default_factory=list)

    @property
    def ranges(self) -> list[str | None]:
        return [r.get("Range") for r in self.requests]


@contextmanager
def file_server(
    versions: Sequence[Version],
    *,
    drop_after: Mapping[int, int] | None = None,
    honour_range: bool = True,
    honour_if_range: bool = True,
    serve_from: Callable[[int], int] | None = None,
    content_range: str | None = None,
) -> Iterator[FileServer]:
    """Serve one file at PATH (any other path is a 404). Request i gets versions[i]
    (the last one from then on); `drop_after[i]` bytes of request i's body are sent
    before its connection is shut. A Range request gets 206 from the asked byte unless
    `honour_range` is off, or `honour_if_range` is on and its If-Range is not the
    current ETag (then 200 and the whole file, as RFC 9110 says). A server that
    resumes wrongly: `serve_from` maps the byte asked for to the one its 206 starts at
    (its Content-Range says so), `content_range` replaces that header's value."""
    drops = dict(drop_after or {})
    served = FileServer("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            number = len(served.requests)
            served.requests.append(dict(self.headers))
            if self.path != PATH:
                self.send_error(404)
                return
            version = versions[min(number, len(versions) - 1)]
            body = version.body
            asked = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            stale = honour_if_range and if_range is not None and if_range != version.etag
            partial = asked is not None and honour_range and not stale
            start = int(asked.removeprefix("bytes=").rstrip("-")) if partial and asked else 0
            if partial and serve_from is not None:
                start = serve_from(start)
            if partial:
                self.send_response(206)
                honest = f"bytes {start}-{len(body) - 1}/{len(body)}"
                self.send_header("Content-Range", content_range or honest)
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            if version.etag is not None:
                self.send_header("ETag", version.etag)
            self.end_headers()
            cut = drops.get(number)
            if cut is None:
                self.wfile.write(body[start:])
                return
            self.wfile.write(body[start : start + cut])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}{PATH}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
