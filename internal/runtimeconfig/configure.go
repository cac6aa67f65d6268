package runtimeconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mountkeeper/mountkeeper/internal/runtimewrap"
)

// createdMain heads a containerd main config that an earlier configure created (there was
// none; configure now refuses instead, since the containerd of k3s, RKE2 or microk8s never
// reads that path): unconfigure removes such a file again.
const createdMain = "# Created by `mountkeeper runtime configure` (there was no config); `mountkeeper runtime unconfigure` removes it.\nversion = 3\n"

// createdDirsLine, in the drop-in, lists the directories configure created, which unconfigure
// removes again when they are empty: the drop-in is the record of what configure did.
const createdDirsLine = "# directories mountkeeper created, removed by unconfigure when empty: "

// Configure plans what the runtime needs for classes (HandlerClasses): mountkeeper's drop-in,
// the main file's imports entry (containerd, where its imports do not cover the drop-in), the
// wrapper binary and each class's link and entry. Nothing is written: Apply does that.
//
// A class configured before and no longer in classes loses its link, entry and handler, unless
// the runtime still runs containers of it (InUse, processes under procRoot): it could not stop
// them without the link (its shims and conmons run it for kill and delete). Such a class keeps
// all three, with a note naming the processes, until a later configure or unconfigure finds it
// unused.
func Configure(o Options, classes []string, procRoot string) (Plan, error) {
	p := Plan{Options: o}
	stale, err := ownClassFiles(o, classes)
	if err != nil {
		return p, err
	}
	kept, err := classUses(procRoot, stale)
	if err != nil {
		return p, err
	}
	stale = slices.DeleteFunc(stale, func(c Change) bool { return kept[classOf(c.Path)] != nil })
	handlerClasses := slices.Concat(classes, slices.Sorted(maps.Keys(kept)))
	for _, class := range slices.Sorted(maps.Keys(kept)) {
		p.Notes = append(p.Notes, fmt.Sprintf("runtime class %q is no longer in the config, but %s still runs its containers (%s): its handler and wrapper link stay, so that they can be stopped, and a later `mountkeeper runtime configure` or `unconfigure` removes them once those are gone (a new pod of the class is refused)", class, o.Runtime, joinUses(map[string][]Use{class: kept[class]})))
	}
	oldDropIn, dropInExists, err := readFile(o.DropIn)
	if err != nil {
		return p, err
	}
	dropIn, realRuntime, notes, main, err := o.buildDropIn(handlerClasses, oldDropIn, true)
	if err != nil {
		return p, err
	}
	if o.Runtime == "containerd" {
		switch {
		case Covers(o.ConfigFile, main.imports, o.DropIn):
		case o.Templated:
			c, err := templateChange(o, main.version)
			if err != nil {
				return p, err
			}
			p.change(c)
		default:
			newMain, err := AddImport(main.text, o.importEntry())
			if err != nil {
				return p, fmt.Errorf("%s: %w", o.ConfigFile, err)
			}
			p.change(Change{Path: o.ConfigFile, Old: orNil(main.text, true), New: newMain, Mode: 0o644, Config: true})
		}
	}
	p.Notes = append(p.Notes, notes...)

	// Directories: those missing now, and those an earlier run created (its drop-in says).
	created := createdDirs(oldDropIn)
	missing, err := missingDirs(filepath.Dir(o.ConfigFile), filepath.Dir(o.DropIn), filepath.Join(o.InstallDir, classDir))
	if err != nil {
		return p, err
	}
	p.Dirs = missing
	for _, d := range missing {
		if !slices.Contains(created, d) {
			created = append(created, d)
		}
	}
	if len(created) > 0 {
		dropIn = append(dropIn, []byte(createdDirsLine+strings.Join(created, " ")+"\n")...)
	}

	// The wrapper first, the drop-in after: a runtime restarted between the two never finds
	// a handler whose binary is missing.
	bin, err := readRequired(o.Wrapper, "the runtime wrapper (mountkeeper-runtime, built beside mountkeeper by `make build`)")
	if err != nil {
		return p, err
	}
	oldBin, binExists, err := readFile(o.wrapperPath())
	if err != nil {
		return p, err
	}
	changes := []Change{{Path: o.wrapperPath(), Old: orNil(oldBin, binExists), New: bin, Binary: true, Mode: 0o755}}
	for _, class := range classes {
		entry, err := json.MarshalIndent(runtimewrap.Entry{Class: class, Runtime: realRuntime, StateDir: o.StateDir}, "", "  ")
		if err != nil {
			return p, err
		}
		entryPath := o.classLink(class) + runtimewrap.EntrySuffix
		old, ok, err := readFile(entryPath)
		if err != nil {
			return p, err
		}
		oldLink, err := readLink(o.classLink(class))
		if err != nil {
			return p, err
		}
		changes = append(changes,
			Change{Path: entryPath, Old: orNil(old, ok), New: append(entry, '\n'), Mode: 0o644},
			Change{Path: o.classLink(class), Link: o.wrapperPath(), OldLink: oldLink})
	}
	changes = append(changes, stale...)
	temps, err := staleTemps(o)
	if err != nil {
		return p, err
	}
	changes = append(changes, temps...)
	changes = append(changes, Change{Path: o.DropIn, Old: orNil(oldDropIn, dropInExists), New: dropIn, Mode: 0o644, Config: true, TempDir: o.dropInTempDir()})
	// The main file's imports entry last: it names the drop-in, which must exist by then.
	p.Changes = append(changes, p.Changes...)
	p.Changes = slices.DeleteFunc(p.Changes, unchanged)
	return p, nil
}

// mainFile is containerd's main file as configure read it.
type mainFile struct {
	text    []byte
	version int64
	imports []string
}

// buildDropIn reads the runtime's config as it runs (runtimeView: the effective config
// without oldDropIn's part, or the files) and returns mountkeeper's drop-in for classes, the
// real runtime, notes, and containerd's main file. Without mainRequired (a fragment for a
// config the OS owns) a missing containerd main file is an empty one of version 3.
func (o Options) buildDropIn(classes []string, oldDropIn []byte, mainRequired bool) (dropIn []byte, realRuntime string, notes []string, main mainFile, err error) {
	var files map[string]any
	switch o.Runtime {
	case "containerd":
		text, exists, err := readFile(o.ConfigFile)
		switch {
		case err != nil:
			return nil, "", nil, main, err
		case exists:
			main.text = text
			if files, main.version, main.imports, err = loadContainerd(o.ConfigFile, text, o.DropIn); err != nil {
				return nil, "", nil, main, err
			}
		case mainRequired:
			return nil, "", nil, main, missingMain(o)
		default:
			files, main.version = map[string]any{}, 3
		}
	case "crio":
		if files, err = loadCRIO(o.ConfigFile, o.ConfigDir, o.DropIn); err != nil {
			return nil, "", nil, main, err
		}
	default:
		return nil, "", nil, main, fmt.Errorf("runtime %q: containerd or crio", o.Runtime)
	}
	effective, notes, err := o.runtimeView(files, oldDropIn)
	if err != nil {
		return nil, "", nil, main, err
	}
	var more []string
	if o.Runtime == "containerd" {
		dropIn, realRuntime, more, err = containerdDropIn(effective, main.version, classes, o.classLink)
	} else {
		dropIn, realRuntime, more, err = crioDropIn(effective, classes, o.classLink)
	}
	if err != nil {
		return nil, "", nil, main, fmt.Errorf("%s: %w", o.ConfigFile, err)
	}
	return dropIn, realRuntime, append(notes, more...), main, nil
}

// Fragment is what the runtime's config needs for classes where the OS owns that config
// (Talos' machine config, Bottlerocket's settings, EKS nodeadm, an OpenShift MachineConfig):
// mountkeeper's drop-in as configure would write it on a node with none yet, for the operator
// to put into the OS's config. It writes nothing; the runtime's config is read as configure
// reads it, and may be missing.
func Fragment(o Options, classes []string) ([]byte, []string, error) {
	dropIn, _, notes, _, err := o.buildDropIn(classes, nil, false)
	return dropIn, notes, err
}

// Unconfigure plans taking back what Configure did: the imports entry (the main file as it
// was, or removed if configure created it), the drop-in, the class links and entries, the
// wrapper, and the directories configure created, where empty. hookFiles are files an older
// mountkeeper installed (the guard hook binary, base specs), removed too.
//
// It refuses while the runtime still runs a class's containers (InUse, processes under
// procRoot), unless force.
func Unconfigure(o Options, hookFiles []string, procRoot string, force bool) (Plan, error) {
	p := Plan{Options: o, Undo: true}
	if o.Runtime == "containerd" && o.Templated {
		// The rendered file is the distribution's: the template's entry is what goes.
		changes, err := untemplateChanges(o)
		if err != nil {
			return p, err
		}
		p.Changes = append(p.Changes, changes...)
	} else if o.Runtime == "containerd" {
		main, ok, err := readFile(o.ConfigFile)
		if err != nil {
			return p, err
		}
		if ok {
			out, removed, err := RemoveImport(main, o.importEntry())
			if err != nil {
				return p, fmt.Errorf("%s: %w", o.ConfigFile, err)
			}
			if removed && string(out) == createdMain {
				out = nil
			}
			p.Changes = append(p.Changes, Change{Path: o.ConfigFile, Old: main, New: out, Config: true})
		}
	}
	dropIn, ok, err := readFile(o.DropIn)
	if err != nil {
		return p, err
	}
	if ok {
		p.Changes = append(p.Changes, Change{Path: o.DropIn, Old: dropIn, Config: true})
	}
	own, err := ownClassFiles(o, nil)
	if err != nil {
		return p, err
	}
	if users, err := classUses(procRoot, own); err != nil {
		return p, err
	} else if len(users) > 0 && !force {
		return p, fmt.Errorf("the runtime still runs containers of the classes (%s): remove the class pods first (the runtime could not stop them without the wrapper), or run again with --force", joinUses(users))
	}
	p.Changes = append(p.Changes, own...)
	temps, err := staleTemps(o)
	if err != nil {
		return p, err
	}
	p.Changes = append(p.Changes, temps...)
	for _, f := range append([]string{o.wrapperPath()}, hookFiles...) {
		old, ok, err := readFile(f)
		if err != nil {
			return p, err
		}
		if ok {
			p.Changes = append(p.Changes, Change{Path: f, Old: old, Binary: f == o.wrapperPath() || !strings.HasSuffix(f, ".json")})
		}
	}
	p.Dirs = append([]string{filepath.Join(o.InstallDir, classDir)}, createdDirs(dropIn)...)
	slices.Reverse(p.Dirs[1:])
	for _, f := range hookFiles {
		if strings.HasSuffix(f, ".json") && !slices.Contains(p.Dirs, filepath.Dir(f)) {
			p.Dirs = append(p.Dirs, filepath.Dir(f))
		}
	}
	p.Changes = slices.DeleteFunc(p.Changes, unchanged)
	if p.RestartNeeded() {
		p.Notes = append(p.Notes, fmt.Sprintf("%s still has the class handlers until it restarts: a class pod created meanwhile fails (no runtime wrapper)", o.Runtime))
	}
	return p, nil
}

// missingDirs lists the directories that must be created for dirs to exist, parents first.
func missingDirs(dirs ...string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		var chain []string
		for p := filepath.Clean(d); p != "/" && p != "."; p = filepath.Dir(p) {
			missing, err := notExists(p)
			if err != nil {
				return nil, err
			}
			if !missing {
				break
			}
			chain = append(chain, p)
		}
		slices.Reverse(chain)
		for _, p := range chain {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// createdDirs reads the directories a drop-in says configure created.
func createdDirs(dropIn []byte) []string {
	for _, line := range strings.Split(string(dropIn), "\n") {
		if rest, ok := strings.CutPrefix(line, createdDirsLine); ok {
			return strings.Fields(rest)
		}
	}
	return nil
}

// ownClassFiles plans removing the links and entries of the class dir that are mountkeeper's
// (a link to the wrapper, or the entry of one) and whose class is not in keep.
func ownClassFiles(o Options, keep []string) ([]Change, error) {
	dir := filepath.Join(o.InstallDir, classDir)
	names, err := listDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Change
	for _, name := range names {
		class := classOf(name)
		if slices.Contains(keep, class) || isTempName(name) { // staleTemps removes those
			continue
		}
		path := filepath.Join(dir, name)
		if class == name {
			if target, err := readLink(path); err == nil && target == o.wrapperPath() {
				out = append(out, Change{Path: path, OldLink: target})
			}
			continue
		}
		data, _, err := readFile(path)
		if err != nil {
			return nil, err
		}
		if _, err := runtimewrap.ParseEntry(path, data); err == nil {
			out = append(out, Change{Path: path, Old: data})
		}
	}
	return out, nil
}

// loadContainerd merges the main file and its imports (recursively, without the drop-in) as
// containerd does, each file in the version-3 form (normalizeContainerd). It returns the effective config, the main file's version and its imports.
func loadContainerd(mainPath string, main []byte, dropIn string) (map[string]any, int64, []string, error) {
	effective := map[string]any{}
	doc, err := parseDoc(main)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s: %w", mainPath, err)
	}
	version, err := containerdVersion(containerdFile{mainPath, doc})
	if err != nil {
		return nil, 0, nil, err
	}
	var imports []string
	for _, v := range anySlice(doc["imports"]) {
		if s, ok := v.(string); ok {
			imports = append(imports, s)
		}
	}
	loaded := map[string]bool{}
	pending := []containerdFile{{mainPath, doc}}
	for len(pending) > 0 {
		f := pending[0]
		pending = pending[1:]
		if loaded[f.Path] {
			continue
		}
		loaded[f.Path] = true
		v, err := containerdVersion(f)
		if err != nil {
			return nil, 0, nil, err
		}
		merge(effective, normalizeContainerd(cloneDoc(f.Doc), v))
		for _, v := range anySlice(f.Doc["imports"]) {
			s, _ := v.(string)
			paths, err := resolveImport(f.Path, s)
			if err != nil {
				return nil, 0, nil, err
			}
			for _, p := range paths {
				// Mountkeeper's temporary files a glob may match: the plan removes them.
				if p == dropIn || loaded[p] || isTempName(filepath.Base(p)) {
					continue
				}
				data, ok, err := readFile(p)
				if err != nil || !ok {
					return nil, 0, nil, fmt.Errorf("%s imports %s: %v", f.Path, p, err)
				}
				d, err := parseDoc(data)
				if err != nil {
					return nil, 0, nil, fmt.Errorf("%s: %w", p, err)
				}
				pending = append(pending, containerdFile{p, d})
			}
		}
	}
	return effective, version, imports, nil
}

// loadCRIO merges CRI-O's main file and its drop-ins, without mountkeeper's, as CRI-O reads
// them: every file below the directory whatever its name (OpenShift's is 00-default, with no
// suffix), subdirectories included, in the order of a walk (names sorted), which is CRI-O's
// (config.UpdateFromPath walks the directory with filepath.Walk). Mountkeeper's temporary files
// left by a killed run are skipped: the plan removes them.
func loadCRIO(mainPath, dir, dropIn string) (map[string]any, error) {
	effective := map[string]any{}
	paths := []string{mainPath}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist) && p == dir:
			return filepath.SkipDir
		case err != nil:
			return err
		case !d.IsDir() && p != dropIn && !isTempName(d.Name()):
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		data, ok, err := readFile(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		doc, err := parseDoc(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		merge(effective, doc)
	}
	return effective, nil
}

// change adds c to the plan.
func (p *Plan) change(c Change) { p.Changes = append(p.Changes, c) }

// unchanged says a change changes nothing.
func unchanged(c Change) bool {
	if c.Link != "" || c.OldLink != "" {
		return c.Link == c.OldLink
	}
	return c.Old != nil && c.New != nil && bytes.Equal(c.Old, c.New) || c.Old == nil && c.New == nil
}

func orNil(b []byte, exists bool) []byte {
	if !exists {
		return nil
	}
	if b == nil {
		return []byte{}
	}
	return b
}

// EarlierInstall lists what an earlier mountkeeper's configure installed besides the runtime's
// config: the guard hook's base specs in baseSpecDir (a spec whose createRuntime hook is
// `mountkeeper hook guard`) and hookPath, where they exist.
func EarlierInstall(baseSpecDir, hookPath string) ([]string, error) {
	var out []string
	names, err := listDir(baseSpecDir)
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		p := filepath.Join(baseSpecDir, n)
		data, ok, err := readFile(p)
		if err != nil || !ok || !strings.HasSuffix(n, ".json") {
			continue
		}
		var spec struct {
			Hooks struct {
				CreateRuntime []struct{ Args []string } `json:"createRuntime"`
			} `json:"hooks"`
		}
		if json.Unmarshal(data, &spec) != nil || len(spec.Hooks.CreateRuntime) != 1 {
			continue
		}
		if args := spec.Hooks.CreateRuntime[0].Args; len(args) >= 3 && args[1] == "hook" && args[2] == "guard" {
			out = append(out, p)
		}
	}
	if hookPath != "" {
		if _, ok, err := readFile(hookPath); err == nil && ok {
			out = append(out, hookPath)
		}
	}
	return out, nil
}
