"""A scripted Redis for tests: a small RESP server on a loopback port that answers what a gateway's
cluster asks (AUTH, SELECT, PING, PTTL, SUBSCRIBE, the sync script, SET, PUBLISH) well enough for it to
join, and sends whatever bytes a test tells it to: instead of the next reply to a command, after it, or
pushed at once to the subscribed connections. What Redis sends is the gateway's input: this is how a
test plays a hostile or broken one.

    fake = FakeRedis()
    gw = start_gateway([sim], "--cluster-redis", fake.url, "--cluster-name", "gw-a")
    fake.script("EVAL", instead=b"!x\\r\\n")     # the next sync is answered with a bad type byte
    fake.push(resp(["message", "infergate:resp", "..."]))

Connections are told apart by what they sent: "cmd" (the sync's EVAL), "sub" (SUBSCRIBE), "start"
(PTTL: the blocking connection at the gateway's start), "other". With a certificate and its key it speaks
TLS (rediss://). Stopped when the test's process ends (daemon threads) or by close()."""

import select
import socket
import ssl
import threading
import time


def resp(v):
    """v in RESP: str/bytes a bulk string, int an integer, None a nil, list an array."""
    if v is None:
        return b"$-1\r\n"
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        return b":%d\r\n" % v
    if isinstance(v, str):
        v = v.encode()
    if isinstance(v, bytes):
        return b"$%d\r\n%s\r\n" % (len(v), v)
    return b"*%d\r\n" % len(v) + b"".join(resp(x) for x in v)


def status(s):
    return b"+" + s.encode() + b"\r\n"


def error(s):
    return b"-" + s.encode() + b"\r\n"


class Conn:
    """One client connection. Only its own thread reads and writes its socket (an SSL object must
    not be used from two threads at once): what others send is queued."""

    def __init__(self, fake, sock):
        self.fake, self.sock = fake, sock
        self.role = "other"
        self.channels = set()
        self.commands = []          # each one as a list of str
        self.closed = False
        self.outbox = []
        self.lock = threading.Lock()

    def send(self, data):
        with self.lock:
            self.outbox.append(data)

    def _flush(self):
        while True:
            with self.lock:
                if not self.outbox:
                    return
                data = self.outbox.pop(0)
            self.sock.setblocking(True)
            self.sock.sendall(data)
            self.sock.setblocking(False)

    def _read_commands(self, buf):
        """Whole commands (arrays of bulk strings) at the head of buf; the rest."""
        out = []
        while buf.startswith(b"*"):
            nl = buf.find(b"\r\n")
            if nl < 0:
                break
            n, pos, args = int(buf[1:nl]), nl + 2, []
            for _ in range(n):
                nl = buf.find(b"\r\n", pos)
                if nl < 0 or buf[pos:pos + 1] != b"$":
                    return out, buf
                ln = int(buf[pos + 1:nl])
                if len(buf) < nl + 2 + ln + 2:
                    return out, buf
                args.append(buf[nl + 2:nl + 2 + ln].decode(errors="replace"))
                pos = nl + 2 + ln + 2
            if len(args) < n:
                break
            out.append(args)
            buf = buf[pos:]
        return out, buf

    def run(self):
        buf = b""
        try:
            if self.fake.tls:
                self.sock = self.fake.tls.wrap_socket(self.sock, server_side=True)
            self.sock.setblocking(False)
            while True:
                self._flush()
                r, _, _ = select.select([self.sock], [], [], 0.02)
                pending = getattr(self.sock, "pending", lambda: 0)()
                if not r and not pending:
                    continue
                try:
                    d = self.sock.recv(65536)
                except (ssl.SSLWantReadError, BlockingIOError):
                    continue
                if not d:
                    break
                buf += d
                cmds, buf = self._read_commands(buf)
                for c in cmds:
                    self.commands.append(c)
                    self.fake._answer(self, c)
        except (OSError, ValueError):
            pass
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


class FakeRedis:
    def __init__(self, password=None, certfile=None, keyfile=None):
        """With certfile and keyfile, it speaks TLS (rediss://)."""
        self.password = password
        self.tls = None
        if certfile:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(certfile, keyfile)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.url = f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}"
        self.conns = []
        self.scripts = {}           # command -> [(instead, then)], one-shot, in order
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                s, _ = self.listener.accept()
            except OSError:
                return
            c = Conn(self, s)
            with self.lock:
                self.conns.append(c)
            threading.Thread(target=c.run, daemon=True).start()

    def close(self):
        self.listener.close()
        for c in self.conns:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass

    # --- what a test does ---

    def script(self, command, instead=None, then=None):
        """The next `command` (EVAL, SET, ...) is answered with `instead` (bytes; None: the usual
        answer), and `then` (bytes) is sent right after it."""
        with self.lock:
            self.scripts.setdefault(command.upper(), []).append((instead, then))

    def push(self, data, channel=None):
        """Sends data to every live connection subscribed (to `channel`, when given)."""
        for c in self.live("sub"):
            if channel is None or channel in c.channels:
                c.send(data)

    def live(self, role):
        with self.lock:
            return [c for c in self.conns if c.role == role and not c.closed]

    def count(self, role):
        """Connections of that role so far, closed ones too."""
        with self.lock:
            return sum(1 for c in self.conns if c.role == role)

    def subscribed(self):
        """The channels the live subscribed connections listen to."""
        out = set()
        for c in self.live("sub"):
            out |= c.channels
        return out

    # --- the usual answers ---

    def _answer(self, conn, c):
        name = c[0].upper()
        with self.lock:
            todo = self.scripts.get(name)
            instead, then = todo.pop(0) if todo else (None, None)
        if name == "EVAL":
            conn.role = "cmd"
        elif name == "PTTL" and conn.role == "other":
            conn.role = "start"
        if instead is None:
            instead = self._usual(conn, name, c)
        conn.send(instead + (then or b""))

    def _usual(self, conn, name, c):
        if name == "AUTH":
            pw = c[-1]
            return status("OK") if self.password is None or pw == self.password else \
                error("WRONGPASS invalid username-password pair or user is disabled.")
        if name in ("SELECT", "SET"):
            return status("OK")
        if name == "PING":
            return status("PONG")
        if name == "PTTL":
            return resp(-2)
        if name == "PUBLISH":
            return resp(0)
        if name == "GET":
            return resp(None)
        if name == "SUBSCRIBE":
            conn.role = "sub"
            out = b""
            for ch in c[1:]:
                conn.channels.add(ch)
                out += resp(["subscribe", ch, len(conn.channels)])
            return out
        if name == "EVAL":
            now = int(time.time() * 1000)
            if "ZADD', KEYS[2]" in c[1] and len(c) >= 9:   # the sync: [now, [NAME, score], [states]]
                return resp([now, [c[7], str(now)], []])
            if c[1].startswith("if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL'"):
                return resp(1)                              # leaving
            if c[2] == "0" and len(c) >= 5:                 # the key sync: per key 6 figures, then the active
                nkeys = (len(c) - 5) // 5
                return resp(["0 0 0 0 0 0"] * nkeys + [[]])
            return resp([])
        return status("OK")
