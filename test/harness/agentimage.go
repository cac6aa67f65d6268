package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
)

// AgentImage is the name `make image` gives the mountkeeper image and deploy/ refers to.
const AgentImage = "localhost/mountkeeper:latest"

// AgentBinaryPath is where the image holds the binary (its entrypoint).
const AgentBinaryPath = "/usr/local/bin/mountkeeper"

// AgentHookPath is where the image holds mountkeeper-hook, which `runtime configure
// --install-hook` copies to the host as the guard hook.
const AgentHookPath = "/usr/local/bin/mountkeeper-hook"

// AgentImageArchive returns an OCI image-layout tarball (for `ctr images import` or `podman
// load`) of one image, name, that holds nothing but binary at AgentBinaryPath, hook at
// AgentHookPath, an empty /tmp and /etc/mountkeeper: no base image is pulled. Both must be
// statically linked, as BuildMountkeeper and BuildHook (and `make build`) build them: there
// is no libc in the image.
func AgentImageArchive(binary, hook []byte, name string) ([]byte, error) {
	for _, b := range []struct {
		path string
		data []byte
	}{{AgentBinaryPath, binary}, {AgentHookPath, hook}} {
		f, err := elf.NewFile(bytes.NewReader(b.data))
		if err != nil {
			return nil, fmt.Errorf("the image's %s: %w", b.path, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				return nil, fmt.Errorf("the image's %s is dynamically linked: the image has no libc (build it with `make image`)", b.path)
			}
		}
	}
	return ociArchive([]imageSpec{{
		name: name,
		files: []fileEntry{
			dirEntry("etc", 0o755), dirEntry("etc/mountkeeper", 0o755),
			dirEntry("tmp", 0o1777),
			dirEntry("usr", 0o755), dirEntry("usr/local", 0o755), dirEntry("usr/local/bin", 0o755),
			fileEntryOf(AgentBinaryPath[1:], 0o755, binary),
			fileEntryOf(AgentHookPath[1:], 0o755, hook),
		},
		env:        []string{imagePATH},
		entrypoint: []string{AgentBinaryPath},
		cmd:        []string{"nri"},
	}})
}

// ImportImage imports an OCI image-layout archive into the instance's k8s.io namespace (the
// one CRI and kubelet use) and waits until CRI lists ref.
func (c *Containerd) ImportImage(ctx context.Context, archive, ref string) error {
	if err := importImages(ctx, c.opts.BinDir, c.layout.socket(), archive); err != nil {
		return err
	}
	return c.waitImages(ctx, ref)
}

// WriteBusyboxArchive writes an OCI image-layout tarball holding only BusyboxImage, for
// runtimes that load images themselves (podman load).
func WriteBusyboxArchive(path string) error {
	b, err := loadBusybox()
	if err != nil {
		return err
	}
	archive, err := ociArchive([]imageSpec{b.image()})
	if err != nil {
		return err
	}
	return os.WriteFile(path, archive, 0o644)
}
