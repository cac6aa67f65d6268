package hostmount

import "io/fs"

// MountPoint is the host mount that holds a path.
type MountPoint struct {
	ID int
	// UniqueID is the mount's 64-bit unique ID where the kernel has one (Linux >= 6.8: it
	// never names another mount), for statmount(2); 0 where it does not.
	UniqueID uint64
	Path     string
	Shared   bool // in a peer group: "shared:N" in mountinfo
	Slave    bool // receives from a master: "master:N" in mountinfo
}

// Propagation names the mount point's propagation the way findmnt does.
func (mp MountPoint) Propagation() string {
	switch {
	case mp.Shared && mp.Slave:
		return "shared,slave"
	case mp.Shared:
		return "shared"
	case mp.Slave:
		return "slave"
	}
	return "private"
}

// Inspector reads the host state that Checker's rules depend on.
type Inspector interface {
	Stat(path string) (fs.FileInfo, error)
	// MountPoints returns the mount point holding each path, in order. One call serves all
	// mounts of a container so the mount table is read at most once.
	MountPoints(paths []string) ([]MountPoint, error)
}
