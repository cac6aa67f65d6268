// Package engine is mountkeeper's one decision engine. Given the config, a container's
// runtime handler, its identity and the mounts the runtime gives it, Engine.Decide returns what
// mountkeeper does to that container (its runtime class, the class mounts checked against the
// container and the host, the subPath repairs made, the network mounts claimed) or one error.
//
// The front ends translate: the NRI plugin (package nri) from CreateContainer to a Request and
// the Decision to a container adjustment; the precreate hook and `mountkeeper render` from a
// config.json (Engine.Render); the prestart/createRuntime hook (package hook) from the OCI
// state to the mounts it makes inside the container. The engine also says whether a decision
// may wait on the host (Engine.MayBlock) and which options the mount of a private subPath copy
// gets (CopyMountOptions), so that no front end works them out again. No front end imports
// another, and no front end formats a user-facing error: every refusal is an *Error, whose
// message is
//
//	mountkeeper: runtime class "<class>", container <ns>/<pod>/<ctr>: <what>: <fix>
//
// on one line, because runtimes show it in a pod event.
//
// The engine is pure glue over packages that each own one concern: configs (what the operator
// asked for), specmod (the edits and their rules), hostmount (the host side), subpath (stale
// kubelet subPath binds), netspec (network filesystem specs). Side effects reach it only
// through its fields (Host, Network, SubPaths), so front ends and tests choose them.
package engine
