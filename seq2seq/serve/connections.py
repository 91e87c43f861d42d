"""The server's HTTP connections: uvicorn's h11 protocol with JSON errors and a deadline on each
request's head (`JsonH11Protocol`, made by `protocol_class`).

uvicorn answers a request h11 cannot parse (a header block over h11's 16 KiB, a bad Content-Length,
a malformed request line) itself, in plain text, before the app sees it. Here that answer is the
app's JSON `{"error": message}`, with h11's status (431 for headers too large, else 400), and the
connection is closed as uvicorn closes it.

uvicorn times out an idle keep-alive connection (`timeout_keep_alive`) but not one that connects and
sends nothing, or sends its head a byte at a time: here a request's head must arrive whole within
`head_timeout_s` of the connection or of the first byte after the previous answer, else the connection
is closed (with a JSON 408 when part of a head had arrived). A body that stops arriving is the app's
to time out (`seq2seq.serve.requests.read_body`, 408).
"""

from __future__ import annotations

import asyncio
import json
import sys
from http import HTTPStatus

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["JsonH11Protocol", "protocol_class"]

LINGER_S = 2.0  # after an error answer, how long the connection drops what the client still sends


def protocol_class(head_timeout_s: float) -> type[JsonH11Protocol]:
    """`JsonH11Protocol` with this head deadline, for `uvicorn.Config(http=...)`."""
    return type("JsonH11Protocol", (JsonH11Protocol,), {"head_timeout_s": head_timeout_s})


class JsonH11Protocol(H11Protocol):
    """uvicorn's h11 protocol whose own error answers are JSON and whose request heads have a deadline."""

    head_timeout_s = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._lingering = False
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._lingering:  # answered and closing: what the client still sends is read and dropped
            return
        if self._between_requests():
            self._head_bytes += len(data)
            if self._head_timer is None:
                self._arm_head_timer()
        super().data_received(data)
        if not self._between_requests():  # the head arrived: the request is the app's now
            self._cancel_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._head_bytes = 0
        super().on_response_complete()  # (arms uvicorn's keep-alive timeout until the next byte)

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this inside its `except h11.RemoteProtocolError:`, so that error is the exception
        being handled (`sys.exception()`), with the status h11 suggests."""
        error = sys.exception()
        status = getattr(error, "error_status_hint", 400)
        if status == 431:
            message = "the request's headers are too large (over 16 KiB together)"
        else:
            message = f"the request is not valid HTTP/1.1 ({error or msg}); nothing was read of it"
        self._answer_and_close(status, message)

    # ---- helpers -----------------------------------------------------------------------------

    def _between_requests(self) -> bool:
        """No request in flight: the next bytes are (part of) a new request's head."""
        return self.cycle is None or self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()  # type: ignore[union-attr]
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._between_requests():
            return
        if self._head_bytes:
            self._answer_and_close(408, f"the request's head did not arrive within {self.head_timeout_s:g} s")
        else:  # an idle connection: closed as uvicorn closes an idle keep-alive one
            self.transport.close()

    def _answer_and_close(self, status: int, message: str) -> None:
        """Write {"error": message} with `status` and close the connection (h11 has given up on it): our
        side at once, theirs after LINGER_S (or when the client closes it), reading and dropping what it
        still sends, so that its unread bytes do not make the kernel reset the connection before the
        client has read the answer (nginx's lingering close)."""
        body = json.dumps({"error": message}).encode("utf-8")
        head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode("latin-1")
        if self.transport.is_closing() or self._lingering:
            return
        self._cancel_head_timer()
        self._lingering = True
        self.transport.write(head + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.flow.resume_reading()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()
