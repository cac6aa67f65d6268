//go:build e2e

// Package e2e runs mountkeeper against real containerd 2.4.2 and CRI-O 1.34.0 (each on runc
// 1.5.2) with NRI, driven through CRI as kubelet drives it. `make e2e` runs it; it needs root and the binaries that
// test/tools/install.sh builds.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testenv"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// node is one test's world: a private CRI runtime (containerd or CRI-O) with NRI, host volume
// sources under a tmpfs, and the mountkeeper plugin connected to it.
type node struct {
	t         *testing.T
	ctx       context.Context
	dir       string // host side: sources, config
	rt        harness.Runtime
	ctrd      *harness.Containerd // rt when it is containerd (for containerd-only tests), else nil
	plugin    *harness.Plugin
	bin       string
	config    string
	cgroup    string              // cgroup2 dir the plugin runs in; "" for the test's own
	mu        sync.Mutex          // guards byHandler
	byHandler map[string][]string // container IDs created, by runtime handler
	scopes    *scopeEnder         // network mount scopes that end with the test
	pluginLog io.Writer           // receives the plugin's log (startPlugin); nil: the test's log
}

// scopeEnder ends, when the test ends, the cgroup scopes of the network mounts of the configs
// added to it: a FUSE daemon's scope outlives every container by design (the mount itself
// goes with the work directory). Make it before starting what runs the plugin, so that its
// cleanup runs after the plugin has stopped: a plugin still running would see the killed
// daemon and heal the mount into the dying scope.
type scopeEnder struct{ keys []string }

func newScopeEnder(t testing.TB) *scopeEnder {
	s := &scopeEnder{}
	t.Cleanup(func() {
		for _, key := range s.keys {
			if err := harness.RemoveMountScope(key); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
	return s
}

// add parses config, whose network mounts' scopes then end with the test, and returns it.
func (s *scopeEnder) add(t *testing.T, config []byte) *configs.Config {
	t.Helper()
	cfg, err := configs.Parse(config)
	if err != nil {
		t.Fatalf("the test's config: %v", err)
	}
	for _, rc := range cfg.RuntimeClasses {
		for _, spec := range rc.NetworkSpecs() {
			s.keys = append(s.keys, spec.Key())
		}
	}
	return cfg
}

// forEachRuntime runs f as a subtest per runtime (named after it): the NRI scenarios hold on
// containerd and CRI-O alike. A runtime whose binaries are missing skips (fails under
// MOUNTKEEPER_REQUIRE_ALL=1) before f sets anything up (newNode would skip too, later).
func forEachRuntime(t *testing.T, f func(t *testing.T, kind harness.RuntimeKind)) {
	for _, kind := range harness.RuntimeKinds {
		t.Run(string(kind), func(t *testing.T) {
			testenv.Require(t, kind.Binaries()...)
			f(t, kind)
		})
	}
}

// newNode starts the runtime kind with the given runtime handlers and mountkeeper with config
// (the string SRC is replaced by the node's source directory). Everything is torn down when
// the test ends, whether it passed or not.
func newNode(t *testing.T, kind harness.RuntimeKind, handlers []string, config string) *node {
	t.Helper()
	return newNodeWith(t, kind, handlers, config, "")
}

// newNodeWith is newNode with the plugin started in the cgroup2 directory pluginCgroup. It
// skips (fails under MOUNTKEEPER_REQUIRE_ALL=1) without root or the runtime's binaries.
func newNodeWith(t *testing.T, kind harness.RuntimeKind, handlers []string, config, pluginCgroup string) *node {
	t.Helper()
	n := newNodeWithoutPlugin(t, kind, handlers, config, pluginCgroup)
	n.startPlugin()
	return n
}

// newNodeWithoutPlugin is newNodeWith up to the plugin, which the test starts itself
// (startPlugin, or harness.StartPlugin with flags of its own).
func newNodeWithoutPlugin(t *testing.T, kind harness.RuntimeKind, handlers []string, config, pluginCgroup string) *node {
	t.Helper()
	return newNodeOpts(t, kind, harness.Options{Handlers: handlers, NRI: true}, config, pluginCgroup)
}

// newNodeOpts is newNodeWithoutPlugin with the runtime started on opts (NRI on whatever opts
// say): for a test that needs more of the runtime than its handlers, such as a longer NRI
// request timeout.
func newNodeOpts(t *testing.T, kind harness.RuntimeKind, opts harness.Options, config, pluginCgroup string) *node {
	t.Helper()
	opts.NRI = true
	testenv.Require(t, append([]string{"root"}, kind.Binaries()...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir := harness.WorkDir(t, "mk-e2e-")
	var err error
	n := &node{t: t, ctx: ctx, dir: dir, cgroup: pluginCgroup, byHandler: map[string][]string{}}
	if n.bin, err = harness.BuildMountkeeper(dir); err != nil {
		t.Fatal(err)
	}
	n.config = filepath.Join(dir, "config.yaml")
	if !strings.Contains(config, "stateDir:") {
		// The plugin's state (the guard key, subPath copies, network mounts) stays in the
		// test's directory, never the host's /var/lib/mountkeeper.
		config = "stateDir: SRC/state\n" + config
	}
	if err := os.WriteFile(n.config, []byte(strings.ReplaceAll(config, "SRC", n.src())), 0o644); err != nil {
		t.Fatal(err)
	}
	n.rt, err = harness.StartRuntime(ctx, kind, opts)
	if err != nil {
		t.Fatalf("start %s: %v", kind, err)
	}
	n.ctrd, _ = n.rt.(*harness.Containerd)
	t.Cleanup(func() {
		if t.Failed() {
			if log, err := os.ReadFile(n.rt.LogPath()); err == nil {
				t.Logf("%s log (last 4 KiB):\n%s", kind, lastBytes(log, 4096))
			}
		}
		if err := n.rt.Close(); err != nil {
			t.Errorf("cleanup %s: %v", kind, err)
		}
	})
	n.scopes = newScopeEnder(t) // before the plugin starts: ends the scopes after it stopped
	return n
}

// endNetworkScopes parses the node's config and ends, when the test ends and after the
// plugin has stopped, the scopes of every class's network mounts (scopeEnder).
func (n *node) endNetworkScopes() *configs.Config {
	n.t.Helper()
	data, err := os.ReadFile(n.config)
	if err != nil {
		n.t.Fatal(err)
	}
	return n.scopes.add(n.t, data)
}

// startPlugin starts `mountkeeper nri` on the node's config; it is stopped when the test ends.
func (n *node) startPlugin() { n.startPluginIn(n.cgroup) }

// startPluginIn starts the plugin in a cgroup2 directory ("" for the test's own cgroup).
func (n *node) startPluginIn(cgroup string) {
	n.t.Helper()
	var log io.Writer = testWriter{n.t, "mountkeeper"}
	if n.pluginLog != nil {
		log = n.pluginLog
	}
	var err error
	n.plugin, err = harness.StartPlugin(n.ctx, harness.PluginOptions{Binary: n.bin, Config: n.config,
		Socket: n.rt.NRISocket(), Log: log, Cgroup: cgroup})
	if err != nil {
		n.t.Fatalf("start mountkeeper: %v", err)
	}
	n.t.Cleanup(n.plugin.Stop)
}

// src is where the test's host volume sources live.
func (n *node) src() string { return filepath.Join(n.dir, "src") }

// sourceTmpfs mounts a tmpfs with the given propagation at src/name.
func (n *node) sourceTmpfs(name, propagation string) string {
	n.t.Helper()
	p := filepath.Join(n.src(), name)
	if err := harness.MountTmpfs(p, propagation); err != nil {
		n.t.Fatal(err)
	}
	return p
}

// runContainer runs a privileged busybox container in a new pod of the handler.
func (n *node) runContainer(handler, name string) (string, error) {
	n.t.Helper()
	return n.runContainerArgs(handler, name, nil)
}

// mustRun runs a container with args (nil: sleep) and fails the test if it cannot.
func (n *node) mustRun(handler, name string, args []string) string {
	n.t.Helper()
	id, err := n.runContainerArgs(handler, name, args)
	if err != nil {
		n.t.Fatalf("run container %s of handler %q: %v", name, handler, err)
	}
	return id
}

// containersOf returns the containers created for handler.
func (n *node) containersOf(handler string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.byHandler[handler])
}

func (n *node) runContainerArgs(handler, name string, args []string) (string, error) {
	n.t.Helper()
	id, refused, err := n.podContainer(handler, name, args)
	if err != nil {
		n.t.Fatal(err)
	}
	return id, refused
}

// podOf names a pod of mustRunPods and its runtime handler.
type podOf struct{ handler, name string }

// mustRunPods runs a container with args (nil: sleep) in each of the pods, all at once (the
// runtime serializes only their NRI calls), and fails the test unless all run.
func (n *node) mustRunPods(args []string, pods ...podOf) []string {
	n.t.Helper()
	ids := make([]string, len(pods))
	err := eachAtOnce(len(pods), func(i int) error {
		id, refused, err := n.podContainer(pods[i].handler, pods[i].name, args)
		ids[i] = id
		return errors.Join(err, refused)
	})
	if err != nil {
		n.t.Fatalf("run containers: %v", err)
	}
	return ids
}

// eachAtOnce runs f(0) to f(count-1) at once and joins their errors.
func eachAtOnce(count int, f func(i int) error) error {
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// podContainer runs a privileged busybox container with args (nil: sleep) in a new pod of the
// handler and starts it. refused is the runtime's refusal to create it, err any other failure.
// Safe for concurrent use.
func (n *node) podContainer(handler, name string, args []string) (id string, refused, err error) {
	cri := n.rt.CRI()
	pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: name + "-pod", RuntimeHandler: handler})
	if err != nil {
		return "", nil, fmt.Errorf("run pod with handler %q: %w", handler, err)
	}
	id, err = cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: name, Privileged: true, Args: args})
	if err != nil {
		return "", err, nil
	}
	n.mu.Lock()
	n.byHandler[handler] = append(n.byHandler[handler], id)
	n.mu.Unlock()
	if err := cri.StartContainer(n.ctx, id); err != nil {
		return id, nil, fmt.Errorf("start container %s: %w", name, err)
	}
	return id, nil, nil
}

// sh runs a shell command in a container and returns its stdout and exit code.
func (n *node) sh(id, script string) (string, int) {
	n.t.Helper()
	out, stderr, code, err := n.rt.CRI().Exec(n.ctx, id, "sh", "-c", script)
	if err != nil {
		n.t.Fatalf("exec %q: %v", script, err)
	}
	if code != 0 && stderr != "" {
		n.t.Logf("exec %q: exit %d: %s", script, code, stderr)
	}
	return out, code
}

// fileIn reads path as container id sees it, through its process's /proc/PID/root: no exec,
// which takes seconds where syscalls are slow (a TCG guest).
func (n *node) fileIn(id, path string) (string, error) {
	n.t.Helper()
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(containerPid(n.t, n, id)), "root", path))
	return string(data), err
}

// removePods removes every pod of the node and its containers, all pods at once.
func (n *node) removePods() {
	n.t.Helper()
	cri := n.rt.CRI()
	pods, err := cri.ListPods(n.ctx)
	if err != nil {
		n.t.Fatal(err)
	}
	if err := eachAtOnce(len(pods), func(i int) error { return cri.RemovePod(n.ctx, pods[i].GetId()) }); err != nil {
		n.t.Fatal(err)
	}
}

// startPluginBinary starts bin as the node's plugin (`mountkeeper nri` of that build).
func (n *node) startPluginBinary(bin string) {
	n.t.Helper()
	current := n.bin
	n.bin = bin
	n.startPlugin()
	n.bin = current
}

// mountinfoOf returns the container's mount at mount point dst.
func (n *node) mountinfoOf(id, dst string) *mountinfo.Info {
	n.t.Helper()
	// The container's process's table: its mount namespace's, read without an exec.
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(containerPid(n.t, n, id)), "mountinfo"))
	if err != nil {
		n.t.Fatal(err)
	}
	out := string(data)
	if m := mountIn(n.t, out, dst); m != nil {
		return m
	}
	n.t.Fatalf("no mount at %s in the container:\n%s", dst, out)
	return nil
}

// containerPid is the host pid of a running container's process.
func containerPid(t *testing.T, n *node, id string) int {
	t.Helper()
	pid, err := n.rt.CRI().ContainerPid(n.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// containerdLog sends containerd's output to stderr when MK_CONTAINERD_LOG is set; it is too
// chatty for every run.
func containerdLog() io.Writer {
	if os.Getenv("MK_CONTAINERD_LOG") != "" {
		return os.Stderr
	}
	return nil
}

// expectOutput runs cmd in container id and checks it succeeds with stdout want.
func expectOutput(ctx context.Context, t *testing.T, cri *harness.Client, id, want string, cmd ...string) {
	t.Helper()
	stdout, stderr, code, err := cri.Exec(ctx, id, cmd...)
	if err != nil || code != 0 || stdout != want {
		t.Fatalf("exec %q: stdout %q stderr %q exit %d err %v; want stdout %q", cmd, stdout, stderr, code, err, want)
	}
}

// checkNothingLeft looks for traces of the instance in dir: mounts, processes that name it
// or run in its cgroups, cgroups, and the directory itself.
func checkNothingLeft(t *testing.T, dir string) {
	t.Helper()
	left, err := testsupport.Mounts(0, testsupport.AtOrBelow(dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range left {
		t.Errorf("mount left: %s", mountLine(m))
	}

	name := filepath.Base(dir) // also the pods' cgroup parent
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join(p, "cgroup"))
		inCgroup := strings.Contains(string(cgroup), ":/"+name+"/") || strings.Contains(string(cgroup), ":/"+name+"\n")
		if strings.Contains(string(cmdline), dir) || inCgroup {
			t.Errorf("process left: %s %q", p, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}

	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + name)
	for _, cg := range cgroups {
		t.Errorf("cgroup left: %s", cg)
	}

	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("instance directory %s still there (stat: %v)", dir, err)
	}
}

const subPathConfig = `
kubeletRoot: SRC/kubelet
`
