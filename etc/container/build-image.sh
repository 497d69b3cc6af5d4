#!/bin/sh
# The container image of infergate, made from Debian packages only: a
# minimal Debian 12 root file system (debootstrap), the infergate .deb and
# its dependencies installed into it with apt-get, docs and caches stripped,
# imported into podman. No registry and no Containerfile build: only the
# Debian archive is needed.
#   sh etc/container/build-image.sh infergate_0.1.0-1_amd64.deb [IMAGE]
# IMAGE defaults to infergate:0.1.0 (the name etc/kubernetes/*.yaml use).
# As root. Needs debootstrap and, for the import, podman
# (apt-get install -y debootstrap podman). Environment:
#   IG_ROOTFS      where the root file system is built and kept
#                  (default /var/tmp/infergate-rootfs); etc/container/test-image.sh
#                  --chroot tests it without a container engine
#   IG_BASE_CACHE  a tar of the bare debootstrapped system: unpacked instead of
#                  running debootstrap when it exists, written when it does not
#   MIRROR         the Debian archive (default http://deb.debian.org/debian)
# The user infergate is made with uid/gid 10001 before the package is
# installed (its postinst then keeps it): the Kubernetes manifests run as
# 10001, and the image's USER says so.
set -eu

deb=${1:?usage: build-image.sh PACKAGE.deb [IMAGE]}
image=${2:-infergate:0.1.0}
rootfs=${IG_ROOTFS:-/var/tmp/infergate-rootfs}
mirror=${MIRROR:-http://deb.debian.org/debian}
uid=10001

[ "$(id -u)" = 0 ] || { echo "build-image: needs root (debootstrap, chroot)" >&2; exit 2; }
[ -f "$deb" ] || { echo "build-image: $deb: no such file (make deb builds it)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "build-image: apt-get install -y debootstrap" >&2; exit 2; }

t0=$(date +%s)
step() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

umount_all() {
	for m in "$rootfs/proc" "$rootfs/dev/pts" "$rootfs/dev"; do
		mountpoint -q "$m" 2>/dev/null && umount -l "$m"
	done
	return 0
}
trap umount_all EXIT INT TERM

umount_all
rm -rf "$rootfs"
mkdir -p "$rootfs"
if [ -n "${IG_BASE_CACHE:-}" ] && [ -f "$IG_BASE_CACHE" ]; then
	step "unpacking the base system from $IG_BASE_CACHE"
	tar -C "$rootfs" -xf "$IG_BASE_CACHE"
else
	step "debootstrap --variant=minbase bookworm from $mirror"
	debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.debootstrap.log" 2>&1 || {
		tail -30 "$rootfs.debootstrap.log" >&2
		exit 1
	}
	if [ -n "${IG_BASE_CACHE:-}" ]; then
		tar -C "$rootfs" -cf "$IG_BASE_CACHE" .
	fi
fi
step "base system: $(du -sh "$rootfs" | cut -f1)"

mount -t proc proc "$rootfs/proc"
mount --bind /dev "$rootfs/dev"
mount --bind /dev/pts "$rootfs/dev/pts"
# no service is started while the image is built
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod 755 "$rootfs/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
cp "$deb" "$rootfs/tmp/infergate.deb"
in_root() { chroot "$rootfs" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }

step "the user infergate ($uid:$uid), then the package and its dependencies"
in_root groupadd --gid $uid infergate
in_root useradd --uid $uid --gid $uid --home-dir /var/lib/infergate --no-create-home \
	--shell /usr/sbin/nologin --comment "infergate gateway" infergate
in_root apt-get update -qq
# curl: the shard Job of etc/kubernetes waits for the gateway with it
in_root apt-get install -y -qq --no-install-recommends /tmp/infergate.deb ca-certificates curl >/dev/null
in_root infergate --version

step "stripping docs, caches and logs"
in_root apt-get clean
rm -rf "$rootfs/var/lib/apt/lists/"* "$rootfs/var/cache/apt/"*.bin "$rootfs/var/cache/debconf/"*-old \
	"$rootfs/var/lib/dpkg/"*-old "$rootfs/var/log/"* "$rootfs/tmp/"* "$rootfs/var/tmp/"* \
	"$rootfs/usr/share/man" "$rootfs/usr/share/info" "$rootfs/usr/share/lintian" \
	"$rootfs/usr/share/locale" "$rootfs/etc/systemd/system/"*.wants \
	"$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
# keep each package's copyright file, drop the rest of /usr/share/doc
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
# and keep them out when a derived image installs more
mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/01-infergate-image" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
EOF
version=$(in_root dpkg-query -W -f='${Version}' infergate)
umount_all
step "root file system: $(du -sh "$rootfs" | cut -f1) in $rootfs"

if ! command -v podman >/dev/null; then
	echo "build-image: podman not found (apt-get install -y podman): the root file system is in $rootfs" >&2
	exit 3
fi
step "podman import as $image"
tar --numeric-owner -C "$rootfs" -c . | podman import \
	--change 'USER 10001:10001' \
	--change 'EXPOSE 8080' \
	--change 'WORKDIR /var/lib/infergate' \
	--change 'CMD ["infergate", "--config", "/etc/infergate/infergate.json", "--listen", "0.0.0.0:8080"]' \
	--message "infergate $version from Debian 12 packages" \
	- "$image" >/dev/null
step "done: $image, $(podman image inspect --format '{{.Size}}' "$image") bytes"
