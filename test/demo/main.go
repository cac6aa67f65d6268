// Command demo shows mountkeeper's main job on a throw-away node: it starts a private
// containerd + runc with NRI, runs `mountkeeper nri` on its embedded default config, runs a
// container of the demo runtime class, probes every class mount for real and prints what its
// propagation did. It then shows the error a container gets when a source cannot propagate.
// `make demo` runs it in a private mount namespace, so nothing it mounts outlives it.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/specmod"
	"github.com/mountkeeper/mountkeeper/test/harness"
)

const (
	demoClass  = "mountkeeper-demo"
	demoSource = "/run/mountkeeper-demo" // where the embedded default's sources live
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// demo is what every scenario gets: the throw-away node and the way to (re)start the plugin.
type demo struct {
	ctx    context.Context
	work   string // the demo's temp dir
	node   *harness.Containerd
	bin    string
	plugin *harness.Plugin
}

// startPlugin starts `mountkeeper nri` with no --config: the embedded default.
func (d *demo) startPlugin() error { return d.startPluginWith("", "") }

// startPluginWith starts the plugin on config ("" for the embedded default) in a cgroup2
// directory ("" for the demo's own).
func (d *demo) startPluginWith(config, cgroup string) error {
	var err error
	d.plugin, err = harness.StartPlugin(d.ctx, harness.PluginOptions{Binary: d.bin, Socket: d.node.NRISocket(), Config: config, Cgroup: cgroup})
	return err
}

func (d *demo) stopPlugin() {
	if d.plugin != nil {
		d.plugin.Stop()
	}
}

// pluginLog prints the plugin's log lines that contain substr.
func (d *demo) pluginLog(substr string) {
	for _, line := range strings.Split(d.plugin.Log(), "\n") {
		if strings.Contains(line, substr) {
			fmt.Println("  plugin log:", line)
		}
	}
}

func run() error {
	if os.Getenv("MOUNTKEEPER_PRIVATE_MOUNT_NS") == "" {
		return errors.New("the demo mounts over /run/mountkeeper-demo, /var/lib/kubelet and /var/lib/mountkeeper: run it with `make demo`, which gives it a private mount namespace")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := os.Stat(configs.DefaultPath); err == nil {
		return fmt.Errorf("%s exists and would replace the embedded default; move it away to run the demo", configs.DefaultPath)
	}
	work, err := os.MkdirTemp("", "mountkeeper-demo-")
	if err != nil {
		return err
	}
	defer func() {
		harness.UnmountAll(work) // the network scenario's state dir is a mount of itself
		os.RemoveAll(work)
	}()
	// The embedded default keeps its state (the guard key, subPath copies) in the default
	// state dir: a tmpfs private to the demo's mount namespace keeps the host's untouched.
	cleanupState, err := privateTmpfs(configs.DefaultStateDir)
	defer cleanupState()
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, work: work}
	if d.bin, err = harness.BuildMountkeeper(work); err != nil {
		return err
	}
	step("starting containerd 2.4.2 + runc 1.5.2 with NRI in a temp dir, runtime handler %q", demoClass)
	d.node, err = harness.Start(ctx, harness.Options{Handlers: []string{demoClass, sshfsClass}, NRI: true})
	defer func() {
		if err := d.node.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "cleanup:", err)
		}
	}()
	if err != nil {
		return err
	}
	step("starting `mountkeeper nri` with no --config: it uses the embedded default (configs/default.yaml)")
	if err := d.startPlugin(); err != nil {
		return err
	}
	defer d.stopPlugin()

	for _, scenario := range []func(*demo) error{propagation, subPathRepair, networkFilesystem} {
		if err := scenario(d); err != nil {
			return err
		}
	}
	step("done: everything the demo started and mounted is being removed")
	return nil
}

// propagation runs a container of the demo class, probes each class mount for real, then
// shows the error a container gets when the host side cannot propagate.
func propagation(d *demo) error {
	cfg := configs.Default()
	_, class, _ := cfg.Class(demoClass)
	cleanup, err := prepareSources(class)
	defer cleanup()
	if err != nil {
		return err
	}
	cri := d.node.CRI()
	pod, err := cri.RunPod(d.ctx, harness.PodOptions{Name: "demo", RuntimeHandler: demoClass})
	if err != nil {
		return err
	}
	id, err := cri.CreateContainer(d.ctx, pod, harness.ContainerOptions{Name: "demo", Privileged: true})
	if err != nil {
		return fmt.Errorf("create the demo container: %w", err)
	}
	if err := cri.StartContainer(d.ctx, id); err != nil {
		return err
	}
	d.pluginLog("adding")
	step("container %q of runtime class %s is running; probing each class mount:", "demo", demoClass)
	if err := probeAll(d.ctx, cri, id, class); err != nil {
		return err
	}

	step("now the host makes %s private, and a second container of the class is created:", demoSource)
	if err := unix.Mount("", demoSource, "", unix.MS_PRIVATE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s private: %w", demoSource, err)
	}
	_, err = cri.CreateContainer(d.ctx, pod, harness.ContainerOptions{Name: "refused", Privileged: true})
	if err == nil {
		return errors.New("the second container was created although its rshared source is private")
	}
	fmt.Printf("  refused, as it must be:\n  %s\n", strings.ReplaceAll(err.Error(), "; ", ";\n    "))
	return cri.RemovePod(d.ctx, pod)
}

// prepareSources puts a shared tmpfs at demoSource holding one directory per class mount,
// as an operator prepares a node for rslave/rshared volumes.
func prepareSources(class configs.RuntimeClass) (func(), error) {
	created := false
	cleanup := func() {
		harness.UnmountAll(demoSource)
		if created {
			os.Remove(demoSource)
		}
	}
	if _, err := os.Stat(demoSource); err == nil {
		return func() {}, fmt.Errorf("%s already exists: is another demo running?", demoSource)
	}
	created = true
	if err := harness.MountTmpfs(demoSource, "shared"); err != nil {
		return cleanup, err
	}
	for _, m := range class.Mounts {
		if err := os.MkdirAll(m.Source, 0o755); err != nil {
			return cleanup, err
		}
	}
	return cleanup, nil
}

func probeAll(ctx context.Context, cri *harness.Client, id string, class configs.RuntimeClass) error {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  MOUNT\tPROPAGATION\tHOST MOUNT MADE LATER\tMOUNT MADE IN CONTAINER\tAS EXPECTED")
	var wrong []string
	for _, cm := range class.Mounts {
		m := cm.Bind
		seen, err := harness.ProbePropagation(ctx, cri, id, m.Source, m.Destination)
		if err != nil {
			return err
		}
		want := harness.Seen{HostToContainer: m.Propagation != specmod.Private, ContainerToHost: m.Propagation == specmod.Shared}
		verdict := "yes"
		if seen != want {
			verdict = "NO"
			wrong = append(wrong, m.Destination)
		}
		fmt.Fprintf(tw, "  %s -> %s\t%s (%s)\t%s\t%s\t%s\n", m.Source, m.Destination, m.Propagation, m.Propagation.KubernetesName(),
			visible(seen.HostToContainer, "seen in container", "not seen in container"),
			visible(seen.ContainerToHost, "seen on host", "stays in container"), verdict)
	}
	tw.Flush()
	if len(wrong) > 0 {
		return fmt.Errorf("propagation differs from the config for %s", strings.Join(wrong, ", "))
	}
	return nil
}

func visible(b bool, yes, no string) string {
	if b {
		return yes
	}
	return no
}

func step(format string, a ...any) {
	fmt.Printf("\n==> "+format+"\n", a...)
}
