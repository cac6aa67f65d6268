// Package netmount mounts network filesystems (NFS, CIFS, GlusterFS, CephFS, FUSE filesystems
// such as sshfs) on the host, once per distinct (type, source, options), and shares each mount
// among the containers that use it.
//
// It is a package of its own because the network-filesystem mounter is shared by the NRI plugin
// (nri/) and the OCI hook mode (hook/), and because it has heavy side effects (it runs mount
// helpers, creates cgroups or systemd scopes, keeps state on disk): it is neither spec editing,
// which specmod keeps pure, nor configuration, which is configs' job.
//
// The pieces, each with its side effects behind a small interface so the rules are testable:
//
//   - netspec.Spec (package netspec) names one mount: its shape, key and redaction.
//   - Preflight checks, through Env, that the node has the mount helper and kernel support,
//     and names the package that provides a missing piece.
//   - Scoper runs the mount helper in a scope of its own (a transient systemd scope, or a cgroup
//     and session of its own), so that a FUSE daemon outlives the agent and even a kill of the
//     agent's whole cgroup.
//   - Manager mounts in the background, reference counts users, unmounts after a grace period
//     and adopts every mount a previous agent left (adopt.go: whatever its key, version or
//     spec; released only once no running container uses it), all with bounded time on every
//     call that may touch the network. State files carry their format's version (statefile.go).
//     Its files by concern: config.go (Config, and Reconfigure for a reloaded config),
//     manager.go (the Manager, its entries and phases), adopt.go, mount.go (the mount loop and
//     the one mount attempt every mount makes), retry.go (the one retry loop of mounts and
//     heals), claims.go (Acquire, Hold, Release), grace.go, unmount.go, probe.go (the one
//     probe and the one rule for what its answer means), heal.go (the prober and the
//     replacement of dead mounts under running containers), status.go.
//   - EnsureMounted is the hooks' one-shot path: it finds a live mount or mounts one, under a
//     lock of that mount's key only (the Manager takes it too).
//   - No secret reaches a command line: CIFS and Ceph secrets go through a root-only file
//     (netspec.Spec.WithSecretFile), other inline secrets are refused; state files hold the
//     redacted spec.
package netmount
