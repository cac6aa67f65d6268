package nri

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/mountkeeper/mountkeeper/configs"
	"github.com/mountkeeper/mountkeeper/internal/guard"
)

// markHandled annotates a class container with the guard token (package guard): a runtime
// configured by `mountkeeper runtime configure` refuses the class's containers without it, so
// that none starts without its class mounts while the plugin is away. Without a key (a state
// dir that cannot be written) the container is still created, and the guard, if installed,
// refuses it with its own message.
func (p *Plugin) markHandled(log *logrus.Entry, adj *api.ContainerAdjustment, cfg *configs.Config, id string) {
	signer, err := p.guardFor(cfg)
	if err != nil {
		log.Warnf("cannot mark the container as handled for the runtime's guard hook: %v", err)
		return
	}
	adj.AddAnnotation(guard.Annotation, signer.Token(id))
}

// guardFor signs with the node's guard key in cfg's state dir, read (or made) once per state
// dir: at Configure and Reload (startGuard), so CreateContainer normally finds it loaded; only
// a load that failed then is tried again here.
func (p *Plugin) guardFor(cfg *configs.Config) (*guard.Signer, error) {
	p.guardMu.Lock()
	defer p.guardMu.Unlock()
	if p.guard == nil || p.guardKeyDir != cfg.StateDir {
		key, err := guard.EnsureKey(cfg.StateDir)
		if err != nil {
			return nil, err
		}
		if key.Replaced != nil {
			p.log.Warnf("guard key %s %s: replaced it by a new key (a container marked with the lost key and not yet created is refused once; kubelet's retry is marked with the new one)", key.Replaced.Path, key.Replaced.Problem())
		}
		p.guard, p.guardKeyDir = guard.NewSigner(key.Bytes), cfg.StateDir
	}
	return p.guard, nil
}

// startGuard loads the guard key of a config that has runtime classes.
func (p *Plugin) startGuard(cfg *configs.Config) {
	if len(cfg.RuntimeClasses) > 0 {
		if _, err := p.guardFor(cfg); err != nil {
			p.log.Warnf("guard key in %s: %v (tried again at the next class container)", cfg.StateDir, err)
		}
	}
}
