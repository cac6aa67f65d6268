// Package hostmount answers questions about the host side of a mount: does the source exist,
// which mount point holds it, and does that mount propagate (shared, slave) so that a container
// mount can be rslave or rshared.
//
// It is a top-level package because the NRI plugin (nri/) and the OCI hook (hook/) both need it,
// and it has side effects: it belongs neither in specmod, which is pure, nor in configs.
// The side effects sit behind Inspector so that Checker's rules are table-testable; Live is the
// real implementation.
package hostmount
