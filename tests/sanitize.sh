#!/bin/sh
# Sanitizer and leak checks, for CI and by hand:
#  1. builds the tree out of tree with --enable-sanitizers (ASan + UBSan) and
#     runs the whole `make check` under it;
#  2. builds it plainly and runs the gateway under valgrind memcheck through a
#     short load (a few hundred requests, streamed and not, bad ones, clients
#     that leave mid-stream), then SIGTERM: no memory errors, no definite leaks;
#  3. builds the programs with ThreadSanitizer and runs the integration tests
#     of the gateway's reactors (test_workers.py, test_priority.py: requests
#     handed between reactors, admin calls on any reactor, a stop; and
#     test_stop.py: a reactor's failure stops them all, reactor 0 last)
#     against them: no data race and no lock-order inversion reported.
# Prints TAP and a PASS/FAIL line; exits 0 only when both hold.
#
#   sh tests/sanitize.sh                 # both
#   sh tests/sanitize.sh valgrind        # only the valgrind part (or: asan, tsan)
#   SAN_BUILD=/tmp/b sh tests/sanitize.sh  # where the two builds go
#
# Needs valgrind (apt-get install -y valgrind) and python3; the load is
# tests/integration/valgrind_load.py.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
base=${SAN_BUILD:-${TMPDIR:-/tmp}/infergate-sanitize}
jobs=${SAN_JOBS:-2}
parts=${*:-asan valgrind tsan}
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
	[ $rc = 0 ] || for f in $(find "$dir/tests" -name '*.log' -exec grep -l '^not ok\|^ERROR\|runtime error\|AddressSanitizer' {} + 2>/dev/null); do
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
	# The load itself: tests/integration/valgrind_load.py (harness.py starts
	# and stops every process); valgrind's report goes to $log.
	IG_BUILDDIR=$dir IG_SRCDIR=$src IG_VALGRIND_LOG=$log PYTHONPATH=$here/integration \
		python3 "$here/integration/valgrind_load.py" >"$dir/valgrind_load.tap" 2>&1
	rc=$?
	grep '^# [0-9]' "$dir/valgrind_load.tap"
	lost=$(grep -o 'definitely lost: [0-9,]* bytes in [0-9,]* blocks' "$log" | tail -1)
	errs=$(grep -o 'ERROR SUMMARY: [0-9,]* errors' "$log" | tail -1)
	echo "# valgrind: ${errs:-no summary}; ${lost:-definitely lost: 0 bytes}"
	tls_errs=$(grep -o 'ERROR SUMMARY: [0-9,]* errors' "$log.tls" 2>/dev/null | tail -1)
	echo "# valgrind over HTTPS: ${tls_errs:-no summary}"
	redis_errs=$(grep -o 'ERROR SUMMARY: [0-9,]* errors' "$log.redis" 2>/dev/null | tail -1)
	echo "# valgrind with a hostile Redis over TLS: ${redis_errs:-no summary}"
	pd_errs=$(grep -o 'ERROR SUMMARY: [0-9,]* errors' "$log.pd" 2>/dev/null | tail -1)
	echo "# valgrind with prefill/decode pairs: ${pd_errs:-no summary}"
	[ $rc = 0 ] || sed 's/^/# /' "$dir/valgrind_load.tap" | tail -40
	report $rc "infergate under valgrind memcheck: load, client disconnects, SIGTERM (${errs:-?}), over HTTPS with a certificate reload (${tls_errs:-?}), with a hostile Redis over TLS (${redis_errs:-?}), and with prefill/decode pairs (${pd_errs:-?})" "$log"
}

tsan() {
	dir=$base/tsan
	reports=$dir/reports
	if ! configure_in "$dir" CFLAGS="-O1 -g -fsanitize=thread -fno-omit-frame-pointer" LDFLAGS="-fsanitize=thread" ||
	   ! make -C "$dir" -j"$jobs" infergate infergate-sim infergate-bulk tests/infergate-faults \
		tests/unit/gateway/net/test_bio tests/unit/gateway/sched/test_kvindex >"$dir/build.log" 2>&1; then
		report 1 "ThreadSanitizer build" "$dir/build.log"
		return
	fi
	rm -rf "$reports"
	mkdir -p "$reports"
	rc=0
	# the reactors, their stop, and the I/O threads (bio.c) handing
	# completions to them: the Files and Batch APIs' tests, bio's unit test;
	# Idempotency-Key's readers, runners and Redis replies across reactors;
	# clients' hang-ups told to requests queued or running on another reactor;
	# a server's ranks probed once for all, LoRA loads on reactor 0
	for t in test_workers test_priority test_stop test_files test_batches test_cluster test_cluster_redis test_idempotency test_tracing test_https test_connections test_pd_sim test_dp_ranks test_lora; do
		TSAN_OPTIONS="log_path=$reports/tsan" IG_TEST_WORKERS=2 IG_BUILDDIR=$dir IG_SRCDIR=$src \
			PYTHONPATH=$here/integration python3 "$here/integration/$t.py" >"$dir/$t.tap" 2>&1 || rc=1
		grep -q '^not ok' "$dir/$t.tap" && rc=1
	done
	TSAN_OPTIONS="log_path=$reports/tsan" CK_TAP_LOG_FILE_NAME=- CK_VERBOSITY=silent \
		"$dir/tests/unit/gateway/net/test_bio" >"$dir/test_bio.tap" 2>&1 || rc=1
	# the KV index: its events thread writing while reactors match
	TSAN_OPTIONS="log_path=$reports/tsan" CK_TAP_LOG_FILE_NAME=- CK_VERBOSITY=silent \
		"$dir/tests/unit/gateway/sched/test_kvindex" >"$dir/test_kvindex.tap" 2>&1 || rc=1
	races=$(cat "$reports"/tsan* 2>/dev/null | grep -c 'WARNING: ThreadSanitizer' || true)
	[ "$races" = 0 ] || { rc=1; cat "$reports"/tsan* | head -80 | sed 's/^/# /'; }
	[ $rc = 0 ] || grep -h '^not ok' "$dir"/test_*.tap | sed 's/^/# /'
	report $rc "the gateway's reactors and I/O threads under ThreadSanitizer: test_workers, test_priority, test_stop, test_files, test_batches, test_cluster, test_cluster_redis, test_idempotency, test_tracing, test_https, test_connections, test_pd_sim, test_dp_ranks, test_lora, test_bio, test_kvindex ($races reports)"
}

for part in $parts; do
	case $part in
	asan) asan ;;
	valgrind) valgrind_run ;;
	tsan) tsan ;;
	*) echo "unknown part '$part' (asan, valgrind, tsan)"; exit 2 ;;
	esac
done
if [ $failed = 0 ]; then echo "PASS"; else echo "FAIL"; fi
exit $failed
