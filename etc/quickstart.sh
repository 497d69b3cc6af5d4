#!/bin/sh
# infergate quick start, for a fresh Debian 12 machine (as root).
#   sh etc/quickstart.sh demo   seven simulated backends, the gateway, and a
#                               generated corpus pushed through it
#   sh etc/quickstart.sh test   the whole test suite: make check, check-asan
#                               (make check again under ASan+UBSan),
#                               check-valgrind (the gateway under memcheck),
#                               check-tsan (its reactors under ThreadSanitizer) and
#                               check-fuzz (each fuzz target for FUZZ_SECONDS,
#                               default 15); ends with "N passed, N failed"
#   sh etc/quickstart.sh check  make check only (a minute or two)
# Builds out of tree in ./build. IG_SKIP_DEPS=1 skips apt-get.
set -eu

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${IG_BUILD:-$SRC/build}
JOBS=$(nproc 2>/dev/null || echo 2)
DEPS="build-essential autoconf automake libtool pkg-config libmicrohttpd-dev libgnutls28-dev libcurl4-openssl-dev
      libjansson-dev libssl-dev openssl check python3 python3-yaml curl prometheus chromium clang valgrind
      libsystemd-dev systemd dpkg-dev debhelper fakeroot lintian groff-base man-db
      libhiredis-dev redis-server haproxy gnuplot-nox
      libzmq3-dev libmsgpack-dev libpcre2-dev libunistring-dev"

deps() {
	[ "${IG_SKIP_DEPS:-0}" = 1 ] && return 0
	missing=""
	for p in $DEPS; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
	# A Node.js with npm may come from elsewhere (NodeSource's nodejs
	# conflicts with Debian's npm): only install Debian's when none is there.
	command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || missing="$missing nodejs npm"
	[ -z "$missing" ] && return 0
	echo "== installing:$missing"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
}

build() {
	deps
	if [ ! -x "$SRC/configure" ] || [ "$SRC/configure.ac" -nt "$SRC/configure" ]; then
		(cd "$SRC" && autoreconf -fi >/dev/null 2>&1)
	fi
	mkdir -p "$BUILD"
	cd "$BUILD"
	[ -f Makefile ] || "$SRC/configure" -q ${IG_CONFIGURE_FLAGS:-}
	make -s -j"$JOBS" >/dev/null
}

# Counts test cases: TAP lines of every test program (automake's .trs files,
# in the plain and the sanitizer builds), plus the valgrind and fuzz checks.
summarize() {
	trs=$(find "$BUILD" -name '*.trs' 2>/dev/null)
	pass=0; fail=0; skip=0
	if [ -n "$trs" ]; then
		pass=$(cat $trs | grep -c '^:test-result: PASS' || true)
		fail=$(cat $trs | grep -c -E '^:test-result: (FAIL|ERROR|XPASS)' || true)
		skip=$(cat $trs | grep -c '^:test-result: SKIP' || true)
	fi
	# sanitize.log: the ASan make check is counted through its .trs files;
	# its valgrind and ThreadSanitizer lines count once each; any "not ok"
	# (a build that failed) fails.
	if [ -f "$BUILD/sanitize.log" ]; then
		pass=$((pass + $(grep -c -E '^ok [0-9]+ - .*(valgrind|ThreadSanitizer)' "$BUILD/sanitize.log" || true)))
		fail=$((fail + $(grep -c '^not ok' "$BUILD/sanitize.log" || true)))
	fi
	if [ -f "$BUILD/fuzz.log" ]; then
		pass=$((pass + $(grep -c '^ok: fuzz_' "$BUILD/fuzz.log" || true)))
		fail=$((fail + $(grep -c '^FAIL:' "$BUILD/fuzz.log" || true)))
	fi
	[ "$skip" -gt 0 ] && echo "($skip skipped)"
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
}

show_failures() {
	for trs in $(grep -l -E '^:test-result: (FAIL|ERROR|XPASS)' $(find "$1" -name '*.trs') 2>/dev/null); do
		echo "== ${trs%.trs}.log"
		grep -E '^(not ok|#)' "${trs%.trs}.log" | head -60
	done
}

run_tests() {
	build
	cd "$BUILD"
	find "$BUILD" -name '*.trs' -delete
	rm -f "$BUILD/sanitize.log" "$BUILD/fuzz.log"
	rc=0
	# The suite's gateways run two reactors (the default on two cores is one):
	# the handing over between reactors is what most needs its tests.
	export IG_TEST_WORKERS="${IG_TEST_WORKERS:-2}"
	echo "== make check"
	make -j"${IG_TEST_JOBS:-2}" check >"$BUILD/check.log" 2>&1 || rc=$?
	show_failures "$BUILD"
	if [ "${1:-full}" = full ]; then
		echo "== make check-asan check-valgrind check-tsan: the same under ASan+UBSan, the gateway under"
		echo "   valgrind, its reactors under ThreadSanitizer"
		SAN_JOBS="${IG_TEST_JOBS:-2}" make -k check-asan check-valgrind check-tsan >"$BUILD/sanitize.log" 2>&1 || rc=1
		grep -E '^(ok|not ok)' "$BUILD/sanitize.log" || true
		show_failures "$BUILD/sanitize"
		echo "== make check-fuzz: ${FUZZ_SECONDS:-15} s per target"
		FUZZ_SECONDS="${FUZZ_SECONDS:-15}" make check-fuzz >"$BUILD/fuzz.log" 2>&1 || rc=1
		grep -E '^(ok:|FAIL)' "$BUILD/fuzz.log" || true
	fi
	summarize || rc=1
	return $rc
}

demo() {
	build
	cd "$BUILD"
	work=$(mktemp -d /tmp/infergate-demo.XXXXXX)
	pids=""
	trap 'kill $pids 2>/dev/null; wait 2>/dev/null; echo "== stopped; files in $work"' EXIT INT TERM
	echo "== starting seven simulated inference servers on 127.0.0.1:30001-30007"
	for i in 1 2 3 4 5 6 7; do
		./infergate-sim --listen 127.0.0.1:3000$i --model sim-model --tokens-per-second 150 \
			--ttft-ms 30 --max-running 48 --seed $i 2>"$work/sim$i.log" &
		pids="$pids $!"
	done
	echo "== starting the gateway on 127.0.0.1:8080 (config: etc/infergate.json)"
	./infergate --config "$SRC/etc/infergate.json" 2>"$work/gateway.log" &
	pids="$pids $!"
	for _ in $(seq 50); do
		curl -sf localhost:8080/health >/dev/null 2>&1 && break
		sleep 0.1
	done
	echo "\$ curl -s localhost:8080/health"
	curl -s localhost:8080/health; echo
	echo "\$ curl -s localhost:8080/v1/chat/completions -d '{\"model\": \"sim-model\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 12}'"
	curl -s localhost:8080/v1/chat/completions \
		-d '{"model": "sim-model", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12}'
	echo
	echo "\$ curl -s localhost:8080/v1/responses -d '{\"model\": \"sim-model\", \"input\": \"Hello\", \"max_output_tokens\": 8}'"
	curl -s localhost:8080/v1/responses -d '{"model": "sim-model", "input": "Hello", "max_output_tokens": 8}'
	echo
	echo "\$ curl -s localhost:8080/v1/rerank -d '{\"query\": \"which one?\", \"documents\": [\"the first\", \"the second\"]}'"
	curl -s localhost:8080/v1/rerank -d '{"query": "which one?", "documents": ["the first", "the second"]}'
	echo
	n=${IG_DEMO_PROMPTS:-3000}
	echo "== generating $n prompts and pushing them through the gateway (concurrency auto: the"
	echo "   slots the gateway learns from the simulators, 7 x 48, plus a little headroom);"
	echo "   watch it live at http://127.0.0.1:8080/status, metrics at /metrics"
	./infergate-bulk generate --count "$n" --seed 1 --output "$work/corpus.jsonl"
	./infergate-bulk --input "$work/corpus.jsonl" --output "$work/results.jsonl" \
		--model sim-model --concurrency auto --summary-json "$work/summary.json"
	echo "== $(wc -l <"$work/results.jsonl") results in $work/results.jsonl"
}

case "${1:-}" in
demo) demo ;;
test) run_tests full ;;
check) run_tests quick ;;
build) build ;;
*) echo "usage: sh etc/quickstart.sh demo|test|check|build" >&2; exit 2 ;;
esac
