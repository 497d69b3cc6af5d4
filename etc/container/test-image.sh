#!/bin/sh
# Runs the image of build-image.sh: an infergate-sim and the gateway, both
# from the image, on the host network; from outside, /health must answer 200
# and a chat completion must come back from the sim through the gateway.
#   sh etc/container/test-image.sh [IMAGE]      with podman (default infergate:0.1.0)
#   sh etc/container/test-image.sh --chroot [ROOTFS]
#                                               the same root file system without
#                                               a container engine: chroot, as the
#                                               image's user 10001 (default
#                                               /var/tmp/infergate-rootfs)
# PODMAN_RUN_FLAGS: more `podman run` flags, e.g. on a host that does not let
# podman raise the open-file limit (docs/installing.md):
#   PODMAN_RUN_FLAGS='--ulimit nofile=20000:20000 --ulimit nproc=4096:4096'
# PODMAN_RUNTIME: the OCI runtime (runc where crun refuses hybrid cgroups).
# Prints "ok"/"not ok" lines; exit 0 when all passed.
set -u

mode=podman
if [ "${1:-}" = --chroot ]; then
	mode=chroot
	rootfs=${2:-${IG_ROOTFS:-/var/tmp/infergate-rootfs}}
else
	image=${1:-infergate:0.1.0}
fi
podman="podman${PODMAN_RUNTIME:+ --runtime $PODMAN_RUNTIME}"
sim_port=${SIM_PORT:-39001}
gw_port=${GW_PORT:-39080}
fail=0
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); fail=1; echo "not ok $n - $*"; }

pids=""
cleanup() {
	if [ $mode = podman ]; then
		$podman rm -f -t 2 ig-test-sim ig-test-gw >/dev/null 2>&1
	else
		for p in $pids; do kill "$p" 2>/dev/null; done
		wait 2>/dev/null
		mountpoint -q "$rootfs/proc" && umount -l "$rootfs/proc"
	fi
	return 0
}
trap cleanup EXIT INT TERM

# run NAME PROGRAM ARGS...: one program of the image, in the background
run() {
	name=$1
	shift
	if [ $mode = podman ]; then
		# shellcheck disable=SC2086
		$podman run -d --rm --name "$name" --network host ${PODMAN_RUN_FLAGS:-} "$image" "$@" >/dev/null
	else
		chroot --userspec=10001:10001 "$rootfs" env -i PATH=/usr/bin:/bin HOME=/var/lib/infergate "$@" \
			>"/tmp/$name.log" 2>&1 &
		pids="$pids $!"
	fi
}

if [ $mode = podman ]; then
	echo "# $podman ${PODMAN_RUN_FLAGS:-}, image $image"
	$podman image exists "$image" || { echo "not ok 1 - no image $image (build-image.sh builds it)"; exit 1; }
	user=$($podman image inspect --format '{{.Config.User}}' "$image")
	[ "$user" = 10001:10001 ] && ok "the image runs as $user" || not_ok "the image's user is '$user', not 10001:10001"
else
	echo "# chroot $rootfs"
	[ -x "$rootfs/usr/bin/infergate" ] || { echo "not ok 1 - no $rootfs/usr/bin/infergate"; exit 1; }
	mount -t proc proc "$rootfs/proc"
	line=$(grep '^infergate:' "$rootfs/etc/passwd")
	case "$line" in
	infergate:x:10001:10001:*) ok "the user infergate is 10001:10001 ($line)" ;;
	*) not_ok "the user infergate: '$line'" ;;
	esac
fi

run ig-test-sim infergate-sim --listen "127.0.0.1:$sim_port" --model sim-model
run ig-test-gw infergate --listen "127.0.0.1:$gw_port" --backend "http://127.0.0.1:$sim_port" \
	--health-interval-ms 200 --health-rise 1

code=000
for _ in $(seq 100); do
	code=$(curl -s -o /tmp/ig-test-health -w '%{http_code}' "http://127.0.0.1:$gw_port/health" 2>/dev/null)
	[ "$code" = 200 ] && break
	sleep 0.1
done
[ "$code" = 200 ] && ok "GET /health: 200 $(cat /tmp/ig-test-health)" || not_ok "GET /health: $code"

body=$(curl -s --max-time 30 "http://127.0.0.1:$gw_port/v1/chat/completions" \
	-d '{"model": "sim-model", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8}')
case "$body" in
*'"object":"chat.completion"'*'"model":"sim-model"'*) ok "a chat completion through the gateway: $(printf '%s' "$body" | cut -c1-160)..." ;;
*) not_ok "chat completion: $body" ;;
esac
served=$(curl -s "http://127.0.0.1:$gw_port/health/backends" | grep -o '"served":[0-9]*' | head -1)
[ "$served" = '"served":1' ] && ok "the sim in the image served it ($served)" || not_ok "backend served: $served"

if [ $mode = podman ]; then
	[ $fail = 0 ] || { $podman logs ig-test-gw 2>&1 | tail -20 | sed 's/^/# /'; }
else
	[ $fail = 0 ] || { tail -20 /tmp/ig-test-gw.log | sed 's/^/# /'; }
	ps -o user=,comm= -p "$(echo $pids | cut -d' ' -f2)" | sed 's/^/# gateway process: /'
fi
echo "1..$n"
exit $fail
