#!/bin/sh
# Runs every infergate benchmark in turn; each appends to bench/results/ and prints its
# figures. Over 70 minutes on 2 cores. IG_BUILD=DIR picks the build (default ./build,
# as `sh etc/quickstart.sh build` makes); IG_SKIP_DEPS=1 skips apt-get.
#   sh bench/run-all.sh            everything
#   sh bench/run-all.sh proxy      only the named parts (proxy streaming concurrency
#                                  rehearsal routing priority fairness cache
#                                  concurrency-auto fleet batch trace dp)
set -eu
BENCH=$(cd "$(dirname "$0")" && pwd)
parts=${*:-proxy streaming concurrency rehearsal routing priority fairness cache concurrency-auto fleet batch trace dp}
command -v python3 >/dev/null || { echo "python3 is needed" >&2; exit 2; }
echo "== $(date -Is) $(nproc) cores, $(uptime)"
for p in $parts; do
	[ -f "$BENCH/$p.py" ] || { echo "unknown part: $p" >&2; exit 2; }
	echo "== $p"
	python3 "$BENCH/$p.py"
done
echo "== results in $BENCH/results/"
