package vm

import (
	"fmt"
	"strings"
)

// initScript is the initramfs's /init. It loads the boot modules, mounts the host's root
// (virtiofs tag "hostroot") read-only, overlays a tmpfs on it, shows the kernel's modules at
// /usr/lib/modules, and switch_roots to /bin/sh running the run's script ($RUN, from
// /config). Any failure powers the guest off with a message on the console; the host then
// finds no exit status.
const initScript = `#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
fail() { echo "mountkeeper-vm init: $*"; poweroff -f; }
. /config
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "$m" || fail "insmod $m"; done </modules/order
mount -t virtiofs -o ro hostroot /lower || fail "mount virtiofs"
mount -t tmpfs -o mode=0755 tmpfs /rw || fail "mount tmpfs"
mkdir /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || fail "mount overlay"
mkdir -p /newroot/usr/lib/modules
mount --bind "/lower$MODULES" /newroot/usr/lib/modules || fail "bind modules"
for d in proc sys dev; do mount --move /$d /newroot/$d || fail "move /$d"; done
exec switch_root /newroot /bin/sh "$RUN"
`

// runScript is the script init hands the guest to, run as PID 1 in the host's userland. It
// gives the guest what a booted Debian system has and the tests use (/tmp, /run and /dev/shm
// as tmpfs, devpts, the unified cgroup hierarchy, a loopback interface), runs the command with
// its output on the second serial port and writes its exit status to the third; then powers
// off. A guest that never gets there leaves no status.
func runScript(dir string, env []string, argv []string) string {
	var b strings.Builder
	b.WriteString(`set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
bb=` + busybox + `
# A working directory below /tmp (a checkout there) stays visible through the guest's own /tmp:
# the overlay's /tmp is bound aside first, and the directory bound back from it.
mkdir -p /var/tmp/.host-tmp && mount --bind /tmp /var/tmp/.host-tmp
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run
mkdir -p /run/lock /dev/shm /dev/pts /dev/mqueue
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts
ln -sf pts/ptmx /dev/ptmx
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t mqueue mqueue /dev/mqueue
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
$bb hostname mountkeeper-vm
$bb ip link set lo up
$bb stty -F /dev/ttyS1 raw -echo
$bb stty -F /dev/ttyS2 raw -echo
`)
	for _, kv := range env {
		b.WriteString("export " + shellQuote(kv) + "\n")
	}
	if rest, ok := strings.CutPrefix(dir, "/tmp/"); ok {
		fmt.Fprintf(&b, "mkdir -p %s && mount --bind %s %s\n", shellQuote(dir), shellQuote("/var/tmp/.host-tmp/"+rest), shellQuote(dir))
	}
	fmt.Fprintf(&b, "cd %s || exit 1\n", shellQuote(dir))
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shellQuote(a)
	}
	fmt.Fprintf(&b, "%s </dev/null >/dev/ttyS1 2>&1\n", strings.Join(quoted, " "))
	b.WriteString("echo \"exit $?\" >/dev/ttyS2\nsync\n$bb poweroff -f\n")
	return b.String()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
