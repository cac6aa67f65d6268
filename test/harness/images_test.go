package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// TestOCIArchive checks the layout ctr import relies on: index.json names each image with
// the containerd annotation, and every blob is stored under its own digest.
func TestOCIArchive(t *testing.T) {
	img := imageSpec{
		name:  "example.com/test:1",
		files: []fileEntry{dirEntry("bin", 0o755), fileEntryOf("bin/x", 0o755, []byte("x")), symlinkEntry("bin/y", "/bin/x")},
		cmd:   []string{"/bin/x"},
	}
	archive, err := ociArchive([]imageSpec{img})
	if err != nil {
		t.Fatal(err)
	}
	again, err := ociArchive([]imageSpec{img})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(archive, again) {
		t.Error("archive is not reproducible")
	}

	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		files[h.Name] = data
	}
	for name, data := range files {
		if hexDigest, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexDigest != "" {
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != hexDigest {
				t.Errorf("blob %s has digest %x", name, sum)
			}
		}
	}
	var idx index
	if err := json.Unmarshal(files["index.json"], &idx); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[imageNameAnnotation] != img.name {
		t.Fatalf("index.json manifests = %+v", idx.Manifests)
	}
	var m manifest
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(idx.Manifests[0].Digest, "sha256:")], &m); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != mediaTypeLayer {
		t.Fatalf("manifest layers = %+v", m.Layers)
	}
}
