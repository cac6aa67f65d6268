package harness

import (
	"fmt"
	"path/filepath"
)

// AdminKubeconfig writes a kubeconfig with the test client's cluster-admin certificate (what
// API() uses) into the node's directory and returns its path, for clients that read one:
// helm, kubectl.
func (k *KubeNode) AdminKubeconfig() (string, error) {
	path := filepath.Join(k.dir, "admin.kubeconfig")
	return path, writeJSON(path, map[string]any{
		"apiVersion": "v1", "kind": "Config",
		"clusters": []any{map[string]any{"name": "mk", "cluster": map[string]any{
			"server": fmt.Sprintf("https://127.0.0.1:%d", k.apiPort), "certificate-authority": k.pki.caCert()}}},
		"users": []any{map[string]any{"name": "admin", "user": map[string]any{
			"client-certificate": k.pki.adminCert(), "client-key": k.pki.adminKey()}}},
		"contexts":        []any{map[string]any{"name": "mk", "context": map[string]any{"cluster": "mk", "user": "admin"}}},
		"current-context": "mk",
	})
}
