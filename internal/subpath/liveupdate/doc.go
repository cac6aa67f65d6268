// Package liveupdate makes live copies of subPaths follow their volumes (kubernetes #50345):
// the Follower.
//
// A live copy follows its volume: when kubelet's atomic writer renames ..data over to new
// content, the Follower makes a new versioned copy of what the subPath names now, with the
// same safe resolution and budget as the first copy, and puts it as a read-only mount layer on
// the copy's path, which propagates into the container (layers.go). One inotify instance watches
// every volume directory with live copies; a kicked volume is queued, and one of at most
// updateWorkers goroutines (started on demand, ended when the queue is empty) applies its
// updates, one pass at a time per volume and coalesced: a volume kicked several times while
// its pass runs gets one more pass, with the newest ..data. All live copies of one volume
// (every container, every subPath) are switched in one pass, one after the other: each path
// switches atomically, the set does not.
//
// Every live copy of a container goes with it (Stop, Remove): its watch when it was the
// volume's last. An old version is detached at once; it stays, charged to the pod's budget
// and shown as retired, until a scan of /proc finds nobody holding it, and is removed then
// (retired.go).
//
// An update is copied by package copies (Copies.CopyTo), charged to the pod's budget like the
// first copy, and released (Copies.Release) once its version is gone; the live copies are
// recorded in a state file (followstate.go) so that an agent started again follows them on
// (Resume: Load reads the file while the runtime waits at Synchronize, ResumeLoaded looks at
// the mounts after; what was loaded and not followed yet stays in the file meanwhile). Its mount side effects sit behind layerOps (layers.go), whose real implementation
// is systemLayers.
package liveupdate
