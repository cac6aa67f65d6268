//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// fillSource writes into dir, as host root: secret (0600, "secret of host root") and
// public (0644).
func fillSource(t *testing.T, dir string) {
	t.Helper()
	for name, mode := range map[string]os.FileMode{"secret": 0o600, "public": 0o644} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name+" of host root\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// hostOwner is the host uid:gid of path.
func hostOwner(t *testing.T, path string) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// runUserns runs a container of handler in a new pod, with a user namespace when userns, as
// uid runAs when not nil.
func (n *node) runUserns(handler, name string, userns bool, runAs *int64) (string, error) {
	n.t.Helper()
	cri := n.rt.CRI()
	pod, err := cri.RunPod(n.ctx, harness.PodOptions{Name: name + "-pod", RuntimeHandler: handler, UserNamespace: userns})
	if err != nil {
		n.t.Fatalf("run pod %s (user namespace %v): %v", name, userns, err)
	}
	id, err := cri.CreateContainer(n.ctx, pod, harness.ContainerOptions{Name: name, UserNamespace: userns, RunAsUser: runAs})
	if err != nil {
		return "", err
	}
	n.byHandler[handler] = append(n.byHandler[handler], id)
	if err := cri.StartContainer(n.ctx, id); err != nil {
		return "", err
	}
	return id, nil
}
