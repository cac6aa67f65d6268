package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mountkeeper/mountkeeper/test/harness"
)

// crossBuild builds the image's commands (mountkeeper, mountkeeper-hook, mountkeeper-runtime)
// for each arch into dir/linux_<arch>, as `make image` does (static, no cgo).
func crossBuild(t *testing.T, dir string, archs ...string) {
	t.Helper()
	for _, arch := range archs {
		for _, cmd := range harness.AgentCommands {
			if _, err := harness.BuildFor(dir, arch, cmd); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// layout is an OCI image layout read back from a tarball.
type layout struct {
	files map[string][]byte
}

func readLayout(t *testing.T, archive []byte) layout {
	t.Helper()
	l := layout{files: map[string][]byte{}}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return l
		} else if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		l.files[strings.TrimSuffix(h.Name, "/")] = data
	}
}

type descriptor struct {
	MediaType   string                             `json:"mediaType"`
	Digest      string                             `json:"digest"`
	Platform    *struct{ Architecture, OS string } `json:"platform"`
	Annotations map[string]string                  `json:"annotations"`
}

// blob decodes the JSON blob of d.
func (l layout) blob(t *testing.T, digest string, v any) []byte {
	t.Helper()
	data, ok := l.files["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		t.Fatalf("blob %s missing from the layout", digest)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("blob %s: %v", digest, err)
		}
	}
	return data
}

// TestImageIndex: `make image`'s tarball is one image index under the versioned name, with a
// manifest per architecture whose platform, config and binaries (ELF machine) all agree.
func TestImageIndex(t *testing.T) {
	dir := t.TempDir()
	crossBuild(t, dir, "amd64", "arm64")
	out := filepath.Join(dir, "image.tar")
	const name = "localhost/mountkeeper:v0.1.0-3-gabcdef0"
	if err := run(name, dir, []string{"amd64", "arm64"}, out); err != nil {
		t.Fatal(err)
	}
	archive, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	l := readLayout(t, archive)

	var top struct{ Manifests []descriptor }
	if err := json.Unmarshal(l.files["index.json"], &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(top.Manifests) != 1 || top.Manifests[0].MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Fatalf("index.json lists %+v, want one image index", top.Manifests)
	}
	for _, key := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
		if got := top.Manifests[0].Annotations[key]; got != name {
			t.Errorf("index.json: %s = %q, want %q", key, got, name)
		}
	}

	var idx struct{ Manifests []descriptor }
	l.blob(t, top.Manifests[0].Digest, &idx)
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	var archs []string
	for _, m := range idx.Manifests {
		if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Platform == nil || m.Platform.OS != "linux" {
			t.Fatalf("image index entry %+v: want an image manifest with a linux platform", m)
		}
		arch := m.Platform.Architecture
		archs = append(archs, arch)
		var manifest struct {
			Config descriptor
			Layers []descriptor
		}
		l.blob(t, m.Digest, &manifest)
		var config struct{ Architecture, OS string }
		l.blob(t, manifest.Config.Digest, &config)
		if config.Architecture != arch || config.OS != "linux" {
			t.Errorf("the %s manifest's config says %s/%s", arch, config.OS, config.Architecture)
		}
		if len(manifest.Layers) != 1 {
			t.Fatalf("the %s manifest has %d layers, want 1", arch, len(manifest.Layers))
		}
		layer := readLayout(t, l.blob(t, manifest.Layers[0].Digest, nil))
		for _, cmd := range harness.AgentCommands {
			bin := "usr/local/bin/" + cmd
			f, err := elf.NewFile(bytes.NewReader(layer.files[bin]))
			if err != nil {
				t.Fatalf("the %s layer's %s: %v", arch, bin, err)
			}
			if f.Machine != machines[arch] {
				t.Errorf("the %s layer's %s is an ELF for %s, want %s", arch, bin, f.Machine, machines[arch])
			}
		}
	}
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Errorf("the image index has platforms %v, want amd64 and arm64", archs)
	}
}

// TestImageRefusals: a binary of the wrong architecture and an unversioned name are refused.
func TestImageRefusals(t *testing.T) {
	dir := t.TempDir()
	crossBuild(t, dir, "amd64", "arm64")
	// The arm64 slot holds the amd64 binaries.
	if err := os.Rename(filepath.Join(dir, "linux_arm64"), filepath.Join(dir, "real_arm64")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("linux_amd64", filepath.Join(dir, "linux_arm64")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	err := run("localhost/mountkeeper:v1", dir, []string{"amd64", "arm64"}, out)
	if err == nil || !strings.Contains(err.Error(), "built for amd64") {
		t.Errorf("amd64 binaries as arm64: %v, want a refusal naming the architecture", err)
	}
	for _, name := range []string{"localhost/mountkeeper:latest", "localhost/mountkeeper", "localhost:5000/mountkeeper", ""} {
		if err := run(name, dir, []string{"amd64"}, out); err == nil {
			t.Errorf("-name %q accepted, want a versioned tag required", name)
		}
	}
}
