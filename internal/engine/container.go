package engine

// nameAnnotations are the spec annotations CRI runtimes name a container with: containerd's,
// then CRI-O's (kubelet's labels), as namespace, pod, container.
var nameAnnotations = [][3]string{
	{"io.kubernetes.cri.sandbox-namespace", "io.kubernetes.cri.sandbox-name", "io.kubernetes.cri.container-name"},
	{"io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name"},
}

// ContainerOf identifies a container for messages from the names a CRI runtime annotated its
// spec with, and its runtime ID (empty where the caller has none).
func ContainerOf(id string, annotations map[string]string) Container {
	for _, keys := range nameAnnotations {
		if ctr := annotations[keys[2]]; ctr != "" {
			return Container{Namespace: annotations[keys[0]], Pod: annotations[keys[1]], Name: ctr, ID: id}
		}
	}
	return Container{ID: id}
}
