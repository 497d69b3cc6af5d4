"""A streaming HTTP/1.1 client over raw non-blocking sockets, for timing SSE streams.

One selector loop drives many streams at once; per stream it records the time the request
was sent, the first response byte (TTFB), and the arrival of every SSE event, de-chunking
`Transfer-Encoding: chunked` as it goes. No threads, so timing noise is the loop's alone.
"""

import errno
import json
import selectors
import socket
import time


class Stream:
    __slots__ = ("host", "port", "path", "body", "sock", "out", "buf", "t_send", "t_first",
                 "events", "status", "headers_done", "chunked", "chunk_left", "sse", "done",
                 "error", "saw_done", "t_headers")

    def __init__(self, host, port, path, body):
        self.host, self.port, self.path, self.body = host, port, path, body
        self.sock = None
        self.buf = b""
        self.t_send = self.t_first = self.t_headers = None
        self.events = []          # arrival time of each SSE event
        self.status = 0
        self.headers_done = False
        self.chunked = False
        self.chunk_left = 0
        self.sse = b""
        self.done = False
        self.saw_done = False
        self.error = None

    def request_bytes(self):
        b = self.body.encode()
        return (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n"
                f"Connection: close\r\n\r\n").encode() + b

    def feed(self, data, now):
        if self.t_first is None:
            self.t_first = now
        self.buf += data
        if not self.headers_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            self.buf = self.buf[end + 4:]
            self.headers_done = True
            self.t_headers = now
            try:
                self.status = int(head[0].split()[1])
            except (IndexError, ValueError):
                self.status = -1
            for h in head[1:]:
                k, _, v = h.partition(":")
                if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
                    self.chunked = True
        if self.chunked:
            while True:
                if self.chunk_left == 0:
                    nl = self.buf.find(b"\r\n")
                    if nl < 0:
                        return
                    line = self.buf[:nl].split(b";")[0].strip()
                    if not line:             # the CRLF after a chunk's data
                        self.buf = self.buf[nl + 2:]
                        continue
                    size = int(line, 16)
                    self.buf = self.buf[nl + 2:]
                    if size == 0:
                        self.done = True
                        return
                    self.chunk_left = size
                take = self.buf[:self.chunk_left]
                if not take:
                    return
                self.buf = self.buf[len(take):]
                self.chunk_left -= len(take)
                self._sse(take, now)
        else:
            self._sse(self.buf, now)
            self.buf = b""

    def _sse(self, data, now):
        self.sse += data
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return
            ev = self.sse[:end]
            self.sse = self.sse[end + 2:]
            self.events.append(now)
            if ev.strip() == b"data: [DONE]":
                self.saw_done = True


def run(streams, max_open, open_rate=0.0, on_tick=None, deadline=None):
    """Drive streams with at most max_open open at once, opening at most open_rate per
    second (0: no cap). Returns when every stream ended or at deadline. on_tick(open, done)
    is called about ten times a second."""
    sel = selectors.DefaultSelector()
    pending = list(reversed(streams))
    opened = 0
    t_start = time.monotonic()
    open_now = 0
    finished = 0
    last_tick = 0.0
    while pending or open_now:
        now = time.monotonic()
        if deadline and now > deadline:
            break
        while pending and open_now < max_open and (
                not open_rate or opened < (now - t_start) * open_rate + 1):
            s = pending.pop()
            s.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sock.setblocking(False)
            s.out = s.request_bytes()
            s.t_send = time.monotonic()
            err = s.sock.connect_ex((s.host, s.port))
            if err not in (0, errno.EINPROGRESS):
                s.error = f"connect: {errno.errorcode.get(err, err)}"
                s.sock.close()
                finished += 1
                continue
            sel.register(s.sock, selectors.EVENT_WRITE, s)
            opened += 1
            open_now += 1
        for key, mask in sel.select(timeout=0.05):
            s = key.data
            now = time.monotonic()
            try:
                if mask & selectors.EVENT_WRITE:
                    n = s.sock.send(s.out)
                    s.out = s.out[n:]
                    if not s.out:
                        s.t_send = now   # time from the last request byte sent
                        sel.modify(s.sock, selectors.EVENT_READ, s)
                    continue
                data = s.sock.recv(65536)
            except OSError as e:
                data, s.error = b"", f"socket: {e}"
            if data:
                s.feed(data, now)
            if not data or s.done:
                if not data and not s.done and not s.error:
                    s.error = "closed before the end of the stream"
                sel.unregister(s.sock)
                s.sock.close()
                open_now -= 1
                finished += 1
        if on_tick and time.monotonic() - last_tick > 0.1:
            last_tick = time.monotonic()
            on_tick(open_now, finished)
    for key in list(sel.get_map().values()):
        key.data.error = key.data.error or "deadline"
        key.fileobj.close()
    sel.close()


def chat_body(tokens=None, prompt="Tell me a story."):
    b = {"model": "sim-model", "messages": [{"role": "user", "content": prompt}], "stream": True}
    if tokens:
        b["max_tokens"] = tokens
    return json.dumps(b)
