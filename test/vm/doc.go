// Package vm runs commands on other Linux kernels: it boots one of Debian's cloud kernels
// (unpacked by test/tools/install.sh into $MOUNTKEEPER_CACHE/kernels/NAME) under QEMU with
// the host's own userland, read-only over virtiofs with a tmpfs overlaid on it, runs one
// command as the guest's init, and brings back its output and exit status. The test binaries
// of this repository thereby run unchanged on 5.10, 6.1 and 6.12 (TestKernels).
//
// The guest's initramfs (busybox, and the modules that mount the host's root) is built for
// each run into the run's temporary directory. QEMU runs without KVM (TCG: KVM guests hang
// on this project's CI machines), so a boot takes about 5 s and system calls are 10-20 times
// slower than on the host. Every run has a deadline: a guest that outlives it is killed, and
// nothing of a run (QEMU, virtiofsd, their sockets, the temporary directory) is left on the
// host whatever happens.
package vm
