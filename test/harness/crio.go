package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
)

// Binaries a CRI-O instance needs besides runc: crio and pinns from install.sh's cache,
// conmon and podman (to load images into CRI-O's storage) from Debian.
const (
	crioBin    = "crio"
	pinnsBin   = "pinns"
	conmonPath = "/usr/bin/conmon"
	podmanPath = "/usr/bin/podman"
)

// CRIO is one running CRI-O instance, the counterpart of Containerd: private root, runroot,
// sockets, CNI and hooks directories, config and storage config, all below Dir(). Its methods
// are safe for concurrent use.
type CRIO struct{ instance }

// StartCRIO creates an instance directory under /tmp, starts CRI-O there with NRI (when
// opts.NRI), loads BusyboxImage and PauseImage into its storage and waits until CRI answers.
// Options.BaseRuntimeSpecs is containerd-only and refused. On failure StartCRIO cleans up
// and returns the closed instance with the error, as Start does.
func StartCRIO(ctx context.Context, opts Options) (*CRIO, error) {
	opts.BinDir = opts.binDir()
	for _, p := range KindCRIO.Binaries() {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("harness binary %s: %w (run test/tools/install.sh)", p, err)
		}
	}
	if len(opts.BaseRuntimeSpecs) > 0 {
		return nil, errors.New("BaseRuntimeSpecs is a containerd setting; CRI-O has none")
	}
	sweepStale()
	dir, err := os.MkdirTemp(instanceParent, instanceDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("create instance directory in %s: %w", instanceParent, err)
	}
	c := &CRIO{instance{opts: opts, layout: layout{dir: dir}}}
	if err := c.start(ctx); err != nil {
		return c, errors.Join(err, c.Close())
	}
	return c, nil
}

// Files of a CRI-O instance, besides the shared layout (owner, pod-logs, nri/...).
func (c *CRIO) config() string      { return c.layout.path("crio.conf") }
func (c *CRIO) configDir() string   { return c.layout.path("crio.conf.d") }
func (c *CRIO) storageConf() string { return c.layout.path("storage.conf") }
func (c *CRIO) registries() string  { return c.layout.path("registries.conf") }
func (c *CRIO) socket() string      { return c.layout.path("crio.sock") }
func (c *CRIO) graphRoot() string   { return c.layout.path("root") }
func (c *CRIO) runRoot() string     { return c.layout.path("run") }

func (c *CRIO) start(ctx context.Context) error {
	l := c.layout
	if err := writeOwner(l); err != nil {
		return err
	}
	wrapper, err := buildRuncWrapper(ctx, l.dir, filepath.Join(c.opts.BinDir, runcBin))
	if err != nil {
		return err
	}
	if err := c.writeConfig(wrapper); err != nil {
		return err
	}
	if c.log, err = openLogSink(c.LogPath(), c.opts.Log); err != nil {
		return err
	}
	if c.cri, err = newClient(c.socket(), l.cgroupParent(), l.podLogs()); err != nil {
		return err
	}
	// Images go into the storage before CRI-O starts: podman and CRI-O then never hold the
	// storage at the same time.
	archives, err := singleImageArchives(ctx, l.dir)
	if err != nil {
		return err
	}
	for _, a := range archives {
		if err := c.podman(ctx, "load", "-q", "-i", a); err != nil {
			return err
		}
	}
	if err := c.startDaemon(ctx); err != nil {
		return err
	}
	return poll(ctx, readyTimeout, func(ctx context.Context) error {
		for _, ref := range []string{BusyboxImage, PauseImage} {
			if ok, err := c.cri.hasImage(ctx, ref); err != nil || !ok {
				return fmt.Errorf("CRI-O does not list image %s (%v)", ref, err)
			}
		}
		return nil
	})
}

// env is the environment of crio and podman: the instance's storage.conf and an empty
// registries.conf instead of the host's /etc/containers files.
func (c *CRIO) env() []string {
	return append(os.Environ(),
		"CONTAINERS_STORAGE_CONF="+c.storageConf(),
		"CONTAINERS_REGISTRIES_CONF="+c.registries(),
		"PATH="+c.opts.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// podman runs podman on the instance's storage.
func (c *CRIO) podman(ctx context.Context, args ...string) error {
	l := c.layout
	global := []string{"--root", c.graphRoot(), "--runroot", c.runRoot(), "--storage-driver", "overlay",
		"--tmpdir", l.path("podman"), "--events-backend", "none", "--cgroup-manager", "cgroupfs"}
	cmd := exec.CommandContext(ctx, podmanPath, append(global, args...)...)
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("podman %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func (c *CRIO) startDaemon(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(c.opts.BinDir, crioBin), "--config", c.config(), "--config-dir", c.configDir())
	cmd.Env = c.env()
	d, err := startLogged(cmd, c.log)
	if err != nil {
		return err
	}
	c.setDaemon(d)
	return waitReady(ctx, "crio", c.config(), c.LogPath(), d, c.cri)
}

// Name is KindCRIO.
func (c *CRIO) Name() string { return string(KindCRIO) }

// CRI returns the instance's CRI client; it stays valid across Restart.
func (c *CRIO) CRI() *Client { return c.cri }

// Dir is the instance directory.
func (c *CRIO) Dir() string { return c.layout.dir }

// LogPath is the file that collects crio's output (until Close removes Dir()).
func (c *CRIO) LogPath() string { return c.layout.path("crio.log") }

// ConfigPath is the instance's crio.conf.
func (c *CRIO) ConfigPath() string { return c.config() }

// ConfigDir is the instance's drop-in directory (crio --config-dir).
func (c *CRIO) ConfigDir() string { return c.configDir() }

// NRISocket is CRI-O's nri_listen; empty unless Options.NRI is set.
func (c *CRIO) NRISocket() string {
	if !c.opts.NRI {
		return ""
	}
	return c.layout.nriSocket()
}

// NRIPluginPath is CRI-O's nri_plugin_dir.
func (c *CRIO) NRIPluginPath() string { return cmp.Or(c.opts.NRIPluginPath, c.layout.nriPlugins()) }

// NRIPluginConfigPath is CRI-O's nri_plugin_config_dir.
func (c *CRIO) NRIPluginConfigPath() string {
	return cmp.Or(c.opts.NRIPluginConfigPath, c.layout.nriPluginConf())
}

// Restart stops crio with SIGTERM and starts it again; conmon and the containers keep running.
func (c *CRIO) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.startDaemon(ctx)
}

// Close stops everything the instance started and removes Dir(), as Containerd.Close does:
// pods through CRI while crio answers, then crio, every process naming Dir() (conmon, pinns)
// or in the instance's cgroups, the NRI plugins crio launched, every mount below Dir() (the
// storage's overlays, shm, pinned namespaces), the cgroups, and the directory.
func (c *CRIO) Close() error {
	if c == nil {
		return nil
	}
	return c.close()
}

type crioRuntime struct{ Name string }

// crioConfigData is what crioConfigTemplate renders.
type crioConfigData struct {
	Root, RunRoot, Dir, Socket, Conmon, Pinns, Wrapper, RuncRoot string
	Runtimes                                                     []crioRuntime
	NOFILE, NPROC                                                string
	Pause                                                        string
	NRI                                                          bool
	NRISocket, NRIPlugins, NRIPluginConf, NRITimeout             string
}

func (c *CRIO) writeConfig(wrapper string) error {
	l := c.layout
	d := crioConfigData{
		Root:          c.graphRoot(),
		RunRoot:       c.runRoot(),
		Dir:           l.dir,
		Socket:        c.socket(),
		Conmon:        conmonPath,
		Pinns:         filepath.Join(c.opts.BinDir, pinnsBin),
		Wrapper:       wrapper,
		RuncRoot:      l.path("runc"),
		Pause:         PauseImage,
		NRI:           c.opts.NRI,
		NRISocket:     l.nriSocket(),
		NRIPlugins:    c.NRIPluginPath(),
		NRIPluginConf: c.NRIPluginConfigPath(),
	}
	if c.opts.NRIRequestTimeout > 0 {
		d.NRITimeout = c.opts.NRIRequestTimeout.String()
	}
	// Raising a limit above the hard one needs CAP_SYS_RESOURCE, which the test machines
	// lack: containers get this process's hard limits, as they may.
	for _, r := range []struct {
		res int
		out *string
	}{{syscall.RLIMIT_NOFILE, &d.NOFILE}, {6 /* RLIMIT_NPROC */, &d.NPROC}} {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(r.res, &lim); err != nil {
			return fmt.Errorf("getrlimit: %w", err)
		}
		*r.out = fmt.Sprintf("%d:%d", lim.Max, lim.Max)
	}
	for _, h := range append([]string{DefaultRuntimeHandler}, c.opts.Handlers...) {
		if !handlerName.MatchString(h) {
			return fmt.Errorf("runtime handler %q: name must match %s", h, handlerName)
		}
		d.Runtimes = append(d.Runtimes, crioRuntime{Name: h})
	}
	for _, dir := range []string{d.Root, d.RunRoot, d.RuncRoot, c.configDir(), l.path("hooks"), l.path("cni"),
		l.path("cdi"), l.path("exits"), l.path("a"), l.path("ns"), l.path("logs"), l.path("podman"), l.path("lib"),
		l.podLogs(), d.NRIPlugins, d.NRIPluginConf} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	files := map[string]string{
		c.storageConf():       fmt.Sprintf("[storage]\ndriver = %q\ngraphroot = %q\nrunroot = %q\n", "overlay", d.Root, d.RunRoot),
		c.registries():        "",
		l.path("policy.json"): `{"default": [{"type": "insecureAcceptAnything"}]}` + "\n",
	}
	var b strings.Builder
	if err := crioConfigTemplate.Execute(&b, d); err != nil {
		return fmt.Errorf("render %s: %w", c.config(), err)
	}
	files[c.config()] = b.String()
	for path, data := range files {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// crioConfigTemplate is a CRI-O 1.34 config. Every path CRI-O would take from its defaults
// (/var/lib/containers, /run/containers, /var/run/crio, /var/lib/crio, /var/log/crio,
// /etc/cni/net.d, /opt/cni/bin, /usr/share/containers/oci/hooks.d, /etc/cdi, /var/run/nri,
// /etc/nri/...) points into the instance directory. Less obvious settings:
//   - default_ulimits: CRI-O's own defaults would need CAP_SYS_RESOURCE to apply.
//   - conmon_cgroup = 'pod': conmon lands in the pod's cgroup, below the instance's cgroup
//     parent, where Close finds it.
//   - runtime_path is the test-only runc wrapper (see runcWrapperSource), not runc itself.
//   - hooks_dir is an empty directory: CRI-O refuses to start when a hooks.d file names a
//     stage it does not know (podman's precreate).
//   - stream_port = '0': concurrent instances must not fight over a fixed TCP port.
var crioConfigTemplate = template.Must(template.New("crio").Funcs(template.FuncMap{
	"q": tomlString,
}).Parse(`[crio]
root = {{q .Root}}
runroot = {{q .RunRoot}}
storage_driver = 'overlay'
log_dir = {{q (print .Dir "/logs")}}
version_file = {{q (print .Dir "/run/crio-version")}}
version_file_persist = {{q (print .Dir "/lib/version")}}
clean_shutdown_file = {{q (print .Dir "/lib/clean.shutdown")}}

[crio.api]
listen = {{q .Socket}}
stream_address = '127.0.0.1'
stream_port = '0'

[crio.runtime]
default_runtime = 'runc'
cgroup_manager = 'cgroupfs'
conmon = {{q .Conmon}}
conmon_cgroup = 'pod'
default_ulimits = ['nofile={{.NOFILE}}', 'nproc={{.NPROC}}']
hooks_dir = [{{q (print .Dir "/hooks")}}]
cdi_spec_dirs = [{{q (print .Dir "/cdi")}}]
container_exits_dir = {{q (print .Dir "/exits")}}
container_attach_socket_dir = {{q (print .Dir "/a")}}
namespaces_dir = {{q (print .Dir "/ns")}}
pinns_path = {{q .Pinns}}
default_mounts_file = ''
irqbalance_config_file = ''
irqbalance_config_restore_file = 'disable'
{{- range .Runtimes}}

[crio.runtime.runtimes.{{q .Name}}]
runtime_path = {{q $.Wrapper}}
runtime_type = 'oci'
runtime_root = {{q $.RuncRoot}}
{{- end}}

[crio.image]
pause_image = {{q .Pause}}
pause_command = '/pause'
signature_policy = {{q (print .Dir "/policy.json")}}

[crio.network]
network_dir = {{q (print .Dir "/cni")}}
plugin_dirs = [{{q (print .Dir "/cni")}}]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = {{.NRI}}
nri_listen = {{q .NRISocket}}
nri_plugin_dir = {{q .NRIPlugins}}
nri_plugin_config_dir = {{q .NRIPluginConf}}
{{- if .NRITimeout}}
nri_plugin_request_timeout = {{q .NRITimeout}}
{{- end}}
`))

// runcWrapperSource is the OCI runtime CRI-O's test instances call instead of runc. The test
// machines lack CAP_SYS_RESOURCE, and CRI-O (unlike containerd, which has
// restrict_oom_score_adj and takes a privileged container's capabilities from its own) asks
// for two things only that capability allows: the pause container's negative oom_score_adj,
// and every known capability, CAP_SYS_RESOURCE included, for a privileged container. The
// wrapper raises a negative process.oomScoreAdj to 0 and drops capabilities outside its own
// bounding set, in the bundle's config.json (create, run) or an exec's process.json, then
// executes runc. Nothing else changes.
const runcWrapperSource = `// Command crio-runc adapts CRI-O's OCI specs to a host without CAP_SYS_RESOURCE (test only).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

var runc string // set with -ldflags -X

func main() {
	args := os.Args[1:]
	for i, a := range args {
		var path string
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			path = filepath.Join(args[i+1], "config.json")
		case strings.HasPrefix(a, "--bundle="):
			path = filepath.Join(strings.TrimPrefix(a, "--bundle="), "config.json")
		case (a == "--process" || a == "-p") && i+1 < len(args):
			path = args[i+1]
		case strings.HasPrefix(a, "--process="):
			path = strings.TrimPrefix(a, "--process=")
		default:
			continue
		}
		if err := fix(path, filepath.Base(path) == "config.json"); err != nil {
			fmt.Fprintf(os.Stderr, "crio-runc: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
	err := syscall.Exec(runc, append([]string{runc}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "crio-runc: exec %s: %v\n", runc, err)
	os.Exit(1)
}

func fix(path string, bundle bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	proc := doc
	if bundle {
		p, ok := doc["process"].(map[string]any)
		if !ok {
			return nil
		}
		proc = p
	}
	if adj, ok := proc["oomScoreAdj"].(float64); ok && adj < 0 {
		proc["oomScoreAdj"] = 0
	}
	if caps, ok := proc["capabilities"].(map[string]any); ok {
		have := bounding()
		for set, list := range caps {
			names, ok := list.([]any)
			if !ok {
				continue
			}
			kept := []any{}
			for _, n := range names {
				// A name the table lacks is kept: runc reports it if it is wrong.
				if s, ok := n.(string); !ok || have[s] || !known(have, s) {
					kept = append(kept, n)
				}
			}
			caps[set] = kept
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}

func known(have map[string]bool, name string) bool { _, ok := have[name]; return ok }

// names are the capabilities by number (linux/capability.h).
var names = []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL",
	"SETGID", "SETUID", "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST",
	"NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT",
	"SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME",
	"SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP",
	"MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
	"PERFMON", "BPF", "CHECKPOINT_RESTORE"}

// bounding maps each capability name of the table to whether this process's bounding set
// holds it.
func bounding() map[string]bool {
	have := map[string]bool{}
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			mask, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			for i, n := range names {
				have["CAP_"+n] = mask&(1<<i) != 0
			}
		}
	}
	return have
}
`

// buildRuncWrapper compiles runcWrapperSource into dir with runc's path built in.
func buildRuncWrapper(ctx context.Context, dir, runc string) (string, error) {
	build, err := os.MkdirTemp(dir, "wrapper-build-")
	if err != nil {
		return "", fmt.Errorf("create wrapper build dir: %w", err)
	}
	defer os.RemoveAll(build)
	src := filepath.Join(build, "main.go")
	if err := os.WriteFile(src, []byte(runcWrapperSource), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", src, err)
	}
	out := filepath.Join(dir, "crio-runc")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w -X main.runc="+runc, "-o", out, src)
	cmd.Dir = build
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off", "GO111MODULE=on")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build the CRI-O runc wrapper: %w\n%s", err, msg)
	}
	return out, nil
}
