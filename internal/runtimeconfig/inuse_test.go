package runtimeconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestInUse: conmon naming a link on its command line and a runc shim whose bundle's
// options.json names one are found, each with what it runs for (conmon's container name, the
// shim's pod sandbox); other processes are not.
func TestInUse(t *testing.T) {
	proc := t.TempDir()
	link := "/opt/mountkeeper/bin/class/mk"
	bundle := t.TempDir()
	if err := os.WriteFile(filepath.Join(bundle, "options.json"), []byte(`{"binary_name":"`+link+`","root":"/run/containerd/runc"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "options.json"), []byte(`{"binary_name":"/usr/bin/runc"}`), 0o600)
	for pid, p := range map[string]struct{ cmdline, cwd string }{
		"100": {"/usr/bin/conmon\x00-b\x00/b\x00-c\x00c0ffee\x00-n\x00k8s_app_web-0_shop_uid_0\x00-r\x00" + link + "\x00", "/"},
		"200": {"/usr/bin/containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00-id\x00abc123\x00-address\x00/run/containerd/containerd.sock\x00", bundle},
		"300": {"/usr/bin/containerd-shim-runc-v2\x00-namespace\x00k8s.io\x00", other},
		"400": {"/bin/sh\x00-c\x00echo " + link + "x\x00", "/"},
	} {
		os.MkdirAll(filepath.Join(proc, pid), 0o755)
		os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(p.cmdline), 0o644)
		os.Symlink(p.cwd, filepath.Join(proc, pid, "cwd"))
	}
	os.MkdirAll(filepath.Join(proc, "self"), 0o755)
	uses, err := InUse(proc, []string{link})
	var got []string
	for _, u := range uses {
		got = append(got, u.String())
	}
	want := []string{"pid 100 (conmon, container k8s_app_web-0_shop_uid_0) runs " + link, "pid 200 (containerd-shim-runc-v2, pod sandbox abc123) runs " + link}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("InUse = %q, %v; want %q", got, err, want)
	}

	// Unconfigure refuses while a class's containers run, naming the process; --force goes on.
	n := newNode(t, "containerd")
	n.write(t, n.o.ConfigFile, kubeadmConfig, 0o644)
	n.configure(t, "mk")
	os.WriteFile(filepath.Join(proc, "100", "cmdline"), []byte("/usr/bin/conmon\x00-r\x00"+n.o.classLink("mk")+"\x00"), 0o644)
	if _, err := Unconfigure(n.o, nil, proc, false); err == nil || !strings.Contains(err.Error(), "pid 100 (conmon) runs "+n.o.classLink("mk")) || !strings.Contains(err.Error(), "remove the class pods first") {
		t.Errorf("Unconfigure with a class container running: %v", err)
	}
	if p, err := Unconfigure(n.o, nil, proc, true); err != nil || len(p.Changes) == 0 {
		t.Errorf("Unconfigure --force: %v, %d changes", err, len(p.Changes))
	}
}
