//go:build smbguest

// The SMB tests mount a real share with the real mount.cifs and the kernel's cifs client. They
// need an SMB server this test may reconfigure (its users' passwords): the kernel's ksmbd that
// test/vm's TestSMB starts in a QEMU guest. They are compiled only with the smbguest tag, by
// TestSMB, and run only in that guest: make unit never builds them.

package netmount

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
	"github.com/mountkeeper/mountkeeper/test/testenv"
)

// What TestSMB's guest fixture tells the tests.
const (
	smbShareEnv   = "MOUNTKEEPER_SMB_SHARE"    // //127.0.0.1/share, served by ksmbd
	smbUserEnv    = "MOUNTKEEPER_SMB_USER"     // the share's one allowed user
	smbFileEnv    = "MOUNTKEEPER_SMB_FILE"     // a file in the share, relative to its root
	smbContentEnv = "MOUNTKEEPER_SMB_CONTENT"  // what that file holds
	smbArgvLogEnv = "MOUNTKEEPER_SMB_ARGV_LOG" // where the mount.cifs wrapper logs its argv and mount(8)'s
)

type smbServer struct {
	share, user, file, content, argvLog string
}

func needSMBServer(t *testing.T) smbServer {
	t.Helper()
	s := smbServer{share: os.Getenv(smbShareEnv), user: os.Getenv(smbUserEnv), file: os.Getenv(smbFileEnv),
		content: os.Getenv(smbContentEnv), argvLog: os.Getenv(smbArgvLogEnv)}
	if s.share == "" || s.user == "" || s.file == "" || s.argvLog == "" {
		testenv.Skip(t, "no SMB server: these tests run in test/vm's TestSMB guest (%s unset)", smbShareEnv)
	}
	testenv.Require(t, "root", "ksmbd.adduser", "ksmbd.control", "mount.cifs")
	return s
}

// setPassword makes pw the password of the share's user on the server, as an administrator
// rotating it would, and has ksmbd.mountd reread its users.
func (s smbServer) setPassword(t *testing.T, pw string) {
	t.Helper()
	out, err := exec.Command("ksmbd.adduser", "-u", s.user, "-p", pw).CombinedOutput()
	if err != nil {
		out, err = exec.Command("ksmbd.adduser", "-a", s.user, "-p", pw).CombinedOutput()
	}
	if err != nil {
		t.Fatalf("ksmbd.adduser: %v: %s", err, out)
	}
	if out, err := exec.Command("ksmbd.control", "-r").CombinedOutput(); err != nil {
		t.Fatalf("ksmbd.control -r: %v: %s", err, out)
	}
}

func randomPassword(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "pw-" + hex.EncodeToString(b)
}

// writeCredentials writes the operator's credentials file as mount.cifs reads it, root's
// alone (0600 in a 0700 directory), replacing it atomically as a rotation should.
func writeCredentials(t *testing.T, path, user, pw string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte("username="+user+"\npassword="+pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// smbManager is a Manager on the live host (mount.cifs in cgroups of its own below a parent
// the test removes), logging into log.
func smbManager(t *testing.T, log *bytes.Buffer) (*Manager, string) {
	t.Helper()
	root, err := liveCgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	sc := &CgroupScoper{Root: root, Parent: "mountkeeper-smb-test.slice"}
	l := logrus.New()
	l.SetOutput(&lockedWriter{w: log})
	l.SetLevel(logrus.DebugLevel)
	stateDir := filepath.Join(t.TempDir(), "state")
	m, err := NewManager(Config{StateDir: stateDir, Grace: 300 * time.Millisecond, RetryBackoff: 200 * time.Millisecond,
		MountTimeout: 30 * time.Second, FirstWait: 20 * time.Second, Scoper: sc, Log: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Close()
		t.Logf("the Manager's log:\n%s", log)
		// The Manager leaves its mounts (an agent's restart adopts them) and its shared
		// mounts directory: the test removes them.
		infos, _ := mountinfo.GetMounts(mountinfo.PrefixFilter(stateDir))
		for i := len(infos) - 1; i >= 0; i-- {
			if err := unix.Unmount(infos[i].Mountpoint, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", infos[i].Mountpoint, err)
			}
		}
		if err := endCgroupTree(filepath.Join(root, sc.Parent)); err != nil {
			t.Error(err)
		}
	})
	return m, stateDir
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// watchCmdlines reads every process's command line until stop is closed, and returns those
// that held secret: the mount helper's among them while it runs.
func watchCmdlines(secret string) (stop func() []string) {
	done := make(chan struct{})
	var found []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			for _, pid := range allPids() {
				b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
				if bytes.Contains(b, []byte(secret)) {
					found = append(found, strings.ReplaceAll(string(b), "\x00", " "))
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	return func() []string {
		close(done)
		wg.Wait()
		return found
	}
}

// readShare reads the fixture's file through the mount at path.
func (s smbServer) readShare(t *testing.T, path string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(path, s.file))
	if err != nil {
		t.Fatalf("read %s through the SMB mount: %v", s.file, err)
	}
	if string(got) != s.content {
		t.Fatalf("%s holds %q, want %q", s.file, got, s.content)
	}
}

// smbClass is a test's CIFS class on the fixture's share: the share user's password set to a
// new one (pw) on the server and in the operator's credentials file (creds), and a Manager
// logging into log.
type smbClass struct {
	srv      smbServer
	pw       string
	creds    string
	spec     netspec.Spec
	m        *Manager
	stateDir string
	log      *bytes.Buffer
}

func newSMBClass(t *testing.T) *smbClass {
	t.Helper()
	c := &smbClass{srv: needSMBServer(t), pw: randomPassword(t), creds: filepath.Join(t.TempDir(), "etc", "smb-credentials"), log: &bytes.Buffer{}}
	c.srv.setPassword(t, c.pw)
	c.writeCredentials(t, c.pw)
	c.m, c.stateDir = smbManager(t, c.log)
	c.spec = netspec.Spec{Type: "cifs", Source: c.srv.share, Options: []string{"credentials=" + c.creds, "vers=3.0"}}
	return c
}

// writeCredentials makes pw the password of the class's credentials file.
func (c *smbClass) writeCredentials(t *testing.T, pw string) {
	t.Helper()
	writeCredentials(t, c.creds, c.srv.user, pw)
}

// release releases the users' claims and waits for the mount to be gone after its grace.
func (c *smbClass) release(t *testing.T, users ...string) {
	t.Helper()
	for _, u := range users {
		c.m.Release(u)
	}
	eventually(t, "the mount is gone after its grace period", func() bool { return len(c.m.Status()) == 0 })
}

// filesHolding lists the files below dir that hold secret.
func filesHolding(t *testing.T, dir, secret string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
				out = append(out, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A CIFS class whose password is in the operator's root-only credentials file: the mount
// reads the share, and the password is on no command line (mount(8)'s and mount.cifs's argv,
// as the helper saw them, and every process's during the mount), in no log line, in no state
// file, and not in mountinfo.
func TestSMBCredentialsFile(t *testing.T) {
	c := newSMBClass(t)
	srv, pw, creds, m, spec := c.srv, c.pw, c.creds, c.m, c.spec
	os.WriteFile(srv.argvLog, nil, 0o600)

	stop := watchCmdlines(pw)
	began := time.Now()
	path, err := acquire(t, m, 30*time.Second, spec, "ctr-1")
	took := time.Since(began)
	onCmdlines := stop()
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Logf("mounted %s in %v", spec, took.Round(time.Millisecond))
	srv.readShare(t, path)

	argv, err := os.ReadFile(srv.argvLog)
	if err != nil || !bytes.Contains(argv, []byte("credentials="+creds)) {
		t.Fatalf("the mount.cifs wrapper did not log the helper's argv with credentials=%s (%v):\n%s", creds, err, argv)
	}
	t.Logf("the helper's and mount(8)'s command lines:\n%s", argv)
	if bytes.Contains(argv, []byte(pw)) {
		t.Errorf("the password is on the helper's command line:\n%s", argv)
	}
	if len(onCmdlines) > 0 {
		t.Errorf("the password was on command lines during the mount: %q", onCmdlines)
	}
	if strings.Contains(c.log.String(), pw) {
		t.Errorf("the password is in the log:\n%s", c.log.String())
	}
	if files := filesHolding(t, c.stateDir, pw); len(files) > 0 {
		t.Errorf("the password is in the state directory's files %v", files)
	}
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mi, []byte(pw)) {
		t.Errorf("the password is in mountinfo")
	}

	c.release(t, "ctr-1")
	if ok, _ := (&liveSystem{}).isMounted(path); ok {
		t.Errorf("%s is still mounted after the release", path)
	}
}

// A wrong password is refused with a message naming the server, the share, that
// authentication failed, and where to fix it (the credentials file), in the mount's status and
// in Acquire's answer; the attempts go on, and the fixed file mounts at the next one.
func TestSMBWrongPassword(t *testing.T) {
	c := newSMBClass(t)
	srv, creds, m, spec := c.srv, c.creds, c.m, c.spec
	wrong := randomPassword(t)
	c.writeCredentials(t, wrong)

	_, err := acquire(t, m, 30*time.Second, spec, "ctr-1")
	if err == nil {
		t.Fatal("a wrong password mounted")
	}
	t.Logf("Acquire: %v", err)
	// The user name is in the operator's file, which the message does not read.
	for _, want := range []string{srv.share, "127.0.0.1:445", "authentication failed",
		"credentials file " + creds, "not ready"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	st := m.Status()
	if len(st) != 1 || !strings.Contains(st[0].LastError, "authentication failed") {
		t.Errorf("status %+v, want the mount's last error to say the authentication failed", st)
	}
	if strings.Contains(c.log.String(), wrong) || strings.Contains(err.Error(), wrong) {
		t.Errorf("the wrong password is in the log or the error")
	}

	c.writeCredentials(t, c.pw)
	path, err := acquireEventually(t, m, 40*time.Second, spec, "ctr-1")
	if err != nil {
		t.Fatalf("the fixed credentials file did not mount: %v", err)
	}
	srv.readShare(t, path)
	c.release(t, "ctr-1")
}

// Rotation, as docs/network-filesystems.md describes it: the password changes on the server,
// then in the credentials file. The mount made with the old one goes on serving its
// containers (the kernel's SMB session stays authenticated), new containers share it, and the
// next mount of the class reads the new password from the file.
func TestSMBRotateCredentials(t *testing.T) {
	c := newSMBClass(t)
	srv, m, spec := c.srv, c.m, c.spec
	path, err := acquire(t, m, 30*time.Second, spec, "ctr-1")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	srv.readShare(t, path)

	rotated := randomPassword(t)
	srv.setPassword(t, rotated)
	srv.readShare(t, path)
	c.writeCredentials(t, rotated)
	srv.readShare(t, path)
	// Something written after the rotation goes through the old session too.
	probe := filepath.Join(path, "after-rotation")
	if err := os.WriteFile(probe, []byte("x"), 0o644); err != nil {
		t.Fatalf("write through the mount after the rotation: %v", err)
	}
	os.Remove(probe)
	path2, err := acquire(t, m, 30*time.Second, spec, "ctr-2")
	if err != nil || path2 != path {
		t.Fatalf("a new container of the class: %q, %v; want the same mount %s", path2, err, path)
	}

	c.release(t, "ctr-1", "ctr-2")
	path3, err := acquire(t, m, 30*time.Second, spec, "ctr-3")
	if err != nil {
		t.Fatalf("the next mount, with the rotated password in the file: %v", err)
	}
	srv.readShare(t, path3)
	c.release(t, "ctr-3")
}
