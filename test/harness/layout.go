package harness

import (
	"os"
	"path/filepath"
)

// Instance directories are /tmp/mk-NNNN: short, because unix socket paths (containerd's,
// NRI's, the shims') must fit in 108 bytes.
const (
	instanceParent    = "/tmp"
	instanceDirPrefix = "mk-"
)

// layout names the files and directories of one instance. Every path containerd would
// otherwise take from its defaults (/var/lib/containerd, /run/containerd, /opt/containerd,
// /run/containerd/s, /var/run/nri, /etc/cni/net.d) is pointed in here, so an instance never
// touches a containerd that runs on the host nor another instance.
type layout struct{ dir string }

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.dir}, elem...)...)
}

func (l layout) config() string        { return l.path("config.toml") }
func (l layout) socket() string        { return l.path("containerd.sock") }
func (l layout) nriSocket() string     { return l.path("nri.sock") }
func (l layout) log() string           { return l.path("containerd.log") }
func (l layout) podLogs() string       { return l.path("pod-logs") }
func (l layout) owner() string         { return l.path("owner") }
func (l layout) nriPlugins() string    { return l.path("nri", "plugins") }
func (l layout) nriPluginConf() string { return l.path("nri", "conf.d") }

// cgroupParent is the cgroup (relative to every hierarchy's root) under which all pods of the
// instance live. It is derived from the directory name so that a sweep of a crashed instance
// can find it from the directory alone.
func (l layout) cgroupParent() string { return "/" + filepath.Base(l.dir) }

// defaultCgroupNamespace is where containerd puts a CRI container that has no cgroup parent,
// as /k8s.io/<id>: kubelet sends none with cgroupsPerQOS off (its cgroupRoot is then unused).
const defaultCgroupNamespace = "/k8s.io"

// defaultCgroups are the cgroups containerd gave the instance's tasks that had no cgroup
// parent: /k8s.io/<id> for each task whose state is still in the instance's directory (a
// task removed cleanly took its cgroup and its state with it).
func (l layout) defaultCgroups() []string {
	entries, _ := os.ReadDir(l.path("state", "io.containerd.runtime.v2.task", "k8s.io"))
	var out []string
	for _, e := range entries {
		out = append(out, defaultCgroupNamespace+"/"+e.Name())
	}
	return out
}
