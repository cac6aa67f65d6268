package guard

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// KeyFile is the key's file below the state dir; KeyFile+".lock" serialises its writers.
const KeyFile = "guard.key"

const keySize = 32

// CorruptKeyError is a key file that holds no usable key: cut short or left unwritten by a
// crash of the node while it was being written (before it was written durably).
type CorruptKeyError struct {
	Path string
	Size int
}

func (e *CorruptKeyError) Error() string {
	return fmt.Sprintf("%s %s: the mountkeeper agent replaces it when it starts; if it does not, restart it", e.Path, e.Problem())
}

// Problem says what is wrong with the file's content.
func (e *CorruptKeyError) Problem() string {
	if e.Size == keySize {
		return "holds only zero bytes, not a key (left by a crash while it was written?)"
	}
	return fmt.Sprintf("holds %d bytes, not a %d-byte key (left by a crash while it was written?)", e.Size, keySize)
}

// Key is what EnsureKey found in the state dir.
type Key struct {
	Bytes []byte
	// Replaced is the key file that was found empty or torn and replaced by a new key; nil when
	// the key was there or made the first time. Tokens made with the old key no longer pass
	// (no one can check them anyway: the old key is lost); a container they mark that the
	// runtime has not created yet is refused once and kubelet's retry is marked anew.
	Replaced *CorruptKeyError
}

// LoadOrCreateKey returns the node's key from stateDir, creating it (root-only) the first time:
// EnsureKey's key.
func LoadOrCreateKey(stateDir string) ([]byte, error) {
	k, err := EnsureKey(stateDir)
	return k.Bytes, err
}

// EnsureKey returns the node's key from stateDir. It creates the key the first time, and
// replaces one that is empty or torn (Key.Replaced, for the caller to log) rather than leave
// every class container refused until someone removes the file. The key outlives the plugin: a
// restarted plugin marks containers the same way.
//
// A new key is written durably before it is put in place (fsync of the file, rename, fsync of
// the directory: writeDurable), so a crash leaves either no key or the whole key. Writers hold
// the key's lock, so that two plugins racing each other keep the same key.
func EnsureKey(stateDir string) (Key, error) {
	key, err := LoadKey(stateDir)
	var corrupt *CorruptKeyError
	if err == nil || !errors.Is(err, fs.ErrNotExist) && !errors.As(err, &corrupt) {
		return Key{Bytes: key}, err
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return Key{}, err
	}
	unlock, err := lockFile(filepath.Join(stateDir, KeyFile+".lock"))
	if err != nil {
		return Key{}, err
	}
	defer unlock()
	// Again under the lock: another plugin may have written it meanwhile.
	key, err = LoadKey(stateDir)
	corrupt = nil
	if err == nil || !errors.Is(err, fs.ErrNotExist) && !errors.As(err, &corrupt) {
		return Key{Bytes: key}, err
	}
	key = make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return Key{}, err
	}
	if err := writeDurable(osFiles, filepath.Join(stateDir, KeyFile), key); err != nil {
		return Key{}, fmt.Errorf("write the guard key: %w", err)
	}
	return Key{Bytes: key, Replaced: corrupt}, nil
}

// LoadKey reads the node's key from stateDir; a key file without a usable key is a
// *CorruptKeyError.
func LoadKey(stateDir string) ([]byte, error) {
	p := filepath.Join(stateDir, KeyFile)
	key, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if len(key) != keySize || bytes.Equal(key, make([]byte, keySize)) {
		return nil, &CorruptKeyError{Path: p, Size: len(key)}
	}
	return key, nil
}
