//go:build kernels

package vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// nfsKernel is the one kernel NFS is mounted on: Debian 12's, the README's platform. A guest
// costs about a minute of the suite's time under TCG (an NFSv4 mount alone takes 6-8 s).
const nfsKernel = "6.1"

// nfsPackages are the guest-only NFS tests, run in this order in one guest: test/e2e's
// TestGuestNFSDeadServer (tags e2e and guestnfs: containerd, runc and the plugin binary), on a
// node without the NFS client until it installs it; internal/netmount's (build tag guestnfs,
// TestNFSGuest*: the Manager); test/e2e's TestGuestNFS (the plugin binary) and
// TestGuestNFSHook (runc and the hook binary).
var nfsPackages = []struct{ pkg, tags, run string }{
	{"test/e2e", "e2e guestnfs", "^TestGuestNFSDeadServer$"},
	{"internal/netmount", "guestnfs", "^TestNFSGuest"},
	{"test/e2e", "e2e guestnfs", "^TestGuestNFS(Hook)?$"},
}

// nfsControl is TestGuestNFSDeadServer's control, a measurement rather than a test of
// mountkeeper: a node without it, with a dead hard mount made by hand. With
// MOUNTKEEPER_NFS_CONTROL=1 (make nfs-control) TestNFS runs only the two of them, in one guest.
var nfsControl = []struct{ pkg, tags, run string }{
	{"test/e2e", "e2e guestnfs", "^(TestGuestNFSDeadServer|TestGuestNFSDeadMountWithoutPlugin)$"},
}

// guestTestLine matches a line the guest-only tests logged: their files all have "guest" in
// their names (nfs_guest_test.go, guest_nfs_test.go, fixtures_guestnfsdead_test.go, ...).
var guestTestLine = regexp.MustCompile(`\b\w*guest\w*_test\.go:\d+: `)

// NFSRoot is where test/tools/install.sh (install_nfs) unpacks Debian 12's NFS server and
// client debs.
func NFSRoot() string { return filepath.Join(filepath.Dir(KernelsDir()), "nfs", "root") }

// nfsServerScript starts the kernel nfsd in the guest, serving a tmpfs at /export to
// 127.0.0.1, with the server's programs run from the unpacked debs: mount.nfs (the client)
// stays uninstalled, so that the tests see a node without it first. The v4 lease and grace
// are 10 s, set before nfsd starts, or the first v4 mount waits out a 90 s grace period; so is
// lockd's (NLM, v3 locks), 50 s by default.
const nfsServerScript = `set -e
N=$1
cp -a "$N/usr/lib/x86_64-linux-gnu/." /usr/lib/x86_64-linux-gnu/
grep -q '^_rpc:' /etc/passwd || echo '_rpc:x:990:65534::/run/rpcbind:/usr/sbin/nologin' >>/etc/passwd
grep -q '^statd:' /etc/passwd || echo 'statd:x:991:65534::/var/lib/nfs:/usr/sbin/nologin' >>/etc/passwd
mkdir -p /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/lib/nfs/v4recovery /run/rpcbind /export
touch /var/lib/nfs/etab /var/lib/nfs/rmtab
mount -t tmpfs -o mode=0755 tmpfs /export
printf 'served by the guest'"'"'s nfsd\n' >/export/hello
echo '/export 127.0.0.1(rw,no_root_squash,fsid=0,no_subtree_check,insecure)' >/etc/exports
modprobe nfsd
echo 10 >/proc/sys/fs/nfs/nlm_grace_period
mount -t nfsd nfsd /proc/fs/nfsd
echo 10 >/proc/fs/nfsd/nfsv4leasetime
echo 10 >/proc/fs/nfsd/nfsv4gracetime
"$N/usr/sbin/rpcbind" -w
"$N/usr/sbin/exportfs" -ra
"$N/usr/sbin/rpc.mountd"
"$N/usr/sbin/rpc.nfsd" 8
`

// TestNFS mounts NFSv4.2 and NFSv3 for real, through the Manager and mount.nfs and through the
// runtime and the plugin, on Debian 12's kernel in a guest whose own nfsd serves the export:
// the guest-only tests of nfsPackages, reported as TestNFS/6.1/internal_netmount/TestX and
// TestNFS/6.1/test_e2e/TestX (test_e2e#01 for test/e2e's second run).
func TestNFS(t *testing.T) {
	Require(t)
	k, err := LoadKernel(filepath.Join(KernelsDir(), nfsKernel))
	if err != nil {
		testenv.Skip(t, "kernel %s missing (bash test/tools/install.sh kernels installs it): %v", nfsKernel, err)
	}
	nfs := NFSRoot()
	if _, err := os.Stat(filepath.Join(nfs, "usr", "sbin", "mount.nfs")); err != nil {
		testenv.Skip(t, "the NFS debs are missing (bash test/tools/install.sh kernels unpacks them): %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := TempDir(t)
	agent, err := harness.BuildMountkeeper(bin)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := harness.BuildHook(bin)
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(bin, "nfs-server.sh")
	if err := os.WriteFile(script, []byte(nfsServerScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var guest strings.Builder
	fmt.Fprintf(&guest, `s=$(date +%%s%%N)
sh %s %s >/dev/ttyS1 2>&1 || { echo "the NFS server did not start"; exit 1; }
echo "nfsd started in $(( ($(date +%%s%%N) - s) / 1000000 ))ms"
export MOUNTKEEPER_GUEST_NFS_ROOT=%s MOUNTKEEPER_BINARY=%s MOUNTKEEPER_HOOK_BINARY=%s
`, shellQuote(script), shellQuote(nfs), shellQuote(nfs), shellQuote(agent), shellQuote(hook))
	packages := nfsPackages
	if os.Getenv("MOUNTKEEPER_NFS_CONTROL") == "1" {
		packages = nfsControl
	}
	built := map[string]bool{}
	for _, p := range packages {
		exe := filepath.Join(bin, binName(p.pkg))
		if !built[exe] {
			cmd := exec.Command("go", "test", "-c", "-tags", p.tags, "-o", exe, "./"+p.pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go test -c -tags '%s' ./%s: %v\n%s", p.tags, p.pkg, err, out)
			}
			built[exe] = true
		}
		fmt.Fprintf(&guest, `echo '%s%s start'; s=$(date +%%s%%N)
cd %s && %s -test.v -test.count=1 -test.timeout=8m -test.run %s 2>&1
echo "%s%s exit $? $(( ($(date +%%s%%N) - s) / 1000000 ))ms"
`, pkgMarker, p.pkg, shellQuote(filepath.Join(root, p.pkg)), shellQuote(exe), shellQuote(p.run), pkgMarker, p.pkg)
	}
	t.Run(k.Name, func(t *testing.T) {
		res, err := Run(context.Background(), k, Options{Argv: []string{"sh", "-c", guest.String()}, Dir: root, Env: guestEnv(), Timeout: 12 * time.Minute})
		logRun(t, k, res)
		if err != nil {
			t.Fatalf("%v\nconsole:\n%s\noutput:\n%s", err, res.Console, res.Output)
		}
		pkgs := splitPackages(string(res.Output))
		if len(pkgs) == 0 {
			t.Fatalf("the guest ran no NFS test (exit %d):\n%s", res.ExitCode, res.Output)
		}
		for _, p := range pkgs {
			t.Run(binName(p.name), func(t *testing.T) {
				t.Logf("%s on %s: %s", p.name, k.Name, p.took)
				// The figures the NFS tests measure (mount, refusal and release times,
				// threads in D state), which a passing test's replay does not show.
				for _, line := range strings.Split(p.output, "\n") {
					if guestTestLine.MatchString(line) {
						t.Log(strings.TrimSpace(line))
					}
				}
				reportPackage(t, k, p)
			})
		}
	})
}
