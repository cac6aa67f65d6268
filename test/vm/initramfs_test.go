package vm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestModuleOrder: every module is loaded after what it depends on, once; a built-in module
// needs no file; a module that is neither is an error naming it.
func TestModuleOrder(t *testing.T) {
	dir := t.TempDir()
	dep := `kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/fuse/virtiofs.ko.xz: kernel/fs/fuse/fuse.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/fs/fuse/fuse.ko:
`
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/overlayfs/overlay.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := moduleOrder(dir, []string{"virtio_pci", "virtiofs", "overlay"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"kernel/drivers/virtio/virtio_ring.ko", "kernel/drivers/virtio/virtio.ko",
		"kernel/drivers/virtio/virtio_pci_modern_dev.ko", "kernel/drivers/virtio/virtio_pci.ko",
		"kernel/fs/fuse/fuse.ko", "kernel/fs/fuse/virtiofs.ko.xz",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order\n%q\nwant\n%q", got, want)
	}
	if _, err := moduleOrder(dir, []string{"nfsd"}); err == nil || !strings.Contains(err.Error(), "nfsd") {
		t.Fatalf("missing module: %v, want an error naming nfsd", err)
	}
}
