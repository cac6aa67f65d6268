package runtimeconfig

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// Paths of mountkeeper's own files on the node.
const (
	// DefaultInstallDir holds mountkeeper-runtime and the class links (a host path the
	// DaemonSet's init container mounts).
	DefaultInstallDir = "/opt/mountkeeper/bin"
	// WrapperName is the runtime wrapper's binary (cmd/mountkeeper-runtime).
	WrapperName = "mountkeeper-runtime"
	// classDir, below the install dir, holds a link to the wrapper and an entry per class.
	classDir = "class"
)

// Options say which runtime to configure and where its files and mountkeeper's are.
type Options struct {
	Runtime string // "containerd" or "crio"
	// ConfigFile is the runtime's main config: ContainerdConfigPath or CRIOConfigPath.
	ConfigFile string
	// ConfigDir is CRI-O's drop-in directory (CRIOConfigDir); containerd has none.
	ConfigDir string
	// DropIn is mountkeeper's drop-in: ContainerdDropInPath, or CRIODropInName in ConfigDir.
	DropIn string
	// InstallDir holds the wrapper and the class links (DefaultInstallDir).
	InstallDir string
	// Wrapper is the mountkeeper-runtime binary configure installs (read, not run).
	Wrapper string
	// StateDir is mountkeeper's state dir (the guard key), from its config.
	StateDir string
	// Effective reads the runtime's effective config; nil: its files are read alone.
	Effective EffectiveConfig
	// Templated: ConfigFile is rendered from a template at each start (Distribution).
	Templated bool
	// UnitName is the systemd unit that restarts the runtime ("": the runtime's name).
	UnitName string
}

// WithDefaults fills in the runtime's usual paths.
func (o Options) WithDefaults() (Options, error) {
	switch o.Runtime {
	case "containerd":
		if o.ConfigFile == "" {
			o.ConfigFile = ContainerdConfigPath
		}
		if o.DropIn == "" {
			o.DropIn = ContainerdDropInPath
		}
	case "crio":
		if o.ConfigFile == "" {
			o.ConfigFile = CRIOConfigPath
		}
		if o.ConfigDir == "" {
			o.ConfigDir = CRIOConfigDir
		}
		if o.DropIn == "" {
			o.DropIn = filepath.Join(o.ConfigDir, CRIODropInName)
		}
		if filepath.Dir(o.DropIn) != filepath.Clean(o.ConfigDir) {
			return o, fmt.Errorf("the CRI-O drop-in %s must be in the config directory %s: CRI-O reads no other", o.DropIn, o.ConfigDir)
		}
	default:
		return o, fmt.Errorf("runtime %q: containerd or crio", o.Runtime)
	}
	if o.InstallDir == "" {
		o.InstallDir = DefaultInstallDir
	}
	for _, p := range []string{o.ConfigFile, o.DropIn, o.InstallDir} {
		if !filepath.IsAbs(p) {
			return o, fmt.Errorf("%s: give an absolute path", p)
		}
	}
	return o, nil
}

// Unit is the runtime's systemd unit.
func (o Options) Unit() string {
	if o.UnitName != "" {
		return o.UnitName
	}
	return o.Runtime
}

// importEntry is how containerd's main file names the drop-in: relative to the main file's
// directory when the drop-in lies below it (containerd resolves it so), so that the entry
// holds wherever that directory is mounted (a DaemonSet's init container sees the node's
// /etc/containerd at a path of its own); absolute otherwise.
func (o Options) importEntry() string {
	if rel, err := filepath.Rel(filepath.Dir(o.ConfigFile), o.DropIn); err == nil && filepath.IsLocal(rel) {
		return rel
	}
	return o.DropIn
}

// dropInTempDir is the drop-in's Change.TempDir: the parent of its directory.
func (o Options) dropInTempDir() string { return filepath.Dir(filepath.Dir(o.DropIn)) }

// wrapperPath is where the wrapper binary is installed.
func (o Options) wrapperPath() string { return filepath.Join(o.InstallDir, WrapperName) }

// classLink is the class's link to the wrapper: the handler's OCI runtime binary.
func (o Options) classLink(class string) string { return filepath.Join(o.InstallDir, classDir, class) }

// Change is one file a plan creates, replaces or removes.
type Change struct {
	Path string
	// Old and New are the contents before and after; nil Old: the file is created, nil New
	// (and no Link): it is removed.
	Old, New []byte
	// Link: the file is a symbolic link to Link (OldLink before).
	Link, OldLink string
	// Binary: the contents are not shown in a diff.
	Binary bool
	// Mode is a created file's mode; a replaced file keeps its mode and owner.
	Mode fs.FileMode
	// Config: the runtime reads the file at start only, so changing it needs a restart.
	Config bool
	// TempDir is where the new contents are written before the rename onto Path: "" for
	// Path's own directory. The drop-in's is outside the directory the runtime reads every file
	// of (CRI-O's crio.conf.d, a containerd glob import), so that a run killed before the
	// rename leaves nothing there for the runtime to load.
	TempDir string
}

func (c Change) removes() bool { return c.New == nil && c.Link == "" }

// Plan is what configure or unconfigure does to the node.
type Plan struct {
	Options Options
	Changes []Change
	// Dirs are directories to create (configure) or to remove if empty (unconfigure), in
	// that order.
	Dirs  []string
	Notes []string
	// Undo: the plan is unconfigure's.
	Undo bool
}

// RestartNeeded says whether the runtime must restart to apply the plan.
func (p Plan) RestartNeeded() bool {
	for _, c := range p.Changes {
		if c.Config {
			return true
		}
	}
	return false
}

// Diff shows the plan: a unified diff per text file, one line per binary or link.
func (p Plan) Diff() string {
	var b strings.Builder
	for _, c := range p.Changes {
		switch {
		case c.Link != "" || c.OldLink != "":
			if c.removes() {
				fmt.Fprintf(&b, "remove link %s -> %s\n", c.Path, c.OldLink)
			} else {
				fmt.Fprintf(&b, "link %s -> %s\n", c.Path, c.Link)
			}
		case c.Binary && c.removes():
			fmt.Fprintf(&b, "remove %s\n", c.Path)
		case c.Binary:
			fmt.Fprintf(&b, "install %s (%d bytes)\n", c.Path, len(c.New))
		default:
			oldName, newName := c.Path, c.Path
			if c.Old == nil {
				oldName = "/dev/null"
			}
			if c.removes() {
				newName = "/dev/null"
			}
			b.WriteString(UnifiedDiff(oldName, newName, c.Old, c.New))
		}
	}
	return b.String()
}

// Summary says in a line what the change did.
func (c Change) Summary() string {
	switch {
	case c.Link != "":
		return "linked " + c.Path + " -> " + c.Link
	case c.removes():
		return "removed " + c.Path
	case c.Old == nil:
		return "created " + c.Path
	default:
		return "changed " + c.Path
	}
}
