#!/usr/bin/env bash
# Installs what the e2e suite needs on a fresh Debian machine, as root: Debian packages and
# containerd + runc built from pinned versions into a cache directory, so a second run is fast.
# Prints the cache's bin directory on its last line.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2
CACHE=${MOUNTKEEPER_CACHE:-/var/cache/mountkeeper-test}
BIN=$CACHE/bin

apt_packages=(gcc libc6-dev make libseccomp-dev pkg-config busybox-static sshfs openssh-server fuse3 util-linux iproute2 systemd)
missing=()
for p in "${apt_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "install.sh: apt-get install ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >&2
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$BIN"
stamp_ok() { [ -f "$BIN/.$1" ] && [ "$(cat "$BIN/.$1")" = "$2" ]; }

if ! stamp_ok containerd "$CONTAINERD_VERSION"; then
	echo "install.sh: building containerd $CONTAINERD_VERSION into $BIN (a few minutes)" >&2
	CGO_ENABLED=0 GOBIN=$BIN go install -tags no_btrfs \
		github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION \
		github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION >&2
	echo "$CONTAINERD_VERSION" >"$BIN/.containerd"
fi
if ! stamp_ok runc "$RUNC_VERSION"; then
	echo "install.sh: building runc $RUNC_VERSION into $BIN" >&2
	CGO_ENABLED=1 GOBIN=$BIN go install -tags seccomp github.com/opencontainers/runc@$RUNC_VERSION >&2
	echo "$RUNC_VERSION" >"$BIN/.runc"
fi
echo "$BIN"
