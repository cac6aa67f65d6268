package testsupport

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// nfsClientFiles are what installing nfs-common puts where mount(8) and mount.nfs look.
var nfsClientFiles = []string{"mount.nfs", "mount.nfs4", "umount.nfs", "umount.nfs4", "start-statd", "rpc.statd", "sm-notify"}

// NFSClientInstalled says whether mount.nfs is where mount(8) looks for it.
func NFSClientInstalled() bool {
	_, err := os.Stat("/usr/sbin/mount.nfs")
	return err == nil
}

// InstallNFSClient copies the NFS client unpacked below root (test/vm's NFS guest names it in
// MOUNTKEEPER_GUEST_NFS_ROOT) into /usr/sbin, as installing nfs-common would, unless it is
// installed already; the guest's root is a throwaway overlay.
func InstallNFSClient(tb testing.TB, root string) {
	tb.Helper()
	if NFSClientInstalled() {
		return
	}
	for _, f := range nfsClientFiles {
		src, dst := filepath.Join(root, "usr", "sbin", f), filepath.Join("/usr/sbin", f)
		if target, err := os.Readlink(src); err == nil {
			os.Remove(dst)
			if err := os.Symlink(target, dst); err != nil {
				tb.Fatal(err)
			}
			continue
		}
		if err := copyFile(src, dst, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
}

// copyFile copies src to dst (made with perm, or truncated).
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
