package netmount

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/mountkeeper/mountkeeper/internal/netspec"
)

func statePath(dir, key string) string { return filepath.Join(dir, key+".json") }

// writeState replaces the state file of key atomically.
func writeState(dir, key string, st state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+key+".*.tmp") // CreateTemp makes it 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(append(data, '\n'))
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, statePath(dir, key)); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func removeState(dir, key string) error {
	err := os.Remove(statePath(dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// readStates reads every state file in dir, keyed by the key in its name. A file it cannot
// read or parse is reported in errs and skipped.
func readStates(dir string) (states map[string]state, errs []error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{err}
	}
	states = make(map[string]state)
	for _, ent := range ents {
		key, ok := strings.CutSuffix(ent.Name(), ".json")
		if !ok || strings.HasPrefix(ent.Name(), ".") || !ent.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var st state
		if err := json.Unmarshal(data, &st); err != nil {
			errs = append(errs, fmt.Errorf("parse %s: %w", filepath.Join(dir, ent.Name()), err))
			continue
		}
		states[key] = st
	}
	return states, errs
}

// lockStateDir takes an exclusive flock on dir/lock, waiting at most wait for its holder, and
// writes this process's ID into it. The kernel releases the lock when the process dies.
func lockStateDir(dir string, wait time.Duration) (*os.File, error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			holder, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("state directory %s is in use by another mountkeeper (pid %s) after waiting %s: one agent per node",
					dir, strings.TrimSpace(string(holder)), wait)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// mkdirPrivate makes dir (and its parents) and makes dir itself 0700, as it may have been
// made 0755 by an earlier agent.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700)
}

// HostPath is where a Manager with stateDir mounts s on the host.
func HostPath(stateDir string, s netspec.Spec) string {
	return filepath.Join(stateDir, "mounts", s.Key())
}

// secretPath is the file through which the helper of key's mount reads its secrets.
func secretPath(dir, key string) string { return filepath.Join(dir, key) }

// writeSecretFile writes the inline secrets of s, if any, to dir/<key> (0600; dir is 0700) and
// returns the spec to put on the command line, which names that file instead (see
// netspec.Spec.WithSecretFile). The file stays until the mount is unmounted.
func writeSecretFile(dir string, s netspec.Spec) (netspec.Spec, error) {
	path := secretPath(dir, s.Key())
	cmd, content, ok := s.WithSecretFile(path)
	if !ok {
		return s, nil
	}
	if err := mkdirPrivate(dir); err != nil {
		return s, err
	}
	f, err := os.CreateTemp(dir, ".secret.*.tmp") // 0600
	if err != nil {
		return s, err
	}
	tmp := f.Name()
	_, werr := f.Write(content)
	if err := errors.Join(werr, f.Close()); err != nil {
		os.Remove(tmp)
		return s, fmt.Errorf("write the mount's secret file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return s, err
	}
	return cmd, nil
}

func removeSecret(dir, key string) {
	os.Remove(secretPath(dir, key))
}

// removeSecretsExcept removes the secret files of mounts not in keep (and temporary files).
func removeSecretsExcept(dir string, keep map[string]bool, log *logrus.Logger) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, ent := range ents {
		if !keep[ent.Name()] {
			if err := os.Remove(filepath.Join(dir, ent.Name())); err != nil {
				log.WithError(err).Warn("netmount: cannot remove a secret file of a mount no longer in the config")
			}
		}
	}
}

// redactError returns err, or an error of the same text with the secrets of s redacted if the
// text holds any (a helper may echo what it read).
func redactError(s netspec.Spec, err error) error {
	if text := s.Redact(err.Error()); text != err.Error() {
		return errors.New(text)
	}
	return err
}
