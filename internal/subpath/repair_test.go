package subpath

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/mounttable"
	"github.com/mountkeeper/mountkeeper/internal/subpath/subpathtest"

	"github.com/mountkeeper/mountkeeper/test/privatens"
)

// env is what a scenario's update sees: the fake kubelet, the volume under test, a secret
// volume beside it and files outside the kubelet root (each outside file says "OUTSIDE").
type env struct {
	*subpathtest.Kubelet
	volDir          string
	sibling         string
	outFile, outDir string
	newTS           string // set by atomic
}

// replaceFile is an update that removes the volume's file rel and writes a new one there.
func replaceFile(rel, content string) func(e *env) {
	return func(e *env) {
		subpathtest.Must(e.T, os.Remove(filepath.Join(e.volDir, rel)))
		subpathtest.Must(e.T, os.WriteFile(filepath.Join(e.volDir, rel), []byte(content), 0o644))
	}
}

// atomic updates the volume under test the atomic-writer way, old timestamp dir removed.
func (e *env) atomic(files map[string]subpathtest.Entry) { e.newTS = e.WriteAtomic(e.volDir, files) }

type scenario struct {
	name    string
	plugin  string
	volume  string
	tmpfs   bool
	initial map[string]subpathtest.Entry
	subPath string // as the pod spec names it
	update  func(e *env)
	// dirName is the volume's directory below its plugin directory, when not volume (a PV's
	// name); hostPath puts the volume outside the kubelet root, as a hostPath volume is.
	dirName  string
	hostPath bool
	// privateBind makes kubelet's bind private (below the shared kubelet root it comes out a
	// shared peer of the volume's mount, as on a real node).
	privateBind bool

	want        string // what the target shows after the repair
	wantSubPath string // Repair.SubPath; default subPath
	wantNewRel  string // NewSource below the new timestamp dir (atomic) or volume dir; default wantSubPath
	wantErr     []string
}

var initialConfig = map[string]subpathtest.Entry{
	"app.conf":       subpathtest.File("v1"),
	"conf.d/app.ini": subpathtest.File("ini1"),
}

var scenarios = []scenario{
	{
		name: "configMap file key", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2"), "conf.d/app.ini": subpathtest.File("ini2")})
		},
		want: "v2",
	},
	{
		name: "configMap file key, kubelet's bind private", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		privateBind: true,
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2"), "conf.d/app.ini": subpathtest.File("ini2")})
		},
		want: "v2",
	},
	{
		name: "secret directory, kubelet's bind private", plugin: subpathtest.Secret, volume: "creds", tmpfs: true,
		initial: map[string]subpathtest.Entry{"d/a": subpathtest.File("a1")}, subPath: "d", privateBind: true,
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"d/a": subpathtest.File("a2")}) },
		want:   "a=a2",
	},
	{
		name: "configMap nested key", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d/app.ini",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2"), "conf.d/app.ini": subpathtest.File("ini2")})
		},
		want: "ini2",
	},
	{
		name: "configMap deep nested key", plugin: subpathtest.ConfigMap, volume: "cfg",
		initial: map[string]subpathtest.Entry{"a/b/c/d/e.ini": subpathtest.File("e1")}, subPath: "a/b/c/d/e.ini",
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"a/b/c/d/e.ini": subpathtest.File("e2")}) },
		want:   "e2",
	},
	{
		name: "configMap directory subPath", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"conf.d/app.ini": subpathtest.File("ini2"), "conf.d/extra.ini": subpathtest.File("x2")})
		},
		want: "app.ini=ini2 extra.ini=x2",
	},
	{
		name: "secret key on its own tmpfs", plugin: subpathtest.Secret, volume: "creds", tmpfs: true,
		initial: map[string]subpathtest.Entry{"token": subpathtest.File("t1")}, subPath: "token",
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"token": subpathtest.File("t2")}) },
		want:   "t2",
	},
	{
		name: "projected directory", plugin: subpathtest.Projected, volume: "bundle",
		initial: map[string]subpathtest.Entry{"certs/ca.crt": subpathtest.File("ca1"), "certs/tls.crt": subpathtest.File("tls1")}, subPath: "certs",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"certs/ca.crt": subpathtest.File("ca2"), "certs/tls.crt": subpathtest.File("tls2")})
		},
		want: "ca.crt=ca2 tls.crt=tls2",
	},
	{
		name: "projected nested key on tmpfs", plugin: subpathtest.Projected, volume: "bundle", tmpfs: true,
		initial: map[string]subpathtest.Entry{"certs/ca.crt": subpathtest.File("ca1")}, subPath: "certs/ca.crt",
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"certs/ca.crt": subpathtest.File("ca2")}) },
		want:   "ca2",
	},
	{
		name: "downwardAPI key", plugin: subpathtest.DownwardAPI, volume: "podinfo",
		initial: map[string]subpathtest.Entry{"labels": subpathtest.File(`app="a"`)}, subPath: "labels",
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"labels": subpathtest.File(`app="b"`)}) },
		want:   `app="b"`,
	},
	{
		name: "key is now a symlink that stays inside the volume", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.Symlink("sub/../real.conf"), "real.conf": subpathtest.File("v2"), "sub/keep": subpathtest.File("")})
		},
		want: "v2", wantNewRel: "real.conf",
	},
	{
		name: "key no longer exists", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d/app.ini",
		update:  func(e *env) { e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")}) },
		wantErr: []string{"key conf.d/app.ini is no longer in configMap volume cfg", "no such file or directory"},
	},
	{
		name: "key is now a symlink to /", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d",
		update:  func(e *env) { e.atomic(map[string]subpathtest.Entry{"conf.d": subpathtest.Symlink("/")}) },
		wantErr: []string{"key conf.d of configMap volume cfg leads out of the volume", "it was not followed"},
	},
	{
		name: "key is now a relative symlink into a sibling volume", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.Symlink("../../../kubernetes.io~secret/sec/..data/token")})
		},
		wantErr: []string{"key app.conf of configMap volume cfg leads out of the volume"},
	},
	{
		name: "key is now an absolute symlink into a sibling volume", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.Symlink(filepath.Join(e.sibling, "token"))})
		},
		wantErr: []string{"key app.conf of configMap volume cfg leads out of the volume"},
	},
	{
		name: "key is now a symlink to /proc/self/root", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d",
		update:  func(e *env) { e.atomic(map[string]subpathtest.Entry{"conf.d": subpathtest.Symlink("/proc/self/root")}) },
		wantErr: []string{"key conf.d of configMap volume cfg leads out of the volume"},
	},
	{
		name: "key is now a symlink of .. components out of the volume", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"conf.d": subpathtest.Symlink("../../../../../../../../..")})
		},
		wantErr: []string{"key conf.d of configMap volume cfg leads out of the volume"},
	},
	{
		name: "key is now a symlink to a file outside", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update:  func(e *env) { e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.Symlink(e.outFile)}) },
		wantErr: []string{"key app.conf of configMap volume cfg leads out of the volume"},
	},
	{
		name: "..data now points outside", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")})
			subpathtest.Must(e.T, os.Symlink(e.outDir, filepath.Join(e.volDir, "..data_tmp")))
			subpathtest.Must(e.T, os.Rename(filepath.Join(e.volDir, "..data_tmp"), filepath.Join(e.volDir, "..data")))
		},
		wantErr: []string{"key app.conf of configMap volume cfg leads out of the volume"},
	},
	{
		name: "key is now a directory", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) { e.atomic(map[string]subpathtest.Entry{"app.conf/x": subpathtest.File("v2")}) },
		wantErr: []string{"key app.conf of configMap volume cfg cannot replace the stale bind",
			"it is a directory now, but the stale bind was a regular file"},
	},
	{
		name: "directory key is now a file", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "conf.d",
		update:  func(e *env) { e.atomic(map[string]subpathtest.Entry{"conf.d": subpathtest.File("flat")}) },
		wantErr: []string{"it is a regular file now, but the stale bind was a directory"},
	},
	{
		// The volume is found by what holds the bind's source, not by its name.
		name: "volume name in two plugin directories", plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf",
		update: func(e *env) {
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")})
			subpathtest.Must(e.T, os.MkdirAll(filepath.Join(e.Pod(), "volumes", subpathtest.Secret, "cfg"), 0o755))
		},
		want: "v2",
	},
	{
		// A PVC's directory is named after its PV, not after the pod's volume.
		name: "csi volume named after its PV", plugin: subpathtest.CSI, volume: "data", dirName: "pvc-0f5a4c1e", tmpfs: true,
		initial: map[string]subpathtest.Entry{"logs/f": subpathtest.File("c1")}, subPath: "logs/f",
		update: replaceFile("logs/f", "c2"),
		want:   "c2",
	},
	{
		// kubelet keeps no directory of a hostPath volume: nothing proves where the bind came
		// from, so it is not repaired (the caller leaves it for the runtime to fail on).
		name: "hostPath file replaced", hostPath: true, volume: "host",
		initial: map[string]subpathtest.Entry{"logs/f": subpathtest.File("h1")}, subPath: "logs/f",
		update:  replaceFile("logs/f", "h2"),
		wantErr: []string{"cannot find the volume's directory", "lies in no volume directory of the pod", ErrUnknownVolume.Error()},
	},
	{
		name: "emptyDir file replaced", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update: replaceFile("data/f", "e2"),
		want:   "e2",
	},
	{
		name: "emptyDir directory replaced", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data",
		update: func(e *env) {
			subpathtest.Must(e.T, os.RemoveAll(filepath.Join(e.volDir, "data")))
			subpathtest.WriteTree(e.T, e.volDir, map[string]subpathtest.Entry{"data/g": subpathtest.File("e2")})
		},
		want: "g=e2",
	},
	{
		name: "csi file replaced", plugin: subpathtest.CSI, volume: "data", tmpfs: true,
		initial: map[string]subpathtest.Entry{"conf/f": subpathtest.File("c1")}, subPath: "conf/f",
		update: func(e *env) {
			subpathtest.Must(e.T, os.Remove(filepath.Join(e.volDir, "conf/f")))
			subpathtest.Must(e.T, os.WriteFile(filepath.Join(e.volDir, "conf/f"), []byte("c2"), 0o644))
		},
		want: "c2",
	},
	{
		name: "csi name became a symlink out of the volume", plugin: subpathtest.CSI, volume: "data", tmpfs: true,
		initial: map[string]subpathtest.Entry{"conf/f": subpathtest.File("c1")}, subPath: "conf/f",
		update: func(e *env) {
			subpathtest.Must(e.T, os.RemoveAll(filepath.Join(e.volDir, "conf")))
			subpathtest.Must(e.T, os.Symlink("../../../kubernetes.io~secret/sec", filepath.Join(e.volDir, "conf")))
		},
		wantErr: []string{"subPath conf/f of csi volume data leads out of the volume"},
	},
	{
		name: "emptyDir subPath removed", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update:  func(e *env) { subpathtest.Must(e.T, os.Remove(filepath.Join(e.volDir, "data/f"))) },
		wantErr: []string{"subPath data/f is no longer in emptyDir volume scratch"},
	},
	{
		name: "emptyDir directory name became a symlink out of the volume", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update: func(e *env) {
			subpathtest.Must(e.T, os.RemoveAll(filepath.Join(e.volDir, "data")))
			subpathtest.Must(e.T, os.Symlink(e.outDir, filepath.Join(e.volDir, "data")))
		},
		wantErr: []string{"subPath data/f of emptyDir volume scratch leads out of the volume", "it was not followed"},
	},
	{
		name: "emptyDir file name became a symlink out of the volume", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update: func(e *env) {
			subpathtest.Must(e.T, os.Remove(filepath.Join(e.volDir, "data/f")))
			subpathtest.Must(e.T, os.Symlink(e.outFile, filepath.Join(e.volDir, "data/f")))
		},
		wantErr: []string{"subPath data/f of emptyDir volume scratch leads out of the volume"},
	},
	{
		name: "emptyDir name became a relative symlink out of the volume", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update: func(e *env) {
			subpathtest.Must(e.T, os.RemoveAll(filepath.Join(e.volDir, "data")))
			rel, err := filepath.Rel(e.volDir, e.outDir)
			subpathtest.Must(e.T, err)
			subpathtest.Must(e.T, os.Symlink(rel, filepath.Join(e.volDir, "data")))
		},
		wantErr: []string{"subPath data/f of emptyDir volume scratch leads out of the volume"},
	},
	{
		// A procfs inside the volume (a privileged container with Bidirectional propagation
		// could mount one): the path stays below the volume dir, but /proc/<pid>/root is a
		// magic link to the host's root.
		name: "emptyDir name became a symlink through a magic link", plugin: subpathtest.EmptyDir, volume: "scratch",
		initial: map[string]subpathtest.Entry{"data/f": subpathtest.File("e1")}, subPath: "data/f",
		update: func(e *env) {
			proc := filepath.Join(e.volDir, "proc")
			subpathtest.Must(e.T, os.Mkdir(proc, 0o755))
			subpathtest.Must(e.T, unix.Mount("proc", proc, "proc", 0, ""))
			subpathtest.Must(e.T, os.RemoveAll(filepath.Join(e.volDir, "data")))
			subpathtest.Must(e.T, os.Symlink("proc/self/root"+e.outDir, filepath.Join(e.volDir, "data")))
		},
		wantErr: []string{"subPath data/f of emptyDir volume scratch leads through a magic link", "too many levels of symbolic links"},
	},
}

// TestRepairInNamespace builds a fake kubelet root per scenario, makes the subPath bind as
// kubelet does, updates the volume and repairs it, with real mounts in a private mount
// namespace.
func TestRepairInNamespace(t *testing.T) {
	if !privatens.Run(t) {
		return
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc, System{}) })
	}
	// The same on a kernel that cannot mount beneath (< 6.5): detach, then attach.
	for _, sc := range scenarios {
		t.Run("no beneath/"+sc.name, func(t *testing.T) { runScenario(t, sc, &hookHost{noBeneath: true}) })
	}
	t.Run("not stale", testNotStale)
	t.Run("symlink swapped in after the check", testSwapAfterCheck)
	t.Run("failures", testFailures)
	t.Run("target is a symlink", testTargetSymlink)
}

func setup(t *testing.T, sc scenario) (*env, Target, string) {
	t.Helper()
	k := subpathtest.NewKubelet(t)
	e := &env{Kubelet: k, sibling: k.Volume(subpathtest.Secret, "sec", true)}
	k.WriteAtomic(e.sibling, map[string]subpathtest.Entry{"token": subpathtest.File("SIBLING")})
	e.outFile, e.outDir = subpathtest.Outside(t)
	for _, n := range []string{"app.conf", "f", "token"} {
		subpathtest.Must(t, os.WriteFile(filepath.Join(e.outDir, n), []byte("OUTSIDE"), 0o644))
	}
	e.volDir = k.Volume(sc.plugin, cmp.Or(sc.dirName, sc.volume), sc.tmpfs && sc.plugin != subpathtest.CSI)
	if sc.hostPath {
		subpathtest.Must(t, os.RemoveAll(e.volDir))
		e.volDir = filepath.Join(filepath.Dir(e.outDir), "hostpath")
		subpathtest.Must(t, os.Mkdir(e.volDir, 0o755))
	}
	if sc.plugin == subpathtest.CSI { // the driver's filesystem is mounted on <volume>/mount
		e.volDir = filepath.Join(e.volDir, "mount")
		subpathtest.Must(t, os.Mkdir(e.volDir, 0o755))
		if sc.tmpfs {
			subpathtest.Must(t, unix.Mount("tmpfs", e.volDir, "tmpfs", 0, "size=4m"))
		}
	}
	var oldTS string
	if _, atomic := volumeKind(sc.plugin); atomic {
		oldTS = k.WriteAtomic(e.volDir, sc.initial)
	} else {
		subpathtest.WriteTree(t, e.volDir, sc.initial)
	}
	tg := subpathtest.Bind(k, ParseTarget, e.volDir, sc.volume, "app", 0, sc.subPath)
	if sc.privateBind {
		subpathtest.Must(t, unix.Mount("", tg.Path, "", unix.MS_PRIVATE, ""))
	}
	return e, tg, oldTS
}

// propagation of the mount on path.
func propagation(t *testing.T, path string) string {
	t.Helper()
	n, err := System{}.Open(nil, path, unix.OpenHow{Flags: unix.O_NOFOLLOW})
	subpathtest.Must(t, err)
	defer n.Close()
	if !n.MountRoot {
		t.Fatalf("%s is not a mount point", path)
	}
	m, err := System{}.Mount(n)
	subpathtest.Must(t, err)
	return m.Propagation()
}

func runScenario(t *testing.T, sc scenario, host Host) {
	e, tg, oldTS := setup(t, sc)
	r := NewRepairerWith(e.Root, host)
	if stale, err := r.Stale(tg); err != nil || stale {
		t.Fatalf("Stale before the update = %v, %v; want false", stale, err)
	}
	before := subpathtest.Show(t, tg.Path)
	kubeletProp := propagation(t, tg.Path)
	if want := map[bool]string{true: "private", false: "shared"}[sc.privateBind]; kubeletProp != want {
		t.Fatalf("kubelet's bind is %s, this test expects %s", kubeletProp, want)
	}

	sc.update(e)
	if stale, err := r.Stale(tg); err != nil || !stale {
		t.Fatalf("Stale after the update = %v, %v; want true", stale, err)
	}

	rep, err := r.Repair(tg)
	if len(sc.wantErr) > 0 {
		if err == nil {
			t.Fatalf("Repair succeeded (%+v, target shows %q), want an error", rep, subpathtest.Show(t, tg.Path))
		}
		for _, w := range sc.wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Repair error\ngot:  %v\nwant it to contain: %s", err, w)
			}
		}
		var re *Error
		if !errors.As(err, &re) || re.Target != tg {
			t.Errorf("Repair error %v is not an *Error for %+v", err, tg)
		}
		if !strings.Contains(err.Error(), tg.Path) || !strings.Contains(err.Error(), "volume "+sc.volume) {
			t.Errorf("Repair error %q does not name the target and volume", err)
		}
		// Nothing was mounted, from outside or at all: the stale bind is still there, with
		// the old content.
		if stale, serr := r.Stale(tg); serr != nil || !stale {
			t.Errorf("after the failed repair Stale = %v, %v; want the stale bind still in place", stale, serr)
		}
		wantShown := before
		if fi, err := os.Stat(tg.Path); err == nil && fi.IsDir() {
			wantShown = "(deleted directory)"
		}
		if got := subpathtest.Show(t, tg.Path); got != wantShown {
			t.Errorf("after the failed repair the target shows %q, want the stale content %q", got, wantShown)
		}
		return
	}
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if got := subpathtest.Show(t, tg.Path); got != sc.want {
		t.Errorf("after the repair the target shows %q, want %q", got, sc.want)
	}
	if stale, err := r.Stale(tg); err != nil || stale {
		t.Errorf("Stale after the repair = %v, %v; want false", stale, err)
	}

	wantSub := sc.wantSubPath
	if wantSub == "" {
		wantSub = sc.subPath
	}
	newRel := sc.wantNewRel
	if newRel == "" {
		newRel = wantSub
	}
	kind, _ := volumeKind(sc.plugin)
	want := Repair{Target: tg, VolumeDir: e.volDir, SubPath: wantSub, Kind: kind,
		OldSource: filepath.Join(e.volDir, sc.subPath), NewSource: filepath.Join(e.volDir, newRel)}
	if oldTS != "" {
		want.OldSource = filepath.Join(e.volDir, oldTS, wantSub)
		want.NewSource = filepath.Join(e.volDir, e.newTS, newRel)
	}
	if rep != want {
		t.Errorf("Repair =\n  %+v\nwant\n  %+v", rep, want)
	}

	// The new bind propagates as kubelet's did: a shared peer of the volume's mount (the
	// clone of a shared mount is one), or private where kubelet's bind was private.
	if got := propagation(t, tg.Path); got != kubeletProp {
		t.Errorf("the repaired bind is %s, want %s as kubelet's bind was", got, kubeletProp)
	}
}

// testNotStale: a fresh bind is not stale and Repair leaves it alone.
func testNotStale(t *testing.T) {
	sc := scenario{plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf"}
	e, tg, _ := setup(t, sc)
	r := NewRepairer(e.Root)
	if stale, err := r.Stale(tg); err != nil || stale {
		t.Errorf("Stale = %v, %v; want false", stale, err)
	}
	_, err := r.Repair(tg)
	if !errors.Is(err, ErrNotStale) {
		t.Errorf("Repair of a live bind: %v, want ErrNotStale", err)
	}
	if got := subpathtest.Show(t, tg.Path); got != "v1" {
		t.Errorf("target shows %q after Repair of a live bind, want v1", got)
	}
	missing := tg
	missing.Path = filepath.Join(filepath.Dir(tg.Path), "7")
	missing.Index = 7
	if _, err := r.Stale(missing); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing.Path) {
		t.Errorf("Stale of a missing target: %v, want ErrNotExist naming it", err)
	}
}

// hookHost is System with hooks: before the first Clone (between resolving the new object and
// binding it), a kernel that cannot mount beneath, and failures of the n-th Attach (before or
// after it attached) or Detach (counted from 1).
type hookHost struct {
	System
	beforeClone                             func()
	noBeneath                               bool
	failAttach, failAfterAttach, failDetach map[int]bool
	failPrivate                             bool
	attaches, detaches                      int
}

func (h *hookHost) MakePrivate(tree *Node) error {
	if h.failPrivate {
		return errors.New("injected failure to make private")
	}
	return h.System.MakePrivate(tree)
}

func (h *hookHost) Clone(n *Node) (*Node, error) {
	if h.beforeClone != nil {
		h.beforeClone()
		h.beforeClone = nil
	}
	return h.System.Clone(n)
}

func (h *hookHost) Attach(tree, target *Node, beneath bool) (Mount, error) {
	h.attaches++
	if beneath && h.noBeneath {
		return Mount{}, fmt.Errorf("injected: %w", ErrNoBeneath)
	}
	if h.failAttach[h.attaches] {
		return Mount{}, errors.New("injected failure before attach")
	}
	m, err := h.System.Attach(tree, target, beneath)
	if err == nil && h.failAfterAttach[h.attaches] {
		return m, errors.New("injected failure after attach")
	}
	return m, err
}

func (h *hookHost) Detach(n *Node) error {
	h.detaches++
	if h.failDetach[h.detaches] {
		return errors.New("injected detach failure")
	}
	return h.System.Detach(n)
}

// testSwapAfterCheck: after the key was opened (and checked), it is replaced with a symlink
// to a file outside; the bind comes from the descriptor, so the target holds the object that
// was checked, not what the path leads to now.
func testSwapAfterCheck(t *testing.T) {
	sc := scenario{plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf"}
	e, tg, _ := setup(t, sc)
	e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")})
	key := filepath.Join(e.volDir, e.newTS, "app.conf")
	h := &hookHost{beforeClone: func() {
		subpathtest.Must(t, os.Rename(key, key+".moved"))
		subpathtest.Must(t, os.Symlink(e.outFile, key))
	}}
	rep, err := NewRepairerWith(e.Root, h).Repair(tg)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	if h.beforeClone != nil {
		t.Fatal("the swap hook did not run")
	}
	if got, _ := os.ReadFile(key); string(got) != "OUTSIDE" {
		t.Fatalf("the swap did not happen: %s reads %q", key, got)
	}
	if got := subpathtest.Show(t, tg.Path); got != "v2" {
		t.Errorf("target shows %q, want v2 (the object opened inside the volume, not the swapped-in symlink)", got)
	}
	var outside, target unix.Stat_t
	subpathtest.Must(t, unix.Stat(e.outFile, &outside))
	subpathtest.Must(t, unix.Stat(tg.Path, &target))
	if outside.Dev == target.Dev && outside.Ino == target.Ino {
		t.Errorf("the target holds the outside file %s", e.outFile)
	}
	if rep.NewSource != key+".moved" {
		t.Errorf("NewSource = %s, want %s (where the bound object is now)", rep.NewSource, key+".moved")
	}
}

// testFailures: whatever step of the re-bind fails, no container can start with the wrong
// content. Mounting beneath (Linux >= 6.5) leaves the stale bind on top, which runc refuses
// and Stale still reports; the older detach-then-attach leaves kubelet's placeholder, which
// Stale reports as ErrNotMounted.
// What the failures of the path without MOVE_MOUNT_BENEATH leave, for the cases on such a
// kernel too.
var (
	noBeneathDetach = struct {
		wantErr      string
		notMounted   bool
		wantAttaches int
	}{wantErr: "injected detach failure", wantAttaches: 1}
	noBeneathPrivate = struct {
		wantErr      string
		notMounted   bool
		wantAttaches int
	}{wantErr: "the new bind could not be made private, so it was detached too, and the placeholder is left without a mount (Stale reports it): injected failure to make private", notMounted: true, wantAttaches: 2}
)

func testFailures(t *testing.T) {
	for _, tc := range []struct {
		name         string
		host         *hookHost
		wantErr      string
		notMounted   bool // the placeholder is left: Stale says ErrNotMounted
		wantAttaches int
		privateBind  bool
		// beneathOnly: the failure is injected in a step only the MOVE_MOUNT_BENEATH path
		// takes; a kernel without it (< 6.5) takes the other path and repairs.
		beneathOnly bool
		// oldKernel: what a kernel without MOVE_MOUNT_BENEATH does instead (the case of the
		// same name with "no beneath, "), nil if the same.
		oldKernel *struct {
			wantErr      string
			notMounted   bool
			wantAttaches int
		}
	}{
		{name: "attaching beneath fails", host: &hookHost{failAttach: map[int]bool{1: true}},
			wantErr: "injected failure before attach", wantAttaches: 1},
		{name: "fails after attaching beneath", host: &hookHost{failAfterAttach: map[int]bool{1: true}}, beneathOnly: true,
			wantErr: "injected failure after attach", wantAttaches: 1},
		{name: "detaching the stale bind fails", host: &hookHost{failDetach: map[int]bool{1: true}}, oldKernel: &noBeneathDetach,
			wantErr: "the new bind is beneath the stale one, which stays on top: injected detach failure", wantAttaches: 1},
		{name: "making the new bind private fails", host: &hookHost{failPrivate: true}, privateBind: true, oldKernel: &noBeneathPrivate,
			wantErr: "the new bind is beneath the stale one, which stays on top: injected failure to make private", wantAttaches: 1},
		{name: "no beneath, detaching the stale bind fails", host: &hookHost{noBeneath: true, failDetach: map[int]bool{1: true}},
			wantErr: "injected detach failure", wantAttaches: 1},
		{name: "no beneath, making the new bind private fails", host: &hookHost{noBeneath: true, failPrivate: true}, privateBind: true,
			wantErr: noBeneathPrivate.wantErr, notMounted: true, wantAttaches: 2},
		{name: "no beneath, attach fails", host: &hookHost{noBeneath: true, failAttach: map[int]bool{2: true}},
			wantErr:    "the stale bind was detached, but binding on the placeholder failed, which is left without a mount (Stale reports it): injected failure before attach",
			notMounted: true, wantAttaches: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := scenario{plugin: subpathtest.ConfigMap, volume: "cfg", initial: initialConfig, subPath: "app.conf", privateBind: tc.privateBind}
			e, tg, _ := setup(t, sc)
			e.atomic(map[string]subpathtest.Entry{"app.conf": subpathtest.File("v2")})
			r := NewRepairerWith(e.Root, tc.host)
			_, err := r.Repair(tg)
			if kernel := mounttable.CanMountBeneath(); tc.beneathOnly && kernel != nil {
				// What runs on such a node: the repair detaches the stale bind first.
				if err != nil || subpathtest.Show(t, tg.Path) != "v2" {
					t.Fatalf("on a kernel without MOVE_MOUNT_BENEATH (%v) the repair should take the other path and succeed: %v, target shows %q", kernel, err, subpathtest.Show(t, tg.Path))
				}
				t.Logf("this kernel cannot mount beneath (%v): the repair took the other path and the injected failure was never reached", kernel)
				return
			}
			if o := tc.oldKernel; o != nil && mounttable.CanMountBeneath() != nil {
				t.Logf("this kernel cannot mount beneath: the failure is injected in the other path")
				tc.wantErr, tc.notMounted, tc.wantAttaches = o.wantErr, o.notMounted, o.wantAttaches
			}
			if err == nil || !strings.Contains(err.Error(), "re-binding key app.conf of configMap volume cfg failed: ") ||
				!strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Repair error = %v, want it to contain %q", err, tc.wantErr)
			}
			if tc.host.attaches != tc.wantAttaches {
				t.Errorf("%d Attach calls, want %d", tc.host.attaches, tc.wantAttaches)
			}
			stale, err := r.Stale(tg)
			if tc.notMounted {
				if !errors.Is(err, ErrNotMounted) || !strings.Contains(err.Error(), tg.Path) {
					t.Errorf("Stale = %v, %v; want ErrNotMounted naming %s", stale, err, tg.Path)
				}
				return
			}
			if err != nil || !stale {
				t.Errorf("after the failed repair Stale = %v, %v; want the stale bind still on top", stale, err)
			}
			if got := subpathtest.Show(t, tg.Path); got != "v1" {
				t.Errorf("target shows %q, want the stale content v1", got)
			}
			// The repair succeeds once the failure is gone.
			if _, err := NewRepairer(e.Root).Repair(tg); err != nil {
				t.Fatalf("Repair again: %v", err)
			}
			if got := subpathtest.Show(t, tg.Path); got != "v2" {
				t.Errorf("after repairing again the target shows %q, want v2", got)
			}
		})
	}
}

// testTargetSymlink: a target that is a symlink (kubelet never makes one) is not followed.
func testTargetSymlink(t *testing.T) {
	k := subpathtest.NewKubelet(t)
	_, outDir := subpathtest.Outside(t)
	target := filepath.Join(k.Pod(), "volume-subpaths", "cfg", "app", "0")
	subpathtest.Must(t, os.MkdirAll(filepath.Dir(target), 0o750))
	subpathtest.Must(t, os.Symlink(outDir, target))
	tg, ok := ParseTarget(k.Root, target)
	if !ok {
		t.Fatal("ParseTarget rejects the target")
	}
	r := NewRepairer(k.Root)
	if stale, err := r.Stale(tg); !errors.Is(err, ErrNotMounted) || stale {
		t.Errorf("Stale of a symlink target = %v, %v; want ErrNotMounted", stale, err)
	}
	if _, err := r.Repair(tg); !errors.Is(err, ErrNotStale) {
		t.Errorf("Repair of a symlink target = %v, want ErrNotStale", err)
	}
}
