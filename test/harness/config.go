package harness

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"text/template"
)

// handlerName restricts runtime handler names to what is safe as a TOML key and a CRI name.
var handlerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

type runtimeConfig struct {
	Name, BaseSpec string
}

// configData is what configTemplate renders: every path spelled out, so the template has
// no logic beyond loops and optional keys.
type configData struct {
	Root, State, Temp, Opt, ShimSockets, CNI string
	CNIBin, CNIConf                          string
	Socket, NRISocket                        string
	Shim, Runc, RuncRoot                     string
	Runtimes                                 []runtimeConfig
	NRI                                      bool
	NRIPlugins, NRIPluginConf, NRITimeout    string
	Pause                                    string
	SystemdCgroup                            bool
	RegistryConfig                           string
}

// writeConfig renders containerd's config for opts into l.config() and creates the
// directories it names.
func writeConfig(l layout, opts Options) error {
	d := configData{
		Root:           l.path("root"),
		State:          l.path("state"),
		Temp:           l.path("tmp"),
		Opt:            l.path("opt"),
		ShimSockets:    l.path("s"),
		CNI:            l.path("cni"),
		CNIBin:         cmp.Or(opts.CNIBinDir, l.path("cni")),
		CNIConf:        cmp.Or(opts.CNIConfDir, l.path("cni")),
		Socket:         l.socket(),
		NRISocket:      l.nriSocket(),
		Shim:           filepath.Join(opts.BinDir, shimBin),
		Runc:           filepath.Join(opts.BinDir, runcBin),
		RuncRoot:       l.path("runc"),
		NRI:            opts.NRI,
		NRIPlugins:     cmp.Or(opts.NRIPluginPath, l.nriPlugins()),
		NRIPluginConf:  cmp.Or(opts.NRIPluginConfigPath, l.nriPluginConf()),
		Pause:          PauseImage,
		SystemdCgroup:  opts.Systemd != nil,
		RegistryConfig: opts.RegistryConfigDir,
	}
	if opts.NRIRequestTimeout > 0 {
		d.NRITimeout = opts.NRIRequestTimeout.String()
	}
	for _, h := range append([]string{DefaultRuntimeHandler}, opts.Handlers...) {
		if !handlerName.MatchString(h) {
			return fmt.Errorf("runtime handler %q: name must match %s", h, handlerName)
		}
		d.Runtimes = append(d.Runtimes, runtimeConfig{Name: h, BaseSpec: opts.BaseRuntimeSpecs[h]})
	}
	for _, dir := range []string{d.Root, d.State, d.Temp, d.Opt, d.ShimSockets, d.CNI, d.RuncRoot,
		l.podLogs(), d.NRIPlugins, d.NRIPluginConf} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if d.RegistryConfig != "" {
		if err := writeClosedRegistry(d.RegistryConfig); err != nil {
			return err
		}
	}
	var b strings.Builder
	if err := configTemplate.Execute(&b, d); err != nil {
		return fmt.Errorf("render %s: %w", l.config(), err)
	}
	if err := os.WriteFile(l.config(), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", l.config(), err)
	}
	return nil
}

// closedRegistry is a loopback address where nothing listens (port 1, tcpmux, is never
// served here): a pull sent there is refused at once.
const closedRegistry = "http://127.0.0.1:1"

// writeClosedRegistry writes dir/_default/hosts.toml, which containerd applies to every
// registry without a directory of its own: each pull and resolve goes to closedRegistry.
func writeClosedRegistry(dir string) error {
	def := filepath.Join(dir, "_default")
	if err := os.MkdirAll(def, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", closedRegistry, closedRegistry)
	return os.WriteFile(filepath.Join(def, "hosts.toml"), []byte(hosts), 0o644)
}

// tomlString renders s as a TOML literal string. Paths come from the harness and its caller,
// so a quote or newline in one is a bug worth a loud failure rather than a broken config.
func tomlString(s string) (string, error) {
	if strings.ContainsAny(s, "'\n\r") {
		return "", fmt.Errorf("cannot put %q into a TOML literal string", s)
	}
	return "'" + s + "'", nil
}

// configTemplate is a version 4 containerd config. Notes on the less obvious settings:
//   - no imports: containerd only follows the imports a loaded file names, so the default
//     /etc/containerd/conf.d/*.toml (still shown by `config dump`) is never read.
//   - restrict_oom_score_adj: without CAP_SYS_RESOURCE the sandbox fails to set its score.
//   - socket_dir keeps shim sockets out of /run/containerd/s (it must be at most 42 bytes).
//   - runtime_path/BinaryName: the shim and runc from BinDir (Debian's runc is too old).
//   - SystemdCgroup = false: there is no systemd as PID 1 here, unless Options.Systemd.
//   - stream_server_port = '0': concurrent instances must not fight over a fixed TCP port.
var configTemplate = template.Must(template.New("config").Funcs(template.FuncMap{
	"q": tomlString,
}).Parse(`version = 4
root = {{q .Root}}
state = {{q .State}}
temp = {{q .Temp}}

[plugins.'io.containerd.server.v1.grpc']
  address = {{q .Socket}}

[plugins.'io.containerd.server.v1.ttrpc']
  address = {{q (print .Socket ".ttrpc")}}

[plugins.'io.containerd.server.v1.debug']
  address = ''

[plugins.'io.containerd.server.v1.metrics']
  address = ''

[plugins.'io.containerd.internal.v1.opt']
  path = {{q .Opt}}

[plugins.'io.containerd.shim.v1.manager']
  socket_dir = {{q .ShimSockets}}

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {{q .Pause}}
{{- if .RegistryConfig}}
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = {{q .RegistryConfig}}
{{- end}}

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [{{q .CNIBin}}]
    conf_dir = {{q .CNIConf}}
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = 'runc'
{{- range .Runtimes}}
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{{q .Name}}]
      runtime_type = 'io.containerd.runc.v2'
      runtime_path = {{q $.Shim}}
{{- if .BaseSpec}}
      base_runtime_spec = {{q .BaseSpec}}
{{- end}}
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{{q .Name}}.options]
        BinaryName = {{q $.Runc}}
        Root = {{q $.RuncRoot}}
        SystemdCgroup = {{$.SystemdCgroup}}
{{- end}}

[plugins.'io.containerd.nri.v1.nri']
  disable = {{not .NRI}}
  socket_path = {{q .NRISocket}}
  plugin_path = {{q .NRIPlugins}}
  plugin_config_path = {{q .NRIPluginConf}}
{{- if .NRITimeout}}
  plugin_request_timeout = {{q .NRITimeout}}
{{- end}}
`))
