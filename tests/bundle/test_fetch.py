"""repro.bundle.fetch against a real HTTP server on 127.0.0.1 (tests/support/httpfiles.py)
that drops the connection mid-body, ignores Range or If-Range, or replaces the file
between requests: a resumed download gives the same bytes, and a body that is not
one file's bytes in order is an error naming the URL, never a silent mix."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence

import pytest
import requests

from repro.bundle.fetch import ResumableHTTPStream
from repro.errors import InputError
from tests.support.httpfiles import PATH, Version, file_server

BODY = hashlib.sha256(b"bundle").digest() * 40_000  # 1.28 MB: several reads
THIRD = len(BODY) // 3
OTHER = bytes(reversed(BODY))  # the same length, other bytes: a file replaced in place


@pytest.fixture
def session() -> Iterator[requests.Session]:
    """A real session that reads no proxy from the environment (127.0.0.1 is local)."""
    with requests.Session() as s:
        s.trust_env = False
        yield s


def _download(url: str, session: requests.Session, retries: int = 5) -> tuple[bytes, int]:
    with ResumableHTTPStream(url, session=session, retries=retries, timeout=10) as stream:
        return stream.read(), stream.resumes


@pytest.mark.parametrize(
    ("drop_after", "resumes", "ranges"),
    [
        ({}, 0, [None]),
        ({0: THIRD}, 1, [None, f"bytes={THIRD}-"]),
        ({0: THIRD, 1: THIRD}, 2, [None, f"bytes={THIRD}-", f"bytes={2 * THIRD}-"]),
        ({0: 0}, 1, [None, None]),  # dropped before the first byte: asked again from 0
        ({1: 0, 0: THIRD}, 2, [None, f"bytes={THIRD}-", f"bytes={THIRD}-"]),
    ],
    ids=["whole", "one-drop", "two-drops", "drop-at-0", "drop-then-empty-resume"],
)
def test_a_dropped_download_resumes_with_range_to_the_same_bytes(
    session: requests.Session, drop_after: dict[int, int], resumes: int, ranges: list[str | None]
) -> None:
    with file_server([Version(BODY)], drop_after=drop_after) as served:
        data, resumed = _download(served.url, session)
    assert hashlib.sha256(data).digest() == hashlib.sha256(BODY).digest()
    assert resumed == resumes
    assert served.ranges == ranges
    # Each resume is conditional on the ETag the first response gave.
    assert [r.get("If-Range") for r in served.requests[1:] if r.get("Range")] == [
        '"v1"' for r in ranges[1:] if r
    ]
    assert all(r["Accept-Encoding"] == "identity" for r in served.requests)


@pytest.mark.parametrize(
    ("versions", "honour_range", "honour_if_range", "refused"),
    [
        # The file changed and the server honours If-Range: 200 and the new file.
        (
            [Version(BODY), Version(OTHER, '"v2"')],
            True,
            True,
            f"server did not resume at byte {THIRD} (HTTP 200 of {len(BODY)} bytes, ETag "
            f'"v2"; the first answer was {len(BODY)} bytes, ETag "v1")',
        ),
        # A server that ignores Range, and whose file grew: 200 of another file.
        (
            [Version(BODY, None), Version(BODY + b"more", None)],
            False,
            True,
            f"server did not resume at byte {THIRD} (HTTP 200 of {len(BODY) + 4} bytes, "
            f"ETag None; the first answer was {len(BODY)} bytes, ETag None)",
        ),
        # The file changed and the server ignores If-Range: 206 of the new file's tail.
        (
            [Version(BODY), Version(OTHER, '"v2"')],
            True,
            False,
            f'file changed while it was downloaded: ETag "v1", now "v2" (at byte {THIRD})',
        ),
        # A longer file under the same (or no) ETag: 206 of bytes that belong to another file.
        (
            [Version(BODY, None), Version(BODY + b"more", None)],
            True,
            True,
            f"file changed while it was downloaded: {len(BODY)} bytes, now {len(BODY) + 4} "
            f"(at byte {THIRD})",
        ),
    ],
    ids=["etag-changed-if-range", "range-ignored-grown", "etag-changed-206", "length-changed"],
)
def test_a_resume_that_would_mix_bytes_is_refused(
    session: requests.Session,
    versions: Sequence[Version],
    honour_range: bool,
    honour_if_range: bool,
    refused: str,
) -> None:
    with (
        file_server(
            versions,
            drop_after={0: THIRD},
            honour_range=honour_range,
            honour_if_range=honour_if_range,
        ) as served,
        pytest.raises(InputError) as caught,
    ):
        _download(served.url, session)
    assert caught.value.message == f"{served.url}: the {refused}"
    assert len(served.requests) == 2  # refused at the first resume, not retried


def test_a_server_that_ignores_range_gives_the_whole_file_again(
    session: requests.Session,
) -> None:
    """A 200 to a resume (Range ignored) of the same file: its first bytes, those
    already read, are skipped; also when it drops again while they are skipped."""
    drops = {0: THIRD, 1: THIRD // 2}
    with file_server([Version(BODY)], drop_after=drops, honour_range=False) as served:
        data, resumed = _download(served.url, session)
    assert hashlib.sha256(data).digest() == hashlib.sha256(BODY).digest()
    assert resumed == 2
    assert served.ranges == [None, f"bytes={THIRD}-", f"bytes={THIRD}-"]


WRONG_RESUMES = [
    # the file's start again, under an honest header: "bytes 0-.../..."
    (lambda asked: 0, None, f"bytes from 0, not from the {THIRD} asked for"),
    (lambda asked: asked - 100, None, f"bytes from {THIRD - 100}, not from the {THIRD}"),
    (lambda asked: asked + 100, None, f"bytes from {THIRD + 100}, not from the {THIRD}"),
    (None, f"bytes {THIRD}-{len(BODY) - 1}", "a Content-Range that is not"),
    (None, "bytes */1280000", "a Content-Range that is not"),
    (None, "pages 1-2/3", "a Content-Range that is not"),
    (None, f"bytes {THIRD}-{len(BODY)}/{len(BODY)}", "last byte is not inside the file"),
    (None, f"bytes {THIRD}-{THIRD - 1}/{len(BODY)}", "last byte is not inside the file"),
    (None, f"bytes {THIRD}-{len(BODY) - 2}/{len(BODY)}", "a Content-Length of"),
    (None, f"bytes {THIRD}-{len(BODY) - 1}/{len(BODY) + 1}", "the file changed"),
]


@pytest.mark.parametrize(
    ("serve_from", "content_range", "refused"),
    WRONG_RESUMES,
    ids=[
        "from-zero",
        "before",
        "after",
        "no-length",
        "unsatisfied-form",
        "other-unit",
        "past-the-end",
        "last-before-first",
        "length-disagrees",
        "other-total",
    ],
)
def test_a_206_that_does_not_start_at_the_asked_byte_is_refused_at_once(
    session: requests.Session,
    serve_from: Callable[[int], int] | None,
    content_range: str | None,
    refused: str,
) -> None:
    with (
        file_server(
            [Version(BODY)],
            drop_after={0: THIRD},
            serve_from=serve_from,
            content_range=content_range,
        ) as served,
        pytest.raises(InputError) as caught,
    ):
        _download(served.url, session)
    assert refused in caught.value.message
    assert caught.value.message.startswith(f"{served.url}: the ")
    assert len(served.requests) == 2  # refused at the first resume, not retried


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_a_connection_that_keeps_dropping_gives_up_after_the_retries(
    session: requests.Session, retries: int
) -> None:
    """The first response brings 1000 bytes, every later one none: `retries` resumes
    without progress, then an error that says where and how often."""
    drops = {0: 1000} | {n: 0 for n in range(1, 10)}
    with (
        file_server([Version(BODY)], drop_after=drops) as served,
        pytest.raises(InputError) as caught,
    ):
        _download(served.url, session, retries=retries)
    assert caught.value.message == (
        f"{served.url}: connection dropped at byte 1000 {retries} times in a row"
    )
    assert served.ranges == [None] + ["bytes=1000-"] * retries


@pytest.mark.parametrize("path", ["/absent.tar", "/b.tar/"], ids=["absent", "trailing-slash"])
def test_an_http_error_names_the_url_and_status(session: requests.Session, path: str) -> None:
    with file_server([Version(BODY)]) as served:
        url = served.url.removesuffix(PATH) + path
        with pytest.raises(InputError) as caught:
            ResumableHTTPStream(url, session=session, timeout=10)
    assert str(caught.value) == f"{url}: HTTP 404"


def test_a_server_that_is_not_there_is_an_error_naming_the_url(
    session: requests.Session,
) -> None:
    with file_server([Version(BODY)]) as served:
        url = served.url
    # The server is shut and its port closed: the connection is refused.
    with pytest.raises(InputError) as caught:
        ResumableHTTPStream(url, session=session, timeout=10)
    assert str(caught.value).startswith(f"{url}: cannot download: ")
