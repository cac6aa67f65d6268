package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// AgentImage is the name `make image` gives the mountkeeper image and deploy/ refers to.
const AgentImage = "localhost/mountkeeper:latest"

// AgentBinaryPath is where the image holds the binary (its entrypoint).
const AgentBinaryPath = "/usr/local/bin/mountkeeper"

// StaticBuildArgs are the `go build` arguments (after "build") of the image's binary, built
// as `make image` does, with CGO_ENABLED=0: static, so the image needs no libc.
func StaticBuildArgs(out, ldflags string) []string {
	return []string{"-ldflags", ldflags, "-o", out, "./cmd/mountkeeper"}
}

// BuildStaticMountkeeper builds the image's binary into dir (from the module root).
func BuildStaticMountkeeper(ctx context.Context, dir string) (string, error) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	out := filepath.Join(dir, "mountkeeper-static")
	cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, StaticBuildArgs(out, "-X main.version=e2e")...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build (static) ./cmd/mountkeeper: %w: %s", err, b)
	}
	return out, nil
}

// AgentImageArchive returns an OCI image-layout tarball (for `ctr images import` or `podman
// load`) of one image, name, that holds nothing but binary at AgentBinaryPath, an empty /tmp
// and /etc/mountkeeper: no base image is pulled. binary must be statically linked: there is no
// libc in the image.
func AgentImageArchive(binary []byte, name string) ([]byte, error) {
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("the image's binary: %w", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("the image's binary is dynamically linked: the image has no libc (build it with `make image`)")
		}
	}
	return ociArchive([]imageSpec{{
		name: name,
		files: []fileEntry{
			dirEntry("etc", 0o755), dirEntry("etc/mountkeeper", 0o755),
			dirEntry("tmp", 0o1777),
			dirEntry("usr", 0o755), dirEntry("usr/local", 0o755), dirEntry("usr/local/bin", 0o755),
			fileEntryOf(AgentBinaryPath[1:], 0o755, binary),
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
	return poll(ctx, readyTimeout, func(ctx context.Context) error {
		ok, err := c.cri.hasImage(ctx, ref)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("CRI does not list image %s", ref)
		}
		return nil
	})
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
