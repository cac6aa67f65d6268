//go:build kernels

package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// smbKernel is the kernel the SMB tests run on (server and client in one guest): Debian 13's.
// Debian 12's 6.1.176 was the choice, but its ksmbd oopses in smb2_open (opinfo_put on NULL)
// at the cifs client's first open, whatever the share's filesystem and with leases and
// oplocks off, and the mount never returns. One kernel keeps the matrix's time down.
var smbKernel = "6.12"

// smbPackage holds the guest-only SMB tests (build tag smbguest).
const smbPackage = "internal/netmount"

// smbUser is the share's one allowed user; each test sets its password.
const smbUser = "mkuser"

// TestSMB mounts SMB for real: it boots the 6.1 kernel, starts the kernel's own SMB server
// (ksmbd, with ksmbd-tools' ksmbd.mountd) on a share in the guest, and runs netmount's
// guest-only SMB tests (internal/netmount/smb_guest_test.go, tag smbguest) there: real
// mount.cifs, real cifs client. Their results come back as subtests:
// TestSMB/6.1/internal_netmount/TestSMBCredentialsFile.
func TestSMB(t *testing.T) {
	Require(t)
	var ks []Kernel
	for _, name := range strings.Fields(smbKernel) {
		k, err := LoadKernel(filepath.Join(KernelsDir(), name))
		if err != nil {
			testenv.Skip(t, "kernel %s missing (bash test/tools/install.sh kernels installs it): %v", name, err)
		}
		ks = append(ks, k)
	}
	smbRoot := filepath.Join(filepath.Dir(KernelsDir()), "smb", "root")
	for _, p := range []string{"usr/sbin/mount.cifs", "usr/sbin/ksmbd.mountd"} {
		if _, err := os.Stat(filepath.Join(smbRoot, p)); err != nil {
			testenv.Skip(t, "the SMB fixture's packages are missing (bash test/tools/install.sh kernels fetches them): %v", err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := TempDir(t)
	began := time.Now()
	cmd := exec.Command("go", "test", "-c", "-tags", "smbguest", "-o", filepath.Join(bin, binName(smbPackage)), "./"+smbPackage)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags smbguest ./%s: %v\n%s", smbPackage, err, out)
	}
	t.Logf("compiled %s's test binary in %v", smbPackage, time.Since(began).Round(time.Millisecond))
	for _, k := range ks {
		t.Run(k.Name, func(t *testing.T) {
			res, err := Run(context.Background(), k, Options{
				Argv:    []string{"sh", "-c", smbGuestScript(smbRoot, root, bin)},
				Dir:     root,
				Env:     guestEnv(),
				Timeout: 4 * time.Minute,
			})
			logRun(t, k, res)
			if err != nil {
				t.Fatalf("%v\nconsole:\n%s\noutput:\n%s", err, res.Console, res.Output)
			}
			fixture, _, _ := strings.Cut(string(res.Output), pkgMarker)
			t.Logf("fixture:\n%s", fixture)
			pkgs := splitPackages(string(res.Output))
			if len(pkgs) == 0 {
				t.Fatalf("the SMB fixture failed in the guest (exit %d):\n%s", res.ExitCode, res.Output)
			}
			for _, p := range pkgs {
				t.Run(binName(p.name), func(t *testing.T) {
					t.Logf("%s on %s: %s", p.name, k.Name, p.took)
					reportPackage(t, k, p)
				})
			}
		})
	}
}

// smbGuestScript sets up the SMB server in the guest and runs the SMB tests, marked as
// guestScript marks a package. The fixture's packages (test/tools/install.sh install_smb) are
// copied into the guest's overlay; mount.cifs is wrapped by a script that logs its argv and its
// parent's (mount(8)'s) before it runs the real one, so the tests see what the helper's
// command line held.
func smbGuestScript(smbRoot, root, bin string) string {
	share := "/srv/smb/share"
	env := []string{
		"MOUNTKEEPER_SMB_SHARE=//127.0.0.1/share",
		"MOUNTKEEPER_SMB_USER=" + smbUser,
		"MOUNTKEEPER_SMB_FILE=hello.txt",
		"MOUNTKEEPER_SMB_CONTENT=hello from ksmbd\n",
		"MOUNTKEEPER_SMB_ARGV_LOG=/run/mount.cifs.argv",
	}
	var b strings.Builder
	fmt.Fprintf(&b, `set -e
s=$(date +%%s%%N)
cp -a %[1]s/usr/. /usr/
cp -a %[1]s/etc/. /etc/
mv /usr/sbin/mount.cifs /usr/sbin/mount.cifs.real
cat >/usr/sbin/mount.cifs <<'EOF'
#!/bin/bash
{ printf 'mount.cifs:'; printf ' %%s' "$@"; printf '\nmount(8): '; tr '\0' ' ' </proc/$PPID/cmdline; echo; } >>/run/mount.cifs.argv
exec -a mount.cifs /usr/sbin/mount.cifs.real "$@"
EOF
chmod 755 /usr/sbin/mount.cifs
modprobe ksmbd
mkdir -p %[2]s
mount -t tmpfs -o mode=0777,size=64m smbshare %[2]s
printf 'hello from ksmbd\n' >%[2]s/hello.txt
mkdir -p /etc/ksmbd
cat >/etc/ksmbd/ksmbd.conf <<'EOF'
[global]
	netbios name = mountkeeper-vm
	smb2 leases = no
[share]
	oplocks = no
	store dos attributes = no
	path = %[2]s
	writeable = yes
	valid users = %[3]s
EOF
ksmbd.adduser -a %[3]s -p fixture-unused-password
ksmbd.mountd
i=0
until grep -q ':01BD [0-9A-F]*:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
	i=$((i+1)); [ $i -lt 200 ] || { echo "ksmbd does not listen on port 445:"; cat /proc/net/tcp /proc/net/tcp6; ps -ef; dmesg | tail -20; exit 1; }
	sleep 0.1
done
echo "ksmbd (ksmbd-tools $(ksmbd.control -V 2>&1 | head -1), module $(modinfo -F version ksmbd 2>/dev/null)) serves %[2]s after $(( ($(date +%%s%%N) - s) / 1000000 ))ms"
set +e
`, shellQuote(smbRoot), share, smbUser)
	for _, kv := range env {
		b.WriteString("export " + shellQuote(kv) + "\n")
	}
	fmt.Fprintf(&b, "echo '%s%s start'; s=$(date +%%s%%N)\n", pkgMarker, smbPackage)
	fmt.Fprintf(&b, "cd %s && MOUNTKEEPER_PRIVATE_MOUNT_NS=$(readlink /proc/self/ns/mnt) unshare -m --propagation private %s -test.v -test.count=1 -test.timeout=3m -test.run '^TestSMB' 2>&1\n",
		shellQuote(filepath.Join(root, smbPackage)), shellQuote(filepath.Join(bin, binName(smbPackage))))
	fmt.Fprintf(&b, "echo \"%s%s exit $? $(( ($(date +%%s%%N) - s) / 1000000 ))ms\"\n", pkgMarker, smbPackage)
	b.WriteString("echo '=== the guest kernel log (cifs, ksmbd):'; dmesg | grep -i -E 'cifs|ksmbd|smb' | tail -40\n")
	return b.String()
}
