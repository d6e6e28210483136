"""Bundles from a URL: streamed with requests, resumed with Range after a drop."""

from __future__ import annotations

import io
import re
from typing import Any

import requests

from repro.errors import InputError

CHUNK = 1 << 20
# RFC 9110 14.4: "bytes" SP first-pos "-" last-pos "/" ( complete-length / "*" )
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class ResumableHTTPStream(io.RawIOBase):
    """A read-only stream of a URL's body that reconnects where it left off.

    When the connection drops mid-body, the next read asks again with
    `Range: bytes=<position>-` (at most `retries` times in a row). A 206 must say, in
    a well-formed `Content-Range`, that it starts at exactly that byte, and its ETag
    and total length must be the first response's: anything else (a server that
    answers `bytes 0-...`, the tail of another file) is refused at once, never spliced
    in. A 200 (a server that ignores Range) is the whole file again: taken only when
    its ETag and length are the first response's, its first <position> bytes skipped.
    """

    def __init__(
        self,
        url: str,
        *,
        session: requests.Session | None = None,
        retries: int = 5,
        timeout: float = 60,
    ) -> None:
        super().__init__()
        self.url = url
        self.session = session or requests.Session()
        self.retries = retries
        self.timeout = timeout
        self.position = 0
        self.resumes = 0
        self._etag: str | None = None
        self._length: int | None = None  # the whole file's, from the first response
        self._response: requests.Response | None = None
        self._body: Any = None
        self._skip = 0  # bytes of a 200's body (the whole file again) already delivered
        self._open()

    def _open(self) -> None:
        headers = {"Accept-Encoding": "identity"}
        if self.position:
            headers["Range"] = f"bytes={self.position}-"
            if self._etag:
                headers["If-Range"] = self._etag
        try:
            response = self.session.get(
                self.url, headers=headers, stream=True, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise InputError(f"{self.url}: cannot download: {exc}") from exc
        restart = self.position and response.status_code == 200
        if self.position and response.status_code != 206 and not restart:
            response.close()
            raise InputError(
                f"{self.url}: the server did not resume at byte {self.position} "
                f"(HTTP {response.status_code})",
                hint="download the bundle with curl -C - and unpack the file",
            )
        if not self.position and response.status_code != 200:
            response.close()
            raise InputError(f"{self.url}: HTTP {response.status_code}")
        if restart:
            self._refuse_unknown_restart(response)
        elif self.position:
            self._refuse_misplaced_range(response)
        self._refuse_another_file(response)
        self._etag = self._etag or response.headers.get("ETag")
        self._response = response
        self._length = self._length if self.position else self._expected_length(response)
        self._body = response.raw
        self._skip = self.position if restart else 0

    def _refuse_misplaced_range(self, response: requests.Response) -> None:
        """A 206 must start at the byte asked for: a `bytes 0-...` spliced in at the
        resume offset would repeat the file's start (refused only much later, by a tar
        checksum, or never for a member the manifest does not cover)."""
        content_range = response.headers.get("Content-Range", "")
        match = _CONTENT_RANGE.fullmatch(content_range.strip())
        problem = None
        if match is None:
            problem = "a Content-Range that is not 'bytes FIRST-LAST/LENGTH'"
        else:
            first, last, total = int(match[1]), int(match[2]), match[3]
            length = response.headers.get("Content-Length")
            if first != self.position:
                problem = f"bytes from {first}, not from the {self.position} asked for"
            elif last < first or (total != "*" and last >= int(total)):
                problem = "a Content-Range whose last byte is not inside the file"
            elif length is not None and length.isdigit() and int(length) != last - first + 1:
                problem = f"a Content-Length of {length} for {last - first + 1} bytes"
        if problem is None:
            return
        response.close()
        raise InputError(
            f"{self.url}: the server answered a resume at byte {self.position} with "
            f"{problem} (Content-Range: {content_range!r}): refused",
            hint="download the bundle with curl -C - and unpack the file",
        )

    def _refuse_unknown_restart(self, response: requests.Response) -> None:
        """A 200 to a Range request is the whole file again: the same file only when
        its length (and ETag, when either response gave one) are the first's."""
        length = self._expected_length(response)
        etag = response.headers.get("ETag")
        if self._length is not None and length == self._length and etag == self._etag:
            return
        response.close()
        raise InputError(
            f"{self.url}: the server did not resume at byte {self.position} (HTTP 200 of "
            f"{length if length is not None else 'an unknown number of'} bytes, ETag {etag}; "
            f"the first answer was {self._length} bytes, ETag {self._etag})",
            hint="download the bundle with curl -C - and unpack the file",
        )

    def _refuse_another_file(self, response: requests.Response) -> None:
        """A 206 whose ETag or total length is not the first response's is the tail
        of another file (a server that ignores If-Range, a file replaced in place)."""
        if not self.position:
            return
        etag = response.headers.get("ETag")
        length = self._expected_length(response)
        if self._etag and etag and etag != self._etag:
            changed = f"ETag {self._etag}, now {etag}"
        elif self._length is not None and length is not None and length != self._length:
            changed = f"{self._length} bytes, now {length}"
        else:
            return
        response.close()
        raise InputError(
            f"{self.url}: the file changed while it was downloaded: {changed} "
            f"(at byte {self.position})",
            hint="download the bundle again",
        )

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        attempts = 0
        while True:
            try:
                data = self._body.read(min(len(buffer), CHUNK))
            except (requests.RequestException, OSError, Exception) as exc:
                data = None
                error: Exception | None = exc
            else:
                error = None
            if data and self._skip:
                # the whole file again (a 200): its bytes already delivered are dropped
                dropped = min(self._skip, len(data))
                self._skip -= dropped
                data = data[dropped:]
                if not data:
                    continue
            if data:
                count = len(data)
                buffer[:count] = data
                self.position += count
                return count
            expected = self._expected_length(self._response)
            if error is None and (expected is None or self.position >= expected):
                return 0
            attempts += 1
            if attempts > self.retries:
                raise InputError(
                    f"{self.url}: connection dropped at byte {self.position} "
                    f"{attempts - 1} times in a row"
                ) from error
            self.resumes += 1
            if self._response is not None:
                self._response.close()
            self._open()

    @staticmethod
    def _expected_length(response: requests.Response | None) -> int | None:
        """The whole file's length as `response` gives it."""
        if response is None:
            return None
        if response.status_code == 206:
            content_range = response.headers.get("Content-Range", "")
            total = content_range.rpartition("/")[2]
            return int(total) if total.isdigit() else None
        length = response.headers.get("Content-Length")
        return int(length) if length and length.isdigit() else None

    def close(self) -> None:
        if self._response is not None:
            self._response.close()
        super().close()
