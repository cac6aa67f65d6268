// Package hostmount checks the host side of class bind mounts: does the source exist, and does
// the mount holding it propagate (shared, slave) as an rslave or rshared container mount needs.
// Reading the mount table is package mounttable's job; bounding calls that may hang is package
// bounded's.
//
// It is a package of its own because the NRI plugin (nri/) and the OCI hook (hook/) both need it,
// and it has side effects: it belongs neither in specmod, which is pure, nor in configs.
// The side effects sit behind Inspector so that Checker's rules are table-testable; System is the
// real implementation.
package hostmount
