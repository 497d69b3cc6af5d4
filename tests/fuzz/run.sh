#!/bin/sh
# Builds the libFuzzer targets of infergate with ASan + UBSan and runs each
# for FUZZ_SECONDS (default 30), failing on any crash, leak, UB or broken
# invariant. Regression inputs (tests/fuzz/corpus/<target>/crash-*) and the
# seeds are replayed first.
#
#   sh tests/fuzz/run.sh                   # every target, 30 s each
#   FUZZ_SECONDS=600 sh tests/fuzz/run.sh sse resume
#   FUZZ_BUILD=/tmp/f sh tests/fuzz/run.sh   # where binaries and new inputs go
#   FUZZ_EXTRA_CFLAGS=-fno-sanitize=pointer-overflow sh tests/fuzz/run.sh
#                                          # look past a known finding
#
# Needs clang with libFuzzer (Debian: apt-get install -y clang) and the
# -dev packages the project builds with. Prints one line per target and a
# summary; exit 0 only when every target ran clean.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
secs=${FUZZ_SECONDS:-30}
build=${FUZZ_BUILD:-${TMPDIR:-/tmp}/infergate-fuzz}
cc=${FUZZ_CC:-clang}
# redis_wire: the connection's own reading of Redis's bytes (redis.c);
# the other redis_*: one per kind of value from Redis (the sync, a gateway's state in
# it, the key sync, infergate:resp, each kind of infergate:data, the lease
# round, an Idempotency-Key's value)
# kvwire: the KV-event codec (kvwire.c), the batches an engine publishes
# anthropic: the Anthropic Messages translation (anthropic.c): clients' bodies, backends' answers and streams
all="config inspect load sse corpus_line resume anthropic redis_wire redis_sync redis_state redis_keys redis_resp redis_data_batch redis_data_progress redis_data_cancel redis_data_file_stored redis_data_file_deleted redis_lease redis_idem kvwire"
targets=${*:-$all}

command -v "$cc" >/dev/null 2>&1 || { echo "FAIL: $cc not found (apt-get install -y clang)"; exit 1; }
mkdir -p "$build"
# A config.h of our own, so the fuzz build does not depend on ./configure.
cat > "$build/config.h" <<'H'
#define PACKAGE "infergate"
#define PACKAGE_NAME "infergate"
#define PACKAGE_VERSION "fuzz"
#define PACKAGE_STRING "infergate fuzz"
#define VERSION "fuzz"
H

pkgs="libmicrohttpd gnutls libcurl jansson libssl libcrypto hiredis libzmq msgpack libpcre2-8"
cflags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer -D_GNU_SOURCE -I$build -I$src/include -I$src/src/bulk -I$src/src/gateway
  $(pkg-config --cflags $pkgs) ${FUZZ_EXTRA_CFLAGS:-}"
libs="$(pkg-config --libs $pkgs) -lunistring -lm -pthread"
# The tree's code, built once with the fuzzing flags into one archive per
# program (as `make` builds libigcommon.a and libiggateway.a): each target
# links only the objects it needs. A target that includes a .c (to reach its
# static functions) takes that file's symbols from itself.
archive() { # name files...
	name=$1
	shift
	mkdir -p "$build/obj/$name"
	objs=""
	for f in "$@"; do
		o="$build/obj/$name/$(basename "$f" .c).o"
		# shellcheck disable=SC2086
		$cc $cflags -c "$f" -o "$o" 2>>"$build/lib$name.build.log" || return 1
		objs="$objs $o"
	done
	rm -f "$build/lib$name.a"
	# shellcheck disable=SC2086
	ar cr "$build/lib$name.a" $objs
}
rm -f "$build"/lib*.build.log
[ -f "$src/src/gateway/api/embed.sh" ] &&
	sh "$src/src/gateway/api/embed.sh" "$src/src/gateway/api/status.html" ig_status_html >"$build/status_html.c"
if ! archive common "$src"/src/common/*.c ||
   ! archive gateway $(find "$src"/src/gateway -name '*.c' | sort | grep -v '/main\.c$') "$build/status_html.c" ||
   ! archive batchfile "$src"/src/batchfile/*.c ||
   ! archive bulk $(ls "$src"/src/bulk/*.c | grep -v '/main\.c$'); then
	cat "$build"/lib*.build.log
	echo "FAIL: the tree does not build with $cc for fuzzing"
	exit 1
fi
archives="$build/libgateway.a $build/libbulk.a $build/libbatchfile.a $build/libcommon.a"

for t in $targets; do
	case " $all " in *" $t "*) ;; *) echo "unknown target '$t' (targets: $all)" >&2; exit 2 ;; esac
done

failed=0
summary=""
for t in $targets; do
	bin="$build/fuzz_$t"
	# shellcheck disable=SC2046,SC2086
	if ! $cc $cflags -o "$bin" "$here/fuzz_$t.c" $archives $libs 2>"$build/$t.build.log"; then
		cat "$build/$t.build.log"
		echo "FAIL: fuzz_$t does not build"
		failed=1
		continue
	fi
	seeds="$here/corpus/$t"
	work="$build/corpus-$t"
	mkdir -p "$work" "$build/crashes"
	log="$build/$t.log"
	export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
	export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
	# Replay the seeds and earlier crashes (one run each) before fuzzing.
	if ! "$bin" -runs=0 -artifact_prefix="$build/crashes/$t-" "$seeds" >"$log.replay" 2>&1; then
		tail -40 "$log.replay"
		echo "FAIL: fuzz_$t crashes on a seed or regression input in $seeds"
		failed=1
		summary="$summary
  $t: FAIL on a stored input"
		continue
	fi
	if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
		-print_final_stats=1 -artifact_prefix="$build/crashes/$t-" \
		"$work" "$seeds" >"$log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
		cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
		echo "ok: fuzz_$t ${runs:-?} executions in ${secs}s ($cov, corpus $(ls "$work" | wc -l) inputs)"
		summary="$summary
  $t: ${runs:-?} executions, no crash"
	else
		grep -A40 -m1 'ERROR\|runtime error\|==ERROR\|deadly signal\|out-of-memory\|timeout' "$log" | head -60
		echo "FAIL: fuzz_$t found a crash; input in $build/crashes/ (log $log)"
		summary="$summary
  $t: CRASH, see $log"
		failed=1
	fi
done
echo "fuzz summary (${secs}s per target):$summary"
if [ "$failed" = 0 ]; then echo "PASS"; else echo "FAIL"; fi
exit "$failed"
