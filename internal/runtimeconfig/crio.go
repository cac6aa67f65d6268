package runtimeconfig

import (
	"github.com/pelletier/go-toml/v2"

	"github.com/mountkeeper/mountkeeper/configs"
)

// CRIODropInPath is the drop-in that CRIO writes: CRI-O reads every file of crio.conf.d in
// order, so mountkeeper owns a file of its own and never edits the operator's.
const CRIODropInPath = "/etc/crio/crio.conf.d/99-mountkeeper.conf"

// CRIO returns a CRI-O drop-in with NRI enabled and a runtime handler per runtime class,
// running runtimePath (runc). CRI-O gets no guard: it runs hooks.d hooks by annotation and does
// not put the runtime handler into an application container's annotations, so no hook can be
// limited to one class's containers (a Note says so).
func CRIO(cfg *configs.Config, runtimePath string) (Result, error) {
	runtimes := map[string]any{}
	for _, class := range cfg.ClassNames() {
		if class == configs.DefaultClass {
			continue // the default handler exists already
		}
		runtimes[class] = map[string]any{"runtime_path": runtimePath, "runtime_type": "oci"}
	}
	doc := map[string]any{"crio": map[string]any{
		"nri":     map[string]any{"enable_nri": true},
		"runtime": map[string]any{"runtimes": runtimes},
	}}
	out, err := toml.Marshal(doc)
	if err != nil {
		return Result{}, err
	}
	header := "# Written by `mountkeeper runtime configure --runtime crio`: NRI and one runtime handler per class.\n"
	return Result{
		Config: append([]byte(header), out...),
		Notes: []string{"CRI-O: no guard. While mountkeeper is away, CRI-O creates a class's containers without their class mounts; " +
			"CRI-O 1.34's NRI has no required-plugins check either: run a class whose mounts must never be missing on containerd"},
	}, nil
}
