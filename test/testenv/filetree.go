package testenv

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// FileTree describes every file and directory below roots (a root may be a file; a missing
// one adds nothing): path -> mode, owner, and contents or link target. Two equal FileTrees
// are the same files byte for byte; tests of install and uninstall compare them.
func FileTree(roots ...string) map[string]string {
	out := map[string]string{}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return nil
			}
			desc := fi.Mode().String()
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				desc += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, _ := os.Readlink(p)
				desc += " -> " + target
			case fi.Mode().IsRegular():
				data, _ := os.ReadFile(p)
				desc += " " + string(data)
			}
			out[p] = desc
			return nil
		})
	}
	return out
}
