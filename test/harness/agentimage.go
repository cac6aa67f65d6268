package harness

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
)

// AgentImageRepository is the repository `make image` names the mountkeeper image in; its
// tag is the version (git describe), and the chart in deploy/helm names the same tag.
const AgentImageRepository = "localhost/mountkeeper"

// AgentBinaryPath is where the image holds the binary (its entrypoint).
const AgentBinaryPath = "/usr/local/bin/mountkeeper"

// AgentHookPath is where the image holds mountkeeper-hook (hook mode).
const AgentHookPath = "/usr/local/bin/mountkeeper-hook"

// AgentRuntimePath is where the image holds mountkeeper-runtime, which `runtime configure`
// (the init container) installs on the node as the class handlers' runtime wrapper.
const AgentRuntimePath = "/usr/local/bin/mountkeeper-runtime"

// AgentCommands are the commands (./cmd/<name>) the image holds, each in /usr/local/bin
// under its name: what `make image` and BuildFor build per architecture.
var AgentCommands = []string{"mountkeeper", "mountkeeper-hook", "mountkeeper-runtime"}

// AgentPlatform is one architecture of the agent image: its three static binaries.
type AgentPlatform struct {
	Arch                  string // GOARCH: amd64, arm64
	Binary, Hook, Runtime []byte
}

// binaries pairs each of p's binaries with its path in the image.
func (p *AgentPlatform) binaries() []struct {
	path string
	data *[]byte
} {
	return []struct {
		path string
		data *[]byte
	}{{AgentBinaryPath, &p.Binary}, {AgentHookPath, &p.Hook}, {AgentRuntimePath, &p.Runtime}}
}

// ReadAgentPlatform reads the binaries of arch that `make image` (or BuildFor) put in
// dir/linux_<arch>/, each under its name in the image.
func ReadAgentPlatform(dir, arch string) (AgentPlatform, error) {
	p := AgentPlatform{Arch: arch}
	for _, b := range p.binaries() {
		data, err := os.ReadFile(filepath.Join(dir, "linux_"+arch, filepath.Base(b.path)))
		if err != nil {
			return p, err
		}
		*b.data = data
	}
	return p, nil
}

// elfArch maps the ELF machines the image is built for to their GOARCH.
var elfArch = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}

// AgentImageArchive returns an OCI image-layout tarball (for `ctr images import` or `podman
// load`) of one image, name, for the architecture the binaries are built for, that holds
// nothing but binary at AgentBinaryPath, hook at AgentHookPath, runtime at AgentRuntimePath,
// an empty /tmp and /etc/mountkeeper: no base image is pulled. All must be statically linked,
// as BuildMountkeeper, BuildHook and BuildRuntimeWrapper (and `make build`) build them: there
// is no libc in the image.
func AgentImageArchive(binary, hook, runtime []byte, name string) ([]byte, error) {
	arch, err := binaryArch(AgentBinaryPath, binary)
	if err != nil {
		return nil, err
	}
	img, err := agentImage(name, AgentPlatform{Arch: arch, Binary: binary, Hook: hook, Runtime: runtime})
	if err != nil {
		return nil, err
	}
	return ociArchive([]imageSpec{img})
}

// AgentImageIndexArchive returns an OCI image-layout tarball of one multi-platform image,
// name: an image index with one manifest per platform (`make image` builds amd64 and arm64).
func AgentImageIndexArchive(name string, platforms []AgentPlatform) ([]byte, error) {
	var imgs []imageSpec
	for _, p := range platforms {
		img, err := agentImage(name, p)
		if err != nil {
			return nil, err
		}
		imgs = append(imgs, img)
	}
	return ociIndexArchive(name, imgs)
}

// agentImage checks that p's binaries are static and built for p.Arch, and returns its image.
func agentImage(name string, p AgentPlatform) (imageSpec, error) {
	files := []fileEntry{
		dirEntry("etc", 0o755), dirEntry("etc/mountkeeper", 0o755),
		dirEntry("tmp", 0o1777),
		dirEntry("usr", 0o755), dirEntry("usr/local", 0o755), dirEntry("usr/local/bin", 0o755),
	}
	for _, b := range p.binaries() {
		arch, err := binaryArch(b.path, *b.data)
		if err != nil {
			return imageSpec{}, err
		}
		if arch != p.Arch {
			return imageSpec{}, fmt.Errorf("the %s image's %s is built for %s (build it with GOARCH=%s)", p.Arch, b.path, arch, p.Arch)
		}
		files = append(files, fileEntryOf(b.path[1:], 0o755, *b.data))
	}
	return imageSpec{
		name:       name,
		arch:       p.Arch,
		files:      files,
		env:        []string{imagePATH},
		entrypoint: []string{AgentBinaryPath},
		cmd:        []string{"nri"},
	}, nil
}

// binaryArch returns the GOARCH a static ELF binary is built for; a dynamically linked one is
// refused: the image has no libc.
func binaryArch(path string, data []byte) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("the image's %s: %w", path, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("the image's %s is dynamically linked: the image has no libc (build it with `make image`)", path)
		}
	}
	arch, ok := elfArch[f.Machine]
	if !ok {
		return "", fmt.Errorf("the image's %s is built for %s, which the image does not support (amd64, arm64)", path, f.Machine)
	}
	return arch, nil
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
