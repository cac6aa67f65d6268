package harness

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// No registry is reachable from the test machines, so the harness builds its images itself as
// one OCI image-layout archive and imports it with ctr. Building the pause binary takes a few
// seconds, so archives are cached by the hash of everything that goes into them.

// imageFormat is part of the cache key: bump it whenever the archive layout or an image's
// content changes in a way the other key inputs do not capture.
const imageFormat = "mk-images-v2"

// imageNameAnnotation is how ctr import learns an image's full name from index.json;
// refNameAnnotation is the OCI one, which podman load reads (ctr prefers the first).
const (
	imageNameAnnotation = "io.containerd.image.name"
	refNameAnnotation   = "org.opencontainers.image.ref.name"
)

const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// epoch is the timestamp of every file in the archives: it keeps them byte-for-byte
// reproducible, so identical inputs give identical image IDs.
var epoch = time.Unix(0, 0).UTC()

// fileEntry is one file, directory or symlink of an image layer.
type fileEntry struct {
	name     string // relative, no leading slash
	typeflag byte
	mode     int64
	linkname string
	data     []byte
}

func dirEntry(name string, mode int64) fileEntry {
	return fileEntry{name: name, typeflag: tar.TypeDir, mode: mode}
}

func fileEntryOf(name string, mode int64, data []byte) fileEntry {
	return fileEntry{name: name, typeflag: tar.TypeReg, mode: mode, data: data}
}

func symlinkEntry(name, target string) fileEntry {
	return fileEntry{name: name, typeflag: tar.TypeSymlink, mode: 0o777, linkname: target}
}

// imageSpec describes one single-layer image.
type imageSpec struct {
	name       string
	arch       string      // GOARCH of its binaries; "" is this machine's
	files      []fileEntry // in tar order: parents before children
	env        []string
	entrypoint []string
	cmd        []string
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Env        []string `json:"Env,omitempty"`
		Entrypoint []string `json:"Entrypoint,omitempty"`
		Cmd        []string `json:"Cmd,omitempty"`
		WorkingDir string   `json:"WorkingDir,omitempty"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// blobStore collects content-addressed blobs in insertion order.
type blobStore struct {
	order []string
	data  map[string][]byte
}

func (s *blobStore) add(mediaType string, b []byte) descriptor {
	sum := sha256.Sum256(b)
	d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	if _, ok := s.data[d.Digest]; !ok {
		s.order = append(s.order, d.Digest)
		s.data[d.Digest] = b
	}
	return d
}

func (s *blobStore) addJSON(mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	return s.add(mediaType, b), nil
}

// tarEntries writes entries as a reproducible tar stream.
func tarEntries(entries []fileEntry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:     e.name,
			Typeflag: e.typeflag,
			Mode:     e.mode,
			Linkname: e.linkname,
			Size:     int64(len(e.data)),
			ModTime:  epoch,
			Format:   tar.FormatPAX,
		}
		if e.typeflag == tar.TypeDir {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar header %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("tar data %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return buf.Bytes(), nil
}

// addImage stores the layer, config and manifest of img and returns the manifest's descriptor
// for index.json.
func (s *blobStore) addImage(img imageSpec) (descriptor, error) {
	layerTar, err := tarEntries(img.files)
	if err != nil {
		return descriptor{}, fmt.Errorf("image %s: %w", img.name, err)
	}
	layer := s.add(mediaTypeLayer, layerTar)

	arch := cmp.Or(img.arch, runtime.GOARCH)
	cfg := imageConfig{Architecture: arch, OS: "linux"}
	cfg.Config.Env = img.env
	cfg.Config.Entrypoint = img.entrypoint
	cfg.Config.Cmd = img.cmd
	cfg.Config.WorkingDir = "/"
	cfg.RootFS.Type = "layers"
	cfg.RootFS.DiffIDs = []string{layer.Digest} // uncompressed: diff ID == digest
	config, err := s.addJSON(mediaTypeConfig, cfg)
	if err != nil {
		return descriptor{}, err
	}
	m, err := s.addJSON(mediaTypeManifest, manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: config, Layers: []descriptor{layer}})
	if err != nil {
		return descriptor{}, err
	}
	m.Platform = &platform{Architecture: arch, OS: "linux"}
	m.Annotations = map[string]string{imageNameAnnotation: img.name, refNameAnnotation: img.name}
	return m, nil
}

// ociArchive returns an OCI image-layout tarball holding all images.
func ociArchive(images []imageSpec) ([]byte, error) {
	var blobs blobStore
	idx := index{SchemaVersion: 2, MediaType: mediaTypeIndex}
	for _, img := range images {
		m, err := blobs.addImage(img)
		if err != nil {
			return nil, err
		}
		idx.Manifests = append(idx.Manifests, m)
	}
	return blobs.layout(idx)
}

// ociIndexArchive returns an OCI image-layout tarball holding one multi-platform image, name:
// index.json names an image index that lists one manifest per image of platforms, each with
// its platform. The runtime picks the manifest of its node's architecture.
func ociIndexArchive(name string, platforms []imageSpec) ([]byte, error) {
	var blobs blobStore
	nested := index{SchemaVersion: 2, MediaType: mediaTypeIndex}
	for _, img := range platforms {
		m, err := blobs.addImage(img)
		if err != nil {
			return nil, err
		}
		m.Annotations = nil // the name belongs to the index
		nested.Manifests = append(nested.Manifests, m)
	}
	d, err := blobs.addJSON(mediaTypeIndex, nested)
	if err != nil {
		return nil, err
	}
	d.Annotations = map[string]string{imageNameAnnotation: name, refNameAnnotation: name}
	return blobs.layout(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{d}})
}

// layout returns the OCI image-layout tarball of the blobs with idx as index.json.
func (s *blobStore) layout(idx index) ([]byte, error) {
	indexJSON, err := json.Marshal(idx)
	if err != nil {
		return nil, fmt.Errorf("encode index.json: %w", err)
	}
	entries := []fileEntry{
		fileEntryOf("oci-layout", 0o644, []byte(`{"imageLayoutVersion":"1.0.0"}`)),
		fileEntryOf("index.json", 0o644, indexJSON),
		dirEntry("blobs", 0o755),
		dirEntry("blobs/sha256", 0o755),
	}
	for _, d := range s.order {
		entries = append(entries, fileEntryOf("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), 0o644, s.data[d]))
	}
	return tarEntries(entries)
}

// imageArchive returns the path of an archive with BusyboxImage and PauseImage, from the cache
// under cacheDir()/images when possible. workDir is scratch space for building pause; if the
// cache cannot be written the archive is built there instead.
func imageArchive(ctx context.Context, workDir string) (string, error) {
	paths, err := imageArchives(ctx, workDir, false)
	if err != nil {
		return "", err
	}
	return paths[0], nil
}

// singleImageArchives is imageArchive with one archive per image: podman load (how images get
// into CRI-O's storage) refuses an OCI archive that holds more than one image.
func singleImageArchives(ctx context.Context, workDir string) ([]string, error) {
	return imageArchives(ctx, workDir, true)
}

// imageArchives returns one archive with all images, or with split one archive per image.
func imageArchives(ctx context.Context, workDir string, split bool) ([]string, error) {
	busybox, err := loadBusybox()
	if err != nil {
		return nil, err
	}
	key := sha256.New()
	for _, part := range [][]byte{[]byte(imageFormat), []byte(runtime.GOARCH), []byte(pauseSource), busybox.binary} {
		fmt.Fprintf(key, "%d:", len(part))
		key.Write(part)
	}
	base := "images-" + hex.EncodeToString(key.Sum(nil))[:16]
	names := []string{base + ".tar"}
	if split {
		names = []string{base + "-busybox.tar", base + "-pause.tar"}
	}

	dir := filepath.Join(cacheDir(), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		dir = workDir // no cache, still works
	}
	var paths []string
	cached := true
	for _, name := range names {
		paths = append(paths, filepath.Join(dir, name))
		if _, err := os.Stat(paths[len(paths)-1]); err != nil {
			cached = false
		}
	}
	if cached {
		return paths, nil
	}

	pause, err := buildPause(ctx, workDir)
	if err != nil {
		return nil, err
	}
	sets := [][]imageSpec{{busybox.image(), pauseImage(pause)}}
	if split {
		sets = [][]imageSpec{{busybox.image()}, {pauseImage(pause)}}
	}
	for i, set := range sets {
		archive, err := ociArchive(set)
		if err != nil {
			return nil, err
		}
		if err := writeFileAtomic(dir, names[i], archive); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// writeFileAtomic writes dir/name through a temporary file and a rename, so a concurrent test
// process never imports a half-written file.
func writeFileAtomic(dir, name string, data []byte) error {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, name+".*")
	if err != nil {
		return fmt.Errorf("create image archive in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp.Name(), path, err)
	}
	return nil
}

// importImages imports the archive into the k8s.io namespace (the one CRI uses) and unpacks
// it for the default snapshotter, so the first container does not pay for it.
func importImages(ctx context.Context, binDir, socket, archive string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, ctrBin), "-a", socket, "-n", "k8s.io", "images", "import", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ctr images import %s: %w\n%s", archive, err, out)
	}
	return nil
}
