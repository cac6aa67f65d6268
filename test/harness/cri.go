package harness

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// defaultExecTimeout bounds Exec when the context has no earlier deadline, so a hung command
// fails the test instead of hanging it.
const defaultExecTimeout = 30 * time.Second

// Client is a small CRI client, the part of kubelet the tests need. It talks
// k8s.io/cri-api runtime/v1 over gRPC on the runtime's socket (containerd or CRI-O) and keeps
// working across Restart (gRPC reconnects by itself). Like kubelet it labels pods and
// containers with their names and sets ImageSpec.UserSpecifiedImage.
type Client struct {
	conn   *grpc.ClientConn
	rt     runtimeapi.RuntimeServiceClient
	img    runtimeapi.ImageServiceClient
	cgroup string // cgroup parent of all pods
	logDir string // pod log directories go here

	// StopTimeout is the grace period StopContainer gives a container after SIGTERM. Zero
	// (the default) kills at once: test containers run `sleep` as PID 1, which ignores SIGTERM.
	StopTimeout time.Duration

	seq  atomic.Int64 // for default names
	mu   sync.Mutex
	pods map[string]*runtimeapi.PodSandboxConfig // CreateContainer must repeat the pod's config
}

func newClient(socket, cgroupParent, logDir string) (*Client, error) {
	// gRPC's default reconnect backoff starts at 1s: fine for a kubelet, but it would add a
	// second to every Start and Restart, whose first attempts find no socket yet.
	retry := backoff.DefaultConfig
	retry.BaseDelay, retry.MaxDelay = 20*time.Millisecond, 500*time.Millisecond
	conn, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: retry, MinConnectTimeout: 5 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("CRI client for %s: %w", socket, err)
	}
	return &Client{
		conn:   conn,
		rt:     runtimeapi.NewRuntimeServiceClient(conn),
		img:    runtimeapi.NewImageServiceClient(conn),
		cgroup: cgroupParent,
		logDir: logDir,
		pods:   map[string]*runtimeapi.PodSandboxConfig{},
	}, nil
}

func (c *Client) close() error { return c.conn.Close() }

// RuntimeService gives direct access to the CRI runtime service for calls Client lacks.
func (c *Client) RuntimeService() runtimeapi.RuntimeServiceClient { return c.rt }

// ImageService gives direct access to the CRI image service.
func (c *Client) ImageService() runtimeapi.ImageServiceClient { return c.img }

// ready reports whether CRI answers and its runtime is ready. The network condition is not
// checked: pods use the node's network, so there is no CNI.
func (c *Client) ready(ctx context.Context) error {
	resp, err := c.rt.Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		return err
	}
	for _, cond := range resp.GetStatus().GetConditions() {
		if cond.GetType() == runtimeapi.RuntimeReady && !cond.GetStatus() {
			return fmt.Errorf("CRI runtime not ready: %s %s", cond.GetReason(), cond.GetMessage())
		}
	}
	return nil
}

// hasImage reports whether CRI knows image ref.
func (c *Client) hasImage(ctx context.Context, ref string) (bool, error) {
	resp, err := c.img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	if err != nil {
		return false, fmt.Errorf("CRI ImageStatus %s: %w", ref, err)
	}
	return resp.GetImage() != nil, nil
}

// PodOptions describes a pod sandbox. Empty Name, Namespace and UID get defaults.
type PodOptions struct {
	Name, Namespace, UID string
	// RuntimeHandler selects the CRI runtime handler; empty means containerd's default
	// ("runc"), which NRI plugins see as "".
	RuntimeHandler string
	// Annotations and Labels of the pod, e.g. required-plugins.noderesource.dev. Labels come
	// on top of the ones kubelet sets (see kubeletLabels).
	Annotations, Labels map[string]string
	// NoKubeletLabels leaves out the labels kubelet sets, for a client that is not kubelet.
	NoKubeletLabels bool
	// UserNamespace gives the pod a user namespace (UsernsHostID), as kubelet does for
	// hostUsers: false; the pod is then not privileged. Its containers need it too.
	UserNamespace bool
}

// Labels kubelet puts on every pod sandbox and container. CRI-O takes the pod and container
// names it reports to NRI plugins from them, not from the CRI metadata.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// kubeletLabels returns the labels kubelet would set for meta (and container, if not ""),
// with extra on top; nil when none is asked for.
func kubeletLabels(skip bool, meta *runtimeapi.PodSandboxMetadata, container string, extra map[string]string) map[string]string {
	l := map[string]string{}
	if !skip {
		l[LabelPodName], l[LabelPodNamespace], l[LabelPodUID] = meta.GetName(), meta.GetNamespace(), meta.GetUid()
		if container != "" {
			l[LabelContainerName] = container
		}
	}
	for k, v := range extra {
		l[k] = v
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

// RunPod starts a pod sandbox. The pod uses the node's network (no CNI needed), its own
// cgroup below the instance's cgroup parent (so Close can find it), and is privileged so
// that it may hold privileged containers.
func (c *Client) RunPod(ctx context.Context, o PodOptions) (string, error) {
	o.Name = cmp.Or(o.Name, fmt.Sprintf("pod-%d", c.seq.Add(1)))
	o.Namespace = cmp.Or(o.Namespace, "default")
	o.UID = cmp.Or(o.UID, rand.Text())
	logDir := filepath.Join(c.logDir, o.Namespace+"_"+o.Name+"_"+o.UID)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return "", fmt.Errorf("create pod log dir %s: %w", logDir, err)
	}
	meta := &runtimeapi.PodSandboxMetadata{Name: o.Name, Namespace: o.Namespace, Uid: o.UID}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:     meta,
		LogDirectory: logDir,
		Labels:       kubeletLabels(o.NoKubeletLabels, meta, "", o.Labels),
		Annotations:  o.Annotations,
		Linux: &runtimeapi.LinuxPodSandboxConfig{
			CgroupParent: c.cgroup + "/pod-" + o.UID,
			SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
				Privileged:       !o.UserNamespace, // a user-namespaced pod cannot be privileged
				NamespaceOptions: withUserns(namespaces(), o.UserNamespace),
			},
		},
	}
	resp, err := c.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfg, RuntimeHandler: o.RuntimeHandler})
	if err != nil {
		return "", fmt.Errorf("CRI RunPodSandbox %s/%s (handler %q): %w", o.Namespace, o.Name, o.RuntimeHandler, err)
	}
	c.mu.Lock()
	c.pods[resp.GetPodSandboxId()] = cfg
	c.mu.Unlock()
	return resp.GetPodSandboxId(), nil
}

// namespaces is what kubelet asks for a hostNetwork pod without shareProcessNamespace.
func namespaces() *runtimeapi.NamespaceOption {
	return &runtimeapi.NamespaceOption{
		Network: runtimeapi.NamespaceMode_NODE,
		Pid:     runtimeapi.NamespaceMode_CONTAINER,
		Ipc:     runtimeapi.NamespaceMode_POD,
	}
}

// Mount is a host bind mount into a container, as kubelet passes volumes.
type Mount struct {
	HostPath, ContainerPath string
	ReadOnly                bool
	// Propagation is "" or "None" (rprivate), "HostToContainer" (rslave) or
	// "Bidirectional" (rshared).
	Propagation string
}

var propagations = map[string]runtimeapi.MountPropagation{
	"":                runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	"None":            runtimeapi.MountPropagation_PROPAGATION_PRIVATE,
	"HostToContainer": runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER,
	"Bidirectional":   runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL,
}

// ContainerOptions describes a container. Empty Name, Image and Args get defaults:
// a generated name, BusyboxImage and ["sleep", "3600"].
type ContainerOptions struct {
	Name        string
	Image       string
	Args        []string
	Mounts      []Mount
	Privileged  bool
	Annotations map[string]string
	// Labels come on top of the ones kubelet sets, unless NoKubeletLabels.
	Labels          map[string]string
	NoKubeletLabels bool
	// UserNamespace: the container joins its pod's user namespace (see PodOptions).
	UserNamespace bool
	// RunAsUser, if not nil, is the uid the container runs as (securityContext.runAsUser).
	RunAsUser *int64
}

// CreateContainer creates a container in a pod made by RunPod. Its error is the runtime's
// gRPC error unchanged, so tests can match an NRI plugin's rejection text in it.
func (c *Client) CreateContainer(ctx context.Context, podID string, o ContainerOptions) (string, error) {
	c.mu.Lock()
	pod := c.pods[podID]
	c.mu.Unlock()
	if pod == nil {
		return "", fmt.Errorf("pod %s was not created by this client", podID)
	}
	o.Name = cmp.Or(o.Name, fmt.Sprintf("ctr-%d", c.seq.Add(1)))
	o.Image = cmp.Or(o.Image, BusyboxImage)
	if o.Args == nil {
		o.Args = []string{"sleep", "3600"}
	}
	cfg := &runtimeapi.ContainerConfig{
		Metadata:    &runtimeapi.ContainerMetadata{Name: o.Name},
		Image:       &runtimeapi.ImageSpec{Image: o.Image, UserSpecifiedImage: o.Image},
		Args:        o.Args,
		Annotations: o.Annotations,
		Labels:      kubeletLabels(o.NoKubeletLabels, pod.GetMetadata(), o.Name, o.Labels),
		LogPath:     o.Name + ".log",
		Linux: &runtimeapi.LinuxContainerConfig{
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
				Privileged:       o.Privileged,
				NamespaceOptions: withUserns(namespaces(), o.UserNamespace),
				RunAsUser:        runAsUser(o.RunAsUser),
			},
		},
	}
	for _, m := range o.Mounts {
		prop, ok := propagations[m.Propagation]
		if !ok {
			return "", fmt.Errorf("mount %s: unknown propagation %q", m.ContainerPath, m.Propagation)
		}
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{
			HostPath: m.HostPath, ContainerPath: m.ContainerPath, Readonly: m.ReadOnly, Propagation: prop,
		})
	}
	resp, err := c.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: pod})
	if err != nil {
		return "", err
	}
	return resp.GetContainerId(), nil
}

// StartContainer starts a created container.
func (c *Client) StartContainer(ctx context.Context, id string) error {
	if _, err := c.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("CRI StartContainer %s: %w", id, err)
	}
	return nil
}

// Exec runs cmd in a running container and returns its output and exit code. err reports
// only a failed call, not a non-zero exit. The runtime kills the command after the context's
// deadline or 30s, whichever comes first.
func (c *Client) Exec(ctx context.Context, id string, cmd ...string) (stdout, stderr string, exitCode int, err error) {
	timeout := defaultExecTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Second)
	}
	resp, err := c.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: cmd, Timeout: int64(timeout / time.Second)})
	if err != nil {
		return "", "", -1, fmt.Errorf("CRI ExecSync %v in %s: %w", cmd, id, err)
	}
	return string(resp.GetStdout()), string(resp.GetStderr()), int(resp.GetExitCode()), nil
}

// StopContainer stops a container, waiting StopTimeout before SIGKILL.
func (c *Client) StopContainer(ctx context.Context, id string) error {
	req := &runtimeapi.StopContainerRequest{ContainerId: id, Timeout: int64(c.StopTimeout / time.Second)}
	if _, err := c.rt.StopContainer(ctx, req); err != nil {
		return fmt.Errorf("CRI StopContainer %s: %w", id, err)
	}
	return nil
}

// ContainerPid is the host pid of a running container's process, from the runtime's verbose
// status (containerd and CRI-O both give it as info's "pid").
func (c *Client) ContainerPid(ctx context.Context, id string) (int, error) {
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		return 0, fmt.Errorf("CRI ContainerStatus %.12s: %w", id, err)
	}
	var info struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(resp.GetInfo()["info"]), &info); err != nil || info.Pid <= 0 {
		return 0, fmt.Errorf("container %.12s: no pid in its verbose status (%v): %q", id, err, resp.GetInfo()["info"])
	}
	return info.Pid, nil
}

// RemoveContainer removes a container, stopping it first if needed.
func (c *Client) RemoveContainer(ctx context.Context, id string) error {
	if _, err := c.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		return fmt.Errorf("CRI RemoveContainer %s: %w", id, err)
	}
	return nil
}

// RemovePod stops a pod's containers (StopTimeout each), then the pod, and removes the
// containers, then the pod. It goes in kubelet's order: containers are stopped first because
// CRI-O's StopPodSandbox would give each a grace period of its own choosing, and removed
// before their sandbox (kubelet's garbage collector never removes a sandbox that still has
// containers) because containerd 2.4.2's RemovePodSandbox, which removes them itself, takes
// NRI's plugin-sync read lock twice (sandbox_remove.go, then its own RemoveContainer): an
// NRI plugin registering between the two waits for the first, the second waits behind the
// plugin, and the runtime hangs for good (seen once in CI, when mountkeeper reconnected
// after a containerd restart).
func (c *Client) RemovePod(ctx context.Context, podID string) error {
	ctrs, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{PodSandboxId: podID}})
	if err != nil {
		return fmt.Errorf("CRI ListContainers of pod %s: %w", podID, err)
	}
	for _, ctr := range ctrs.GetContainers() {
		if ctr.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			if err := c.StopContainer(ctx, ctr.GetId()); err != nil {
				return err
			}
		}
	}
	if _, err := c.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("CRI StopPodSandbox %s: %w", podID, err)
	}
	for _, ctr := range ctrs.GetContainers() {
		if err := c.RemoveContainer(ctx, ctr.GetId()); err != nil {
			return err
		}
	}
	if _, err := c.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: podID}); err != nil {
		return fmt.Errorf("CRI RemovePodSandbox %s: %w", podID, err)
	}
	c.mu.Lock()
	delete(c.pods, podID)
	c.mu.Unlock()
	return nil
}

// ListContainers lists all containers of all pods.
func (c *Client) ListContainers(ctx context.Context) ([]*runtimeapi.Container, error) {
	resp, err := c.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListContainers: %w", err)
	}
	return resp.GetContainers(), nil
}

// ListPods lists all pod sandboxes.
func (c *Client) ListPods(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	resp, err := c.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("CRI ListPodSandbox: %w", err)
	}
	return resp.GetItems(), nil
}

// ContainerStatus returns the runtime's view of a container (state, mounts, exit code...).
func (c *Client) ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	resp, err := c.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		return nil, fmt.Errorf("CRI ContainerStatus %s: %w", id, err)
	}
	return resp.GetStatus(), nil
}

// removeAllPods removes every pod, for Close.
func (c *Client) removeAllPods(ctx context.Context) error {
	pods, err := c.ListPods(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range pods {
		if err := c.RemovePod(ctx, p.GetId()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
