#!/bin/sh
# Sanitizer and leak checks, for CI and by hand:
#  1. builds the tree out of tree with --enable-sanitizers (ASan + UBSan) and
#     runs the whole `make check` under it;
#  2. builds it plainly and runs the gateway under valgrind memcheck through a
#     short load (a few hundred requests, streamed and not, bad ones, clients
#     that leave mid-stream), then SIGTERM: no memory errors, no definite leaks.
# Prints TAP and a PASS/FAIL line; exits 0 only when both hold.
#
#   sh tests/sanitize.sh                 # both
#   sh tests/sanitize.sh valgrind        # only the valgrind part (or: asan)
#   SAN_BUILD=/tmp/b sh tests/sanitize.sh  # where the two builds go
#
# Needs valgrind (apt-get install -y valgrind) and python3.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
base=${SAN_BUILD:-${TMPDIR:-/tmp}/infergate-sanitize}
jobs=${SAN_JOBS:-2}
parts=${*:-asan valgrind}
n=0
failed=0
mkdir -p "$base"

count() { set -- $parts; echo $#; }
echo "1..$(count)"

report() { # status name [detail file]
	n=$((n + 1))
	if [ "$1" = 0 ]; then
		echo "ok $n - $2"
	else
		failed=1
		echo "not ok $n - $2"
		[ -n "${3:-}" ] && [ -f "$3" ] && tail -60 "$3" | sed 's/^/# /'
	fi
}

configure_in() { # dir [configure args]
	dir=$1
	shift
	mkdir -p "$dir"
	[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi) >"$dir/autoreconf.log" 2>&1
	(cd "$dir" && "$src/configure" -q "$@") >"$dir/configure.log" 2>&1
}

asan() {
	dir=$base/asan
	log=$dir/check.log
	if ! configure_in "$dir" --enable-sanitizers || ! make -C "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
		report 1 "ASan+UBSan build" "$dir/build.log"
		return
	fi
	# Leaks and UB are errors; a report anywhere fails the test that saw it.
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		make -C "$dir" -j"$jobs" check >"$log" 2>&1
	rc=$?
	summary=$(sed -n 's/^# \(TOTAL\|PASS\|SKIP\|XFAIL\|FAIL\|XPASS\|ERROR\): *//p' "$log" | paste -sd' ' -)
	[ $rc = 0 ] || for f in $(grep -l '^not ok\|^ERROR\|runtime error\|AddressSanitizer' "$dir"/tests/*/*.log 2>/dev/null); do
		echo "# --- $f"; grep -B2 -A25 '^not ok\|runtime error\|ERROR: AddressSanitizer\|ERROR: LeakSanitizer' "$f" | head -80 | sed 's/^/# /'
	done
	report $rc "make check under ASan+UBSan (TOTAL PASS SKIP XFAIL FAIL XPASS ERROR: $summary)" "$log"
}

valgrind_run() {
	dir=$base/plain
	log=$dir/valgrind.log
	if ! command -v valgrind >/dev/null 2>&1; then
		report 1 "valgrind is not installed (apt-get install -y valgrind)"
		return
	fi
	if ! configure_in "$dir" CFLAGS="-O1 -g" || ! make -C "$dir" -j"$jobs" infergate infergate-sim >"$dir/build.log" 2>&1; then
		report 1 "plain build for valgrind" "$dir/build.log"
		return
	fi
	python3 - "$dir" "$log" <<'EOF'
import json, os, signal, socket, subprocess, sys, time
d, log = sys.argv[1], sys.argv[2]

def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(p, proc, t=60):
    end = time.time() + t
    while time.time() < end:
        if proc.poll() is not None:
            sys.exit(f"exited early with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", p), 0.5).close(); return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {p}")

def req(p, raw, read=True):
    s = socket.create_connection(("127.0.0.1", p), 30)
    s.settimeout(30)
    s.sendall(raw)
    out = b""
    if read:
        try:
            while True:
                b = s.recv(65536)
                if not b: break
                out += b
        except socket.timeout:
            pass
    s.close()
    return out

def post(path, body, stream=False, close=True):
    b = json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n%s"
            % (path, b"Connection: close\r\n" if close else b"", len(b), b))

sp, gp = port(), port()
sims = [subprocess.Popen([os.path.join(d, "infergate-sim"), "--listen", f"127.0.0.1:{p}",
                          "--tokens-per-second", "200", "--ttft-ms", "0"], stderr=subprocess.DEVNULL)
        for p in (sp,)]
sp2 = port()
sims.append(subprocess.Popen([os.path.join(d, "infergate-sim"), "--listen", f"127.0.0.1:{sp2}",
                              "--tokens-per-second", "0", "--ttft-ms", "0"], stderr=subprocess.DEVNULL))
wait_port(sp, sims[0]); wait_port(sp2, sims[1])
vg = subprocess.Popen(["valgrind", "--leak-check=full", "--show-leak-kinds=definite",
                       "--errors-for-leak-kinds=definite", "--error-exitcode=1", "--num-callers=30",
                       os.path.join(d, "infergate"), "--listen", f"127.0.0.1:{gp}",
                       "--backend", f"http://127.0.0.1:{sp}", "--backend", f"http://127.0.0.1:{sp2}",
                       "--health-interval-ms", "200", "--shutdown-grace-s", "5"],
                      stderr=open(log, "w"))
try:
    wait_port(gp, vg)
    time.sleep(1)
    ok = 0
    msg = {"model": "sim-model", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}
    for i in range(150):
        r = req(gp, post(b"/v1/chat/completions", dict(msg, messages=[{"role": "user", "content": f"q{i}"}])))
        ok += r.startswith(b"HTTP/1.1 200")
    for i in range(100):
        r = req(gp, post(b"/v1/completions", {"prompt": f"s{i}", "max_tokens": 6, "stream": True}))
        ok += r.startswith(b"HTTP/1.1 200") and b"[DONE]" in r
    for raw in [b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nConnection: close\r\n\r\n{bad",
                b"GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"GET /health/backends HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
                b"GARBAGE\r\n\r\n"] * 10:
        req(gp, raw)
    # Clients that leave mid-stream and mid-request.
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", gp))
        s.sendall(post(b"/v1/completions", {"prompt": f"leave{i}", "max_tokens": 500, "stream": i % 2 == 0},
                       close=False))
        time.sleep(0.05)
        s.close()
    # One stream still running at SIGTERM: it is let finish.
    s = socket.create_connection(("127.0.0.1", gp))
    s.sendall(post(b"/v1/completions", {"prompt": "last", "max_tokens": 100, "stream": True}))
    time.sleep(0.2)
    vg.send_signal(signal.SIGTERM)
    rest = b""
    s.settimeout(30)
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            rest += b
    except socket.timeout:
        pass
    rc = vg.wait(120)
    print(f"# {ok} of 250 requests answered 200 under valgrind; last stream finished: {b'[DONE]' in rest}; exit {rc}")
    sys.exit(0 if rc == 0 and ok == 250 else 1)
finally:
    if vg.poll() is None:
        vg.kill()
    for p in sims:
        p.kill()
EOF
	rc=$?
	lost=$(grep -o 'definitely lost: [0-9,]* bytes in [0-9,]* blocks' "$log" | tail -1)
	errs=$(grep -o 'ERROR SUMMARY: [0-9,]* errors' "$log" | tail -1)
	echo "# valgrind: ${errs:-no summary}; ${lost:-definitely lost: 0 bytes}"
	report $rc "infergate under valgrind memcheck: load, client disconnects, SIGTERM (${errs:-?})" "$log"
}

for part in $parts; do
	case $part in
	asan) asan ;;
	valgrind) valgrind_run ;;
	*) echo "unknown part '$part' (asan, valgrind)"; exit 2 ;;
	esac
done
if [ $failed = 0 ]; then echo "PASS"; else echo "FAIL"; fi
exit $failed
