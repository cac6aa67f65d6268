#!/usr/bin/env bash
# Installs what the e2e suite needs on a fresh Debian machine, as root: Debian packages, and
# containerd, runc, kubelet, kube-apiserver, CRI-O, pinns and promtool built from pinned versions
# into a cache directory, so a second run is fast. `install.sh demo` installs only what
# `make demo` uses (containerd, runc, sshd, sshfs, FUSE, busybox for its image) and stops after
# runc. `install.sh kernels` installs only what the kernel matrix (test/vm) uses: QEMU,
# virtiofsd, busybox, the Debian kernels and the SMB fixture's packages below.
# Prints the cache's bin directory on its last line.
set -euo pipefail

CONTAINERD_VERSION=v2.4.2
RUNC_VERSION=v1.5.2
KUBERNETES_VERSION=v1.34.4
# The Go module proxy serves exactly this one CRI-O release.
CRIO_VERSION=v1.34.0
# github.com/prometheus/prometheus's module version (Prometheus 3): promtool checks and unit-tests
# deploy/prometheusrule.yaml (internal/metrics TestShippedRules).
PROMETHEUS_MODULE_VERSION=v0.316.0
# The linter `make vet` runs (.golangci.yml).
GOLANGCI_LINT_VERSION=v2.15.0
CACHE=${MOUNTKEEPER_CACHE:-/var/cache/mountkeeper-test}
BIN=$CACHE/bin
# The demo's Debian packages: gcc, libc6-dev, libseccomp-dev and pkg-config build runc (cgo,
# seccomp); busybox-static is the demo container's image; sshd serves the sshfs class.
ONLY_DEMO=false
[ "${1:-}" = demo ] && ONLY_DEMO=true
ONLY_KERNELS=false
[ "${1:-}" = kernels ] && ONLY_KERNELS=true
demo_apt_packages=(gcc libc6-dev make libseccomp-dev pkg-config busybox-static sshfs openssh-server fuse3 util-linux)
# The kernel matrix boots Debian's cloud kernels under QEMU (TCG) with the host's userland over
# virtiofs: busybox-static builds the guest's initramfs, kmod runs depmod here and modprobe in
# the guest, xz-utils unpacks the modules the initramfs loads. virtiofsd is its own package from
# trixie on; bookworm's is /usr/lib/qemu/virtiofsd in qemu-system-common.
kernel_apt_packages=(qemu-system-x86 busybox-static kmod xz-utils util-linux)
apt-cache show virtiofsd >/dev/null 2>&1 && kernel_apt_packages+=(virtiofsd)

apt_packages=(gcc libc6-dev make libseccomp-dev pkg-config busybox-static sshfs openssh-server fuse3 util-linux iproute2 systemd etcd-server conmon podman glusterfs-server glusterfs-client containernetworking-plugins)
apt_packages+=("${kernel_apt_packages[@]}")
$ONLY_DEMO && apt_packages=("${demo_apt_packages[@]}")
$ONLY_KERNELS && apt_packages=("${kernel_apt_packages[@]}")
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

# Debian's kernels for the kernel matrix (test/vm), one per release operators run: name,
# package, version. Unpacked, not installed, into $CACHE/kernels/NAME (boot/vmlinuz-*,
# usr/lib/modules/*, depmod run). The archive keeps a release's current and previous kernel
# ABI: when a pin is gone, pick the newest from `apt-cache search cloud-amd64-unsigned` with
# the lists below.
KERNELS=(
	"5.10 linux-image-5.10.0-32-cloud-amd64-unsigned 5.10.223-1 bullseye"
	"6.1 linux-image-6.1.0-50-cloud-amd64-unsigned 6.1.176-1 bookworm"
	"6.12 linux-image-6.12.117+deb13-cloud-amd64-unsigned 6.12.117-1 trixie"
)
install_kernels() {
	local kdir=$CACHE/kernels apt_dir entry name pkg version suite root deb release
	local -a todo=() apt_opts
	for entry in "${KERNELS[@]}"; do
		read -r name pkg version suite <<<"$entry"
		stamp_ok "kernel-$name" "$pkg=$version" || todo+=("$entry")
	done
	[ ${#todo[@]} -gt 0 ] || return 0
	# apt's own state for these suites, in the cache: the host's sources and lists stay as
	# they are (an update with another sources list would drop the host's lists).
	apt_dir=$kdir/apt
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
	: >"$apt_dir/status"
	for entry in "${todo[@]}"; do
		read -r name pkg version suite <<<"$entry"
		echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main"
	done | sort -u >"$apt_dir/sources.list"
	apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::State::status=$apt_dir/status"
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false -o APT::Sandbox::User=root)
	echo "install.sh: fetching Debian kernels into $kdir (about 30 s cold):" >&2
	printf '  %s\n' "${todo[@]}" >&2
	apt-get -qq "${apt_opts[@]}" update >&2
	for entry in "${todo[@]}"; do
		read -r name pkg version suite <<<"$entry"
		root=$kdir/$name
		rm -rf "$root" "$apt_dir/debs"/*
		(cd "$apt_dir/debs" && apt-get -qq "${apt_opts[@]}" download "$pkg=$version" >&2)
		deb=$(echo "$apt_dir/debs"/*.deb)
		[ -f "$deb" ] || { echo "install.sh: apt-get download $pkg=$version gave no package" >&2; exit 1; }
		dpkg-deb -x "$deb" "$root"
		rm -f "$deb"
		# bullseye's and bookworm's packages put modules under lib/, trixie's under usr/lib/.
		if [ -d "$root/lib/modules" ]; then
			mkdir -p "$root/usr/lib"
			mv "$root/lib/modules" "$root/usr/lib/modules"
			rmdir "$root/lib" 2>/dev/null || true
		fi
		release=$(basename "$(echo "$root"/usr/lib/modules/*)")
		[ -f "$root/boot/vmlinuz-$release" ] || { echo "install.sh: $pkg has no boot/vmlinuz-$release" >&2; exit 1; }
		depmod -b "$root/usr" "$release"
		echo "$pkg=$version" >"$BIN/.kernel-$name"
	done
	rm -rf "$apt_dir"
}

# The SMB fixture of the kernel matrix (test/vm TestSMB): the kernel's own SMB server, ksmbd,
# with its userland (ksmbd-tools, which needs libnl-genl-3-200), and the client's mount helper
# (cifs-utils' mount.cifs). Only the guest uses them: they are downloaded, not installed (a
# host mount.cifs would change what the host's tests see), and unpacked into
# $CACHE/smb/root with /sbin and /lib moved below /usr, which the guest copies into its
# overlay (/usr is merged there). Pinned to bookworm's versions, from bookworm's archive.
SMB_DEBS=(cifs-utils=2:7.0-2 ksmbd-tools=3.4.7-1 libnl-genl-3-200=3.7.0-0.2+b1)
install_smb() {
	local sdir=$CACHE/smb apt_dir deb
	local -a apt_opts
	stamp_ok smb "${SMB_DEBS[*]}" && [ -x "$sdir/root/usr/sbin/mount.cifs" ] && return 0
	apt_dir=$sdir/apt
	rm -rf "$sdir"
	mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$sdir/root"
	: >"$apt_dir/status"
	echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" >"$apt_dir/sources.list"
	apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
		-o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::State::status=$apt_dir/status"
		-o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false -o APT::Sandbox::User=root)
	echo "install.sh: fetching the SMB fixture's packages into $sdir: ${SMB_DEBS[*]}" >&2
	apt-get -qq "${apt_opts[@]}" update >&2
	(cd "$apt_dir/debs" && apt-get -qq "${apt_opts[@]}" download "${SMB_DEBS[@]}" >&2)
	for deb in "$apt_dir/debs"/*.deb; do
		dpkg-deb -x "$deb" "$sdir/root"
	done
	for d in sbin lib; do
		if [ -d "$sdir/root/$d" ]; then
			mkdir -p "$sdir/root/usr/$d"
			cp -a "$sdir/root/$d/." "$sdir/root/usr/$d/"
			rm -rf "${sdir:?}/root/$d"
		fi
	done
	[ -x "$sdir/root/usr/sbin/mount.cifs" ] && [ -e "$sdir/root/usr/sbin/ksmbd.mountd" ] ||
		{ echo "install.sh: the SMB packages gave no mount.cifs or ksmbd.mountd" >&2; exit 1; }
	rm -rf "$apt_dir"
	echo "${SMB_DEBS[*]}" >"$BIN/.smb"
}
# shellcheck source=install_nfs.sh
. "$(dirname "${BASH_SOURCE[0]}")/install_nfs.sh"
if $ONLY_KERNELS; then
	install_kernels
	install_nfs
	install_smb
	echo "$BIN"
	exit 0
fi

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
if $ONLY_DEMO; then
	echo "$BIN"
	exit 0
fi
install_kernels
install_nfs
install_smb
if ! stamp_ok golangci-lint "$GOLANGCI_LINT_VERSION"; then
	echo "install.sh: building golangci-lint $GOLANGCI_LINT_VERSION into $BIN (about 3 minutes cold)" >&2
	CGO_ENABLED=0 GOBIN=$BIN go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$GOLANGCI_LINT_VERSION >&2
	echo "$GOLANGCI_LINT_VERSION" >"$BIN/.golangci-lint"
fi
# kube_wrapper DIR: a wrapper module in DIR (in the cache, never in the repository) that
# requires k8s.io/kubernetes. That module cannot be `go install`ed: its go.mod replaces the
# k8s.io/* staging modules with ./staging/src/... directories; the wrapper replaces each of
# them with its published release instead (v1.X.Y -> v0.X.Y). The caller writes DIR/tools.go
# (the packages to keep) and runs go mod tidy.
kube_wrapper() {
	local mod=$1 gomod staging_version n
	rm -rf "$mod"
	mkdir -p "$mod"
	gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[ -f "$gomod" ] || { echo "install.sh: no go.mod for k8s.io/kubernetes@$KUBERNETES_VERSION" >&2; exit 1; }
	staging_version=v0.${KUBERNETES_VERSION#v1.}
	{
		echo "module mountkeeper.test/$(basename "$mod")"
		echo
		echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
		echo
		echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
		echo
		# The `k8s.io/X => ./staging/src/k8s.io/X` lines, in a replace block or standalone.
		awk -v v="$staging_version" '{ i = ($1 == "replace") ? 2 : 1 }
			$i ~ /^k8s\.io\// && $(i+1) == "=>" && $(i+2) ~ /^\.\/staging\// { print "replace " $i " => " $i " " v }' "$gomod"
	} >"$mod/go.mod"
	n=$(grep -c '^replace ' "$mod/go.mod" || true)
	[ "$n" -gt 0 ] || { echo "install.sh: found no staging modules in $gomod" >&2; exit 1; }
}
if ! stamp_ok kubernetes "$KUBERNETES_VERSION"; then
	echo "install.sh: building kubelet and kube-apiserver $KUBERNETES_VERSION into $BIN (about 10 minutes cold)" >&2
	mod=$CACHE/kubernetes-build
	kube_wrapper "$mod"
	cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
	(cd "$mod" && go mod tidy >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/kubelet" k8s.io/kubernetes/cmd/kubelet >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver >&2)
	echo "$KUBERNETES_VERSION" >"$BIN/.kubernetes"
fi
# The upstream e2e suite (test/e2e/upstream_test.go) and what its cluster needs besides
# kubelet and kube-apiserver: the controller-manager and the scheduler, kubectl (the framework
# calls it to dump state on failure), agnhost (the suite's main test image, built into an
# image by the harness), ginkgo (runs the suite in parallel) and the suite itself, e2e.test.
# Its own wrapper module and stamp, so kubelet is not rebuilt.
if ! stamp_ok kubernetes-e2e "$KUBERNETES_VERSION"; then
	echo "install.sh: building kube-controller-manager, kube-scheduler, kubectl, agnhost, ginkgo and e2e.test $KUBERNETES_VERSION into $BIN (about 10 minutes cold)" >&2
	mod=$CACHE/kubernetes-e2e-build
	kube_wrapper "$mod"
	src=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -f "$src/test/e2e/e2e_test.go" ] || { echo "install.sh: no k8s.io/kubernetes sources at '$src'" >&2; exit 1; }
	{
		printf '//go:build tools\n\npackage tools\n\nimport (\n'
		printf '\t_ "%s"\n' github.com/onsi/ginkgo/v2/ginkgo k8s.io/kubernetes/cmd/kube-controller-manager \
			k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/test/images/agnhost \
			k8s.io/kubernetes/test/e2e
		# go mod tidy keeps the modules of the main module's imports, not those of a
		# dependency's tests: every non-standard import of the suite's test file is listed.
		sed -n '/^import (/,/^)/p' "$src/test/e2e/e2e_test.go" | grep -o '"[^"/]*\.[^"]*"' | tr -d '"' | sort -u | sed 's/^/\t_ "/; s/$/"/'
		printf ')\n'
	} >"$mod/tools.go"
	(cd "$mod" && go mod tidy >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/kubectl" k8s.io/kubernetes/cmd/kubectl >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/agnhost" k8s.io/kubernetes/test/images/agnhost >&2 &&
		CGO_ENABLED=0 go build -o "$BIN/ginkgo" github.com/onsi/ginkgo/v2/ginkgo >&2 &&
		CGO_ENABLED=0 go test -c -o "$BIN/e2e.test" k8s.io/kubernetes/test/e2e >&2)
	echo "$KUBERNETES_VERSION" >"$BIN/.kubernetes-e2e"
fi
if ! stamp_ok crio "$CRIO_VERSION"; then
	# `go install github.com/cri-o/cri-o/cmd/crio@v1.34.0` fails: the proxy serves that one
	# version but refuses the module's version list (403), which go install reads for
	# deprecations. A wrapper module in the cache requires it instead, with a copy of cri-o's
	# own go.sum so every dependency is checked against what cri-o recorded. pinns (the
	# namespace pinner CRI-O runs for each pod) is C: compiled from the same module's sources.
	echo "install.sh: building crio and pinns $CRIO_VERSION into $BIN (about 4 minutes cold)" >&2
	mod=$CACHE/crio-build
	rm -rf "$mod"
	mkdir -p "$mod"
	src=$(cd "$mod" && go mod download -json "github.com/cri-o/cri-o@$CRIO_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -f "$src/go.sum" ] && [ -f "$src/pinns/src/pinns.c" ] || { echo "install.sh: no cri-o sources at '$src'" >&2; exit 1; }
	{
		echo "module mountkeeper.test/crio-build"
		echo
		echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')"
		echo
		echo "require github.com/cri-o/cri-o $CRIO_VERSION"
	} >"$mod/go.mod"
	cp "$src/go.sum" "$mod/go.sum"
	chmod u+w "$mod/go.sum"
	cat >"$mod/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/cri-o/cri-o/cmd/crio"
GO
	# The tags leave out what needs libraries this machine lacks (gpgme, btrfs,
	# devicemapper); seccomp uses libseccomp-dev.
	(cd "$mod" && go mod tidy >&2 &&
		CGO_ENABLED=1 go build -tags "containers_image_openpgp exclude_graphdriver_btrfs exclude_graphdriver_devicemapper seccomp" \
			-o "$BIN/crio" github.com/cri-o/cri-o/cmd/crio >&2)
	gcc -std=c99 -O2 -Wall -static -o "$BIN/pinns" "$src"/pinns/src/*.c >&2
	echo "$CRIO_VERSION" >"$BIN/.crio"
fi
# remove_all_sd leaves out Prometheus's service-discovery plugins (the cloud SDKs), which
# `check rules` and `test rules` never use: 134 s instead of 309 s with an empty build cache,
# measured one after the other on one 2-core machine.
PROMTOOL_TAGS=remove_all_sd
if ! stamp_ok promtool "$PROMETHEUS_MODULE_VERSION $PROMTOOL_TAGS"; then
	echo "install.sh: building promtool $PROMETHEUS_MODULE_VERSION (-tags $PROMTOOL_TAGS) into $BIN (about 2-3 minutes cold)" >&2
	CGO_ENABLED=0 GOBIN=$BIN go install -tags "$PROMTOOL_TAGS" github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION >&2
	echo "$PROMETHEUS_MODULE_VERSION $PROMTOOL_TAGS" >"$BIN/.promtool"
fi
echo "$BIN"
