package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// The images the Kubernetes e2e suite (k8s.io/kubernetes test/e2e at KubernetesVersion) runs
// its subPath and volume tests with, by the names of test/utils/image/manifest.go. No
// registry is reachable: ImportUpstreamImages builds them here. The suite's own list (`e2e.test
// --list-images`) must name each of them, which the test checks, so a version bump that
// changes one fails loudly instead of pulling.
const (
	UpstreamAgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.56"
	UpstreamBusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	UpstreamPauseImage   = "registry.k8s.io/pause:3.10.1"
)

// UpstreamImageNames lists the images ImportUpstreamImages imports.
func UpstreamImageNames() []string {
	return []string{UpstreamAgnhostImage, UpstreamBusyboxImage, UpstreamPauseImage}
}

// upstreamImageFormat is part of the archive's cache key, as imageFormat.
const upstreamImageFormat = "mk-upstream-images-v3"

// ImportUpstreamImages imports the e2e suite's images into the instance's k8s.io namespace:
//   - agnhost: the static agnhost binary (built by install.sh from the kubernetes module) at
//     /agnhost as the entrypoint with `pause` as its default argument, like upstream's image,
//     on top of Debian's static busybox (upstream's is Alpine, whose busybox gives the
//     tests their sh, mount, nsenter...), with upstream's user-defined-in-image (uid 1000)
//     and group-defined-in-image (gid 50000), and hostNsenter in front of busybox's nsenter;
//   - busybox: Debian's static busybox, as BusyboxImage;
//   - pause: the harness's pause.
//
// The archive is cached under cacheDir()/images by the hash of what goes into it.
func (c *Containerd) ImportUpstreamImages(ctx context.Context, agnhostPath string) error {
	agnhost, err := os.ReadFile(agnhostPath)
	if err != nil {
		return fmt.Errorf("agnhost: %w (test/tools/install.sh builds it)", err)
	}
	f, err := elf.NewFile(bytes.NewReader(agnhost))
	if err != nil {
		return fmt.Errorf("%s: %w", agnhostPath, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: the agnhost image has no libc (build it with CGO_ENABLED=0, as install.sh does)", agnhostPath)
		}
	}
	busybox, err := loadBusybox()
	if err != nil {
		return err
	}
	key := sha256.New()
	for _, part := range [][]byte{[]byte(upstreamImageFormat), []byte(runtime.GOARCH), []byte(pauseSource), busybox.binary, agnhost} {
		fmt.Fprintf(key, "%d:", len(part))
		key.Write(part)
	}
	dir := filepath.Join(cacheDir(), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		dir = c.Dir()
	}
	name := "upstream-" + hex.EncodeToString(key.Sum(nil))[:16] + ".tar"
	archive := filepath.Join(dir, name)
	if _, err := os.Stat(archive); err != nil {
		pause, err := buildPause(ctx, c.Dir())
		if err != nil {
			return err
		}
		data, err := ociArchive(upstreamImages(busybox, agnhost, pause))
		if err != nil {
			return err
		}
		if err := writeFileAtomic(dir, name, data); err != nil {
			return err
		}
	}
	if err := importImages(ctx, c.opts.BinDir, c.layout.socket(), archive); err != nil {
		return err
	}
	return c.waitImages(ctx, UpstreamImageNames()...)
}

// hostNsenter is the agnhost image's nsenter (first on PATH; busybox's does the work). The
// suite's host-exec pods (privileged, the host's / at /rootfs) run `nsenter
// --mount=/rootfs/proc/1/ns/mnt -- sh -c CMD` to run CMD in the node's mount namespace: the
// local volume driver makes its directories, loop devices, file systems and bind mounts that
// way. Two things differ from upstream's Alpine image and are undone here:
//   - PID 1 of the machines this suite runs on (a VM's init) does not let even root open its
//     namespaces (permission denied), while kthreadd, PID 2, is always in the initial
//     namespaces: when PID 1's mount namespace cannot be opened, the shim enters PID 2's;
//   - Debian's static busybox runs a program named without a path as its own applet if it
//     has one, so `sh -c CMD` would be busybox's shell running busybox's losetup and mkfs in
//     the host's file system: `sh` becomes /bin/sh, the host's shell with the host's tools.
const hostNsenter = `#!/bin/sh
program=
for a do
	shift
	case $program$a in
	--mount=*/proc/1/ns/mnt)
		p=${a#--mount=}
		[ -e "$p" ] || a="--mount=${p%/1/ns/mnt}/2/ns/mnt"
		;;
	--) program=next ;;
	nextsh) a=/bin/sh; program=done ;;
	next*) program=done ;;
	esac
	set -- "$@" "$a"
done
exec /bin/busybox nsenter "$@"
`

// upstreamImages lays out the three images (see ImportUpstreamImages).
func upstreamImages(b *busybox, agnhost, pause []byte) []imageSpec {
	bb := b.image()
	bb.name = UpstreamBusyboxImage

	ag := b.image()
	ag.name = UpstreamAgnhostImage
	files := map[string]fileEntry{}
	for _, e := range ag.files {
		files[e.name] = e
	}
	files["agnhost"] = fileEntryOf("agnhost", 0o755, agnhost)
	files["agnhost-2"] = symlinkEntry("agnhost-2", "agnhost")
	files["uploads"] = dirEntry("uploads", 0o755)
	files["usr/local"] = dirEntry("usr/local", 0o755)
	files["usr/local/sbin"] = dirEntry("usr/local/sbin", 0o755)
	files["usr/local/sbin/nsenter"] = fileEntryOf("usr/local/sbin/nsenter", 0o755, []byte(hostNsenter))
	files["etc/passwd"] = fileEntryOf("etc/passwd", 0o644,
		[]byte("root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"))
	files["etc/group"] = fileEntryOf("etc/group", 0o644,
		[]byte("root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"))
	ag.files = sortedEntries(files)
	ag.entrypoint, ag.cmd = []string{"/agnhost"}, []string{"pause"}

	p := pauseImage(pause)
	p.name = UpstreamPauseImage
	return []imageSpec{ag, bb, p}
}
