// Package specmod describes the edits mountkeeper makes to a container's OCI spec and applies
// them. It is pure: functions take values and return values; whatever needs the host (does a
// source exist, is its mount shared) is asked through the Host interface, so the same edits are
// made and checked the same way by the NRI plugin, the OCI hook and `mountkeeper render`.
//
// The shape follows CDI's container edits: one Edits value that says what to change, one Apply
// that changes an *oci.Spec, and Verify that refuses edits which cannot be made as asked.
package specmod
