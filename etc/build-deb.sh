#!/bin/sh
# Builds the Debian package (debian/) from a copy of the source tree, so the
# checkout is never written to: `make deb` calls it.
#   sh etc/build-deb.sh [OUTDIR]        the .deb (and .buildinfo, .changes)
#                                       land in OUTDIR (default: .), with
#                                       the build's log, build-deb.log
# In a git checkout (SRC its top) the copy is the working tree as it is (tracked files with
# their uncommitted edits, and new files not ignored: no build output);
# anywhere else (an unpacked release tarball) it is the whole tree but for
# build directories in it.
# DEB_BUILD_OPTIONS passes through (nocheck skips the unit tests; parallel=N).
# Needs: dpkg-dev debhelper fakeroot, and the Build-Depends of debian/control
# (dpkg-checkbuilddeps names any that are missing).
set -eu

SRC=$(cd "$(dirname "$0")/.." && pwd -P)
OUT=$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)
for tool in dpkg-buildpackage dh fakeroot; do
	command -v "$tool" >/dev/null 2>&1 || {
		echo "build-deb: $tool not found: apt-get install -y dpkg-dev debhelper fakeroot" >&2
		exit 2
	}
done
(cd "$SRC" && dpkg-checkbuilddeps) || {
	echo "build-deb: install the packages named above (apt-get install -y ...)" >&2
	exit 2
}

version=$(dpkg-parsechangelog -l "$SRC/debian/changelog" -S Version)
tmp=$(mktemp -d /tmp/infergate-deb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
tree="$tmp/infergate-${version%-*}"
mkdir "$tree"
# the tree is a checkout's only when it is the checkout's top (a distcheck
# tree unpacked inside a checkout is not tracked there)
if [ "$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null)" = "$SRC" ]; then
	# deleted but not yet committed files are listed and missing: skip them
	(cd "$SRC" && git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf - | tar -xf - -C "$tree")
else
	# out-of-tree build directories inside it (they hold a config.status) stay out
	(cd "$SRC" && find . -mindepth 2 -name config.status | sed 's|/config\.status$||' >"$tmp/builddirs" &&
		tar --anchored -X "$tmp/builddirs" -cf - . | tar -xf - -C "$tree")
fi

jobs=$(nproc 2>/dev/null || echo 2)
case " ${DEB_BUILD_OPTIONS:-} " in
*" parallel="*) ;;
*) DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }parallel=$jobs" ;;
esac
export DEB_BUILD_OPTIONS
echo "== dpkg-buildpackage -b -us -uc in $tree (DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS)"
(cd "$tree" && dpkg-buildpackage -b -us -uc) >"$tmp/build.log" 2>&1 || {
	tail -60 "$tmp/build.log" >&2
	echo "build-deb: dpkg-buildpackage failed (the end of its log is above)" >&2
	exit 1
}
cp "$tmp/build.log" "$OUT/build-deb.log"
for f in "$tmp"/*.deb "$tmp"/*.buildinfo "$tmp"/*.changes; do
	[ -e "$f" ] && cp "$f" "$OUT/"
done
ls "$tmp"/*.deb | while read -r deb; do echo "$OUT/$(basename "$deb")"; done
