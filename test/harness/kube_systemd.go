package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// KubeletUnit is the service that runs kubelet on a node with KubeOptions.Systemd.
const KubeletUnit = "kubelet.service"

// KubeletSystemdBinds are the host paths a systemd that is to run kubelet (KubeOptions.Systemd)
// must be booted with (SystemdOptions.Binds): /dev/kmsg, for kubelet's OOM watcher.
var KubeletSystemdBinds = []string{"/dev/kmsg"}

// installKubeletUnit prepares systemd's namespaces for kubelet and installs KubeletUnit with
// args. The namespaces are already what kubeletNamespace makes for a kubelet on the host: a
// mount namespace whose /var/lib and /var/log are private (the instance's overlay). Dir() is
// bound in. /dev/kmsg, which kubelet's OOM watcher cannot start without, must have been bound
// at boot (KubeletSystemdBinds). The kernel
// tunables kubelet sets are covered inside by files holding the values it wants (/proc/sys is
// read-only there anyway), so the host's settings stay as they are.
func (k *KubeNode) installKubeletUnit(ctx context.Context, args []string) error {
	sd := k.opts.Systemd
	if _, err := sd.Run(ctx, "test", "-c", "/dev/kmsg"); err != nil {
		return fmt.Errorf("kubelet needs /dev/kmsg inside: boot systemd with harness.KubeletSystemdBinds: %w", err)
	}
	if err := sd.Bind(ctx, k.dir); err != nil {
		return err
	}
	ns := filepath.Join(k.dir, "ns")
	if err := os.MkdirAll(ns, 0o755); err != nil {
		return err
	}
	for _, kt := range kernelTunables {
		f := filepath.Join(ns, "sysctl-"+strings.ReplaceAll(kt.name, "/", "."))
		if err := os.WriteFile(f, []byte(kt.value+"\n"), 0o444); err != nil {
			return err
		}
		if _, err := sd.Run(ctx, "mount", "--bind", "-o", "ro", f, "/proc/sys/"+kt.name); err != nil {
			return err
		}
	}
	for _, a := range args {
		if strings.ContainsAny(a, " \t\n\"'\\%$;") {
			return fmt.Errorf("kubelet argument %q cannot go into a unit file unquoted", a)
		}
	}
	unit := fmt.Sprintf(`[Unit]
Description=kubelet of the mountkeeper test node %[1]s
After=containerd.service

[Service]
ExecStart=%[2]s %[3]s
TimeoutStopSec=%[4]d
StandardOutput=append:%[5]s
StandardError=inherit
`, k.dir, filepath.Join(k.opts.BinDir, kubeletBin), strings.Join(args, " "), int(kubeStopTimeout.Seconds()), k.LogPath("kubelet"))
	return sd.InstallUnit(ctx, KubeletUnit, unit)
}
