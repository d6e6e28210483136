"""Bundles from a URL: streamed with requests, resumed with Range after a drop."""

from __future__ import annotations

import io
from typing import Any

import requests

from repro.errors import InputError

CHUNK = 1 << 20


class ResumableHTTPStream(io.RawIOBase):
    """A read-only stream of a URL's body that reconnects where it left off.

    When the connection drops mid-body, the next read asks again with
    `Range: bytes=<position>-` (at most `retries` times in a row); a server that
    ignores Range (answers 200) or whose ETag changed is an error, not a silent
    restart from byte 0, and so is a 206 whose ETag or total length is not the first
    response's (the tail of another file).
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
        if self.position and response.status_code != 206:
            response.close()
            raise InputError(
                f"{self.url}: the server did not resume at byte {self.position} "
                f"(HTTP {response.status_code})",
                hint="download the bundle with curl -C - and unpack the file",
            )
        if not self.position and response.status_code != 200:
            response.close()
            raise InputError(f"{self.url}: HTTP {response.status_code}")
        self._refuse_another_file(response)
        self._etag = self._etag or response.headers.get("ETag")
        self._response = response
        self._length = self._length if self.position else self._expected_length(response)
        self._body = response.raw

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
