package guard

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the key's file below the state dir.
const KeyFile = "guard.key"

const keySize = 32

// LoadOrCreateKey returns the node's key from stateDir, creating it (root-only) the first time.
// The key outlives the plugin: a restarted plugin marks containers the same way.
func LoadOrCreateKey(stateDir string) ([]byte, error) {
	key, err := LoadKey(stateDir)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, err
	}
	key = make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(stateDir, KeyFile+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(key); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := tmp.Close(); err != nil {
		return nil, err
	}
	// Link, not rename: a second plugin racing this one keeps the key that won.
	if err := os.Link(tmp.Name(), filepath.Join(stateDir, KeyFile)); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	return LoadKey(stateDir)
}

// LoadKey reads the node's key from stateDir.
func LoadKey(stateDir string) ([]byte, error) {
	p := filepath.Join(stateDir, KeyFile)
	key, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("%s holds %d bytes, not a %d-byte key: remove it and restart mountkeeper", p, len(key), keySize)
	}
	return key, nil
}
