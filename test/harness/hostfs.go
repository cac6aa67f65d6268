package harness

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

var propagationFlags = map[string]uintptr{
	"shared":  unix.MS_SHARED,
	"slave":   unix.MS_SLAVE,
	"private": unix.MS_PRIVATE,
}

// MountTmpfs mounts a small tmpfs at dir (created if missing) with the given propagation
// ("shared", "slave" or "private"), as a host volume source for a test. Undo it with
// UnmountAll.
func MountTmpfs(dir, propagation string) error {
	flag, ok := propagationFlags[propagation]
	if !ok {
		return fmt.Errorf("mount tmpfs on %s: unknown propagation %q", dir, propagation)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=16m"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", dir, err)
	}
	if propagation == "slave" {
		// Only a mount that receives from a master can be a slave: make it shared first.
		if err := unix.Mount("", dir, "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("make %s shared: %w", dir, err)
		}
	}
	if err := unix.Mount("", dir, "", flag, ""); err != nil {
		return fmt.Errorf("make %s %s: %w", dir, propagation, err)
	}
	return nil
}

// UnmountAll unmounts everything at or below dir, deepest first (lazily where busy).
func UnmountAll(dir string) error { return unmountAll(dir) }
