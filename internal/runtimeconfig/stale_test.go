package runtimeconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/internal/runtimewrap"
)

// TestConfigureKeepsClassInUse: a class dropped from the config whose containers the runtime
// still runs (its conmon names the class link) keeps its link, entry and handler, with a note
// naming the process, so that the runtime can still stop them; the next configure after they
// are gone removes all three. Unconfigure's check is the same function (TestInUse).
func TestConfigureKeepsClassInUse(t *testing.T) {
	for _, runtime := range []string{"containerd", "crio"} {
		t.Run(runtime, func(t *testing.T) {
			n := newNode(t, runtime)
			if runtime == "containerd" {
				n.write(t, n.o.ConfigFile, kubeadmConfig, 0o644)
			} else {
				n.write(t, n.o.ConfigFile, crioMain, 0o644)
			}
			n.configure(t, "mk-a", "mk-b")
			entryB, _ := os.ReadFile(n.o.classLink("mk-b") + runtimewrap.EntrySuffix)
			proc := t.TempDir()
			os.MkdirAll(filepath.Join(proc, "4242"), 0o755)
			os.WriteFile(filepath.Join(proc, "4242", "cmdline"), []byte("/usr/bin/conmon\x00-n\x00k8s_app_b-0_shop_uid_0\x00-r\x00"+n.o.classLink("mk-b")+"\x00"), 0o644)
			os.Symlink("/", filepath.Join(proc, "4242", "cwd"))

			p, err := Configure(n.o, []string{"mk-a"}, proc)
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(p); err != nil {
				t.Fatal(err)
			}
			if target, err := os.Readlink(n.o.classLink("mk-b")); err != nil || target != n.o.wrapperPath() {
				t.Errorf("mk-b's link while its container runs: %q, %v; want it kept", target, err)
			}
			if e, _ := os.ReadFile(n.o.classLink("mk-b") + runtimewrap.EntrySuffix); string(e) != string(entryB) {
				t.Errorf("mk-b's entry while its container runs: %q, want it kept (%q)", e, entryB)
			}
			if h := n.handler(t, "mk-b"); h == "" {
				t.Error("mk-b's handler is gone from the runtime's config while its container runs")
			}
			want := `runtime class "mk-b" is no longer in the config, but ` + runtime + ` still runs its containers (pid 4242 (conmon, container k8s_app_b-0_shop_uid_0) runs ` + n.o.classLink("mk-b") + `)`
			if !slices.ContainsFunc(p.Notes, func(s string) bool { return strings.HasPrefix(s, want) }) {
				t.Errorf("notes %q: want one starting %q", p.Notes, want)
			}

			// The container is gone: the next configure removes what was kept.
			os.RemoveAll(filepath.Join(proc, "4242"))
			p, err = Configure(n.o, []string{"mk-a"}, proc)
			if err != nil {
				t.Fatal(err)
			}
			if err := Apply(p); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{n.o.classLink("mk-b"), n.o.classLink("mk-b") + runtimewrap.EntrySuffix} {
				if _, err := os.Lstat(path); err == nil {
					t.Errorf("%s is still there once unused", path)
				}
			}
			if h := n.handler(t, "mk-b"); h != "" {
				t.Errorf("mk-b's handler is still there once unused: %s", h)
			}
			if h := n.handler(t, "mk-a"); h == "" {
				t.Error("mk-a lost its handler")
			}
		})
	}
}

// handler is the class's handler as the runtime reads it (its runtime binary), "" for none.
func (n node) handler(t *testing.T, class string) string {
	t.Helper()
	if n.o.Runtime == "containerd" {
		h := lookup(n.effective(t), "plugins", criRuntime, "containerd", "runtimes", class)
		s, _ := lookup(h, "options")["BinaryName"].(string)
		return s
	}
	eff, err := loadCRIO(n.o.ConfigFile, n.o.ConfigDir, "")
	if err != nil {
		t.Fatal(err)
	}
	s, _ := lookup(eff, "crio", "runtime", "runtimes", class)["runtime_path"].(string)
	return s
}

// TestDropInTempFiles: a run killed between writing the drop-in's temporary file and its rename
// leaves nothing in the directory whose every file the runtime reads (CRI-O's crio.conf.d,
// containerd's conf.d under a glob import); what a killed run left (a half-written temporary
// drop-in, a link's temporary) configure and unconfigure remove.
func TestDropInTempFiles(t *testing.T) {
	for _, runtime := range []string{"containerd", "crio"} {
		t.Run(runtime, func(t *testing.T) {
			n := newNode(t, runtime)
			if runtime == "containerd" {
				// A glob that matches every file of conf.d, hidden ones too.
				n.write(t, n.o.ConfigFile, "version = 3\nimports = ['conf.d/*']\n", 0o644)
			} else {
				n.write(t, n.o.ConfigFile, crioMain, 0o644)
			}
			dir := filepath.Dir(n.o.DropIn)
			n.write(t, filepath.Join(dir, "50-operator"), "version = 3\n", 0o644)
			var atKill []string
			beforeRename = func(tmp string) {
				if strings.HasPrefix(filepath.Base(tmp), "."+filepath.Base(n.o.DropIn)) {
					atKill, _ = listDir(dir)
				}
			}
			defer func() { beforeRename = func(string) {} }()
			n.configure(t, "mk")
			if !reflect.DeepEqual(atKill, []string{"50-operator"}) {
				t.Errorf("%s before the drop-in's rename: %q; a kill then leaves what is not 50-operator for the runtime to load", dir, atKill)
			}

			// What a killed run left: a half-written drop-in where the runtime reads it (an
			// older mountkeeper wrote it there) and above, a link's temporary in the class dir.
			stale := []string{
				filepath.Join(dir, "."+filepath.Base(n.o.DropIn)+".mountkeeper-tmp-123456"),
				filepath.Join(filepath.Dir(dir), "."+filepath.Base(n.o.DropIn)+".mountkeeper-tmp-99"),
				filepath.Join(n.o.InstallDir, classDir, ".mk.mountkeeper-tmp"),
			}
			write := func() {
				for _, p := range stale[:2] {
					n.write(t, p, "[crio.runtime\n", 0o644)
				}
				os.Symlink(n.o.wrapperPath(), stale[2])
			}
			write()
			p := n.configure(t, "mk")
			for _, s := range stale {
				if _, err := os.Lstat(s); err == nil {
					t.Errorf("configure left %s", s)
				}
			}
			if !p.RestartNeeded() {
				t.Error("configure removed a file the runtime reads and says no restart is needed")
			}
			write()
			n.unconfigure(t)
			for _, s := range stale {
				if _, err := os.Lstat(s); err == nil {
					t.Errorf("unconfigure left %s", s)
				}
			}
		})
	}
}

// TestLoadCRIOReadsAsCRIO: the default handler is worked out from every file CRI-O reads in
// crio.conf.d, suffix or none (OpenShift's 00-default), subdirectories included, in CRI-O's
// order (a walk: 10-d/x before 10-d.conf, which a sort of the paths puts the other way).
func TestLoadCRIOReadsAsCRIO(t *testing.T) {
	n := newNode(t, "crio")
	handler := func(path string) string {
		return "[crio.runtime.runtimes.runc]\nruntime_path = \"" + path + "\"\n"
	}
	n.write(t, filepath.Join(n.o.ConfigDir, "00-default"), "[crio.runtime]\ndefault_runtime = \"runc\"\n"+handler("/usr/bin/runc-00"), 0o644)
	n.write(t, filepath.Join(n.o.ConfigDir, "10-d", "x"), handler("/usr/bin/runc-10-d-x"), 0o644)
	n.write(t, filepath.Join(n.o.ConfigDir, "10-d.conf"), handler("/usr/bin/runc-10-d.conf"), 0o644)
	n.configure(t, "mk")
	data, _ := os.ReadFile(n.o.classLink("mk") + runtimewrap.EntrySuffix)
	if e, err := runtimewrap.ParseEntry("", data); err != nil || e.Runtime != "/usr/bin/runc-10-d.conf" {
		t.Errorf("entry %+v, %v: want the runtime of runc as CRI-O reads it last (10-d.conf)", e, err)
	}
}
