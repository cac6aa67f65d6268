//go:build e2e && guestnfs

package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountkeeper/mountkeeper/internal/netmount"
	"github.com/mountkeeper/mountkeeper/test/harness"
	"github.com/mountkeeper/mountkeeper/test/testsupport"
)

// TestGuestNFSDeadServer: on a node without the NFS client, the first container of an NFS class
// is refused naming the packages that have it; the client installed, the container tried again
// is created (no plugin restart). Then the guest's nfsd stopped under that pod, which reads its
// hard NFSv4.2 mount, through containerd, runc and the plugin binary. A container of a new pod
// of the class is refused in time, naming the mount's server (host:port); the plugin holds one
// thread in D state for the server, which its status counts; it exits on SIGTERM in time and,
// restarted, serves containers while the server is still dead. nfsd started again: the reader
// reads again without a restart, the refused pod's container tried again reads the export.
// Containers of no class, and of a class of a local source (rslave, checked on the host at each
// create), were created about as fast with the server dead as alive, and mountkeeper used about
// as much CPU meanwhile (its heal starts no mount helper while the server refuses connections).
// The export made anew on another filesystem (a failover: ESTALE), the reader reads the new one
// without a restart. Once the pods are gone nothing is mounted and no scope is left.
//
// A pod sandbox takes 8-13 s under TCG, a container's start 5-7 s: the test's sandboxes are
// made at once at its start (the refused pod's too: RunPodSandbox only starts a class's mounts
// in the background, and CreateContainer is where a container gets its mounts or is refused;
// kubelet tries the refused container again in the same pod, as the test does once the server
// is back), and the containers timed for fairness share one pod of no class and are created,
// not started (CreateContainer is where NRI runs).
func TestGuestNFSDeadServer(t *testing.T) {
	began := time.Now()
	scopes := inGuestNFS(t)
	root := os.Getenv(guestNFSRootEnv)
	// Before the node: unexported only once its pods and mounts are gone.
	export := testsupport.NewNFSExport(t, guestNFSDeadExport, filepath.Join(root, "usr", "sbin", "exportfs"))
	export.Serve(t, guestNFSContent, "111")
	plugCg, err := harness.NewCgroup2("mk-guestnfs-dead-plugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plugCg.Remove() })
	const nfsClassName, localClassName = "mk-nfs4", "mk-local"
	n := newNodeOpts(t, harness.KindContainerd, harness.Options{Handlers: []string{nfsClassName, localClassName},
		NRIRequestTimeout: guestNFSRequestTimeout}, guestNFSDeadConfig, plugCg.Dir)
	n.sourceTmpfs("local", "shared")
	sock := filepath.Join(n.dir, "ops.sock")
	n.startListeningPlugin(plugCg.Dir, sock)
	cfg := n.endNetworkScopes()
	spec := *cfg.RuntimeClasses[nfsClassName].Mounts[0].Network
	class := &nfsClass{name: nfsClassName, hostPath: netmount.HostPath(filepath.Join(n.src(), "state"), spec)}
	key := spec.Key()
	nfsd := newGuestNFSD(t, root) // after the node and the plugin: its cleanup runs first

	start := time.Now()
	pods := n.runPods(podOf{nfsClassName, "reader"}, podOf{"", "plain"}, podOf{nfsClassName, "refused"}, podOf{localClassName, "local"})
	readerPod, plainPod, refusedPod, localPod := pods[0], pods[1], pods[2], pods[3]
	t.Logf("the node up in %s; 4 pod sandboxes (2 of %s) at once in %s",
		start.Sub(began).Round(time.Millisecond), nfsClassName, time.Since(start).Round(time.Millisecond))
	// The node has no NFS client yet: test/vm's guest runs this test before any other NFS test.
	reader := n.createdOnceNFSClientInstalled(readerPod, "reader", readLoop("0.2"), root)
	readsExport(t, n, reader)
	if oneNFSMount(t, class.hostPath) == nil {
		t.FailNow()
	}

	// Containers of no class and of another class, with the server alive: 9 a phase each,
	// removed as they come so that every phase creates on the same node.
	const count = 9
	others := []otherPod{{"of no class", plainPod}, {"of class " + localClassName, localPod}}
	cgroups := mkCgroups{plugin: plugCg.Dir, scopes: scopes}
	alive := n.timedPhase(sock, cgroups, "alive", count, others)

	// The server stopped under the reader; the prober finds the mount dead.
	nfsd.stop()
	stopped := time.Now()
	pid := n.plugin.Pid()
	var dead time.Duration
	testsupport.Eventually(t, 20*time.Second, 50*time.Millisecond, "the mount found dead after nfsd stopped", func() bool {
		if s := networkMount(pluginStatus(t, sock), key).State; s == "dead" || s == "recovering" {
			dead = time.Since(stopped)
			return true
		}
		return false
	})
	t.Logf("nfsd stopped: the mount found dead %s later (probes every 500ms, each bounded by %s)", dead.Round(time.Millisecond), netmount.ProbeTimeout)

	// Containers of no class, with the server dead: timed before anything else the test does
	// with it (a refused container's clean-up) runs on the node.
	deadPhase := n.timedPhase(sock, cgroups, "dead", count, others)

	t.Run("a container of a new pod of the class is refused in time, naming the server", func(t *testing.T) {
		// Created only: runc could hang on a dead mount given to a container (its bind).
		start := time.Now()
		_, refused := n.rt.CRI().CreateContainer(n.ctx, refusedPod, harness.ContainerOptions{Name: "refused", Privileged: true})
		took := time.Since(start)
		if refused == nil {
			t.Fatal("a container of the class was created with its server dead")
		}
		t.Logf("refused in %s: %v", took.Round(time.Millisecond), refused)
		if budget := 25 * time.Second; took > budget {
			t.Errorf("CreateContainer refused after %s, more than the create budget %s", took, budget)
		}
		if msg := refused.Error(); !strings.Contains(msg, "the server "+guestNFSServer) {
			t.Errorf("the refusal does not name the server %s: %s", guestNFSServer, msg)
		}
	})

	t.Run("the plugin holds one thread in D state for the server, as its status counts", func(t *testing.T) {
		var d, stuck int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			d, stuck = dStateThreads(pid), pluginStatus(t, sock).StuckCalls[guestNFSServer]
			if (d == stuck && stuck > 0) || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("%s after nfsd stopped: %d threads of the plugin in D state, %d stuck probes of %s in its status (bound: 1 per server)",
			time.Since(stopped).Round(time.Millisecond), d, stuck, guestNFSServer)
		if d != 1 || stuck != 1 {
			t.Errorf("%d threads of the plugin in D state, %d stuck probes of %s in its status: want 1 and 1", d, stuck, guestNFSServer)
		}
	})

	t.Run("SIGTERMed, the plugin exits in time; restarted, it serves containers", func(t *testing.T) {
		d := dStateThreads(pid)
		term := time.Now()
		if err := n.plugin.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		const exitBound = 5 * time.Second
		for !n.plugin.Exited() {
			if time.Since(term) > exitBound {
				t.Fatalf("the plugin has not exited %s after SIGTERM, with %d threads in D state (now %d)", exitBound, d, dStateThreads(pid))
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("the plugin exited %s after SIGTERM, with %d threads in D state", time.Since(term).Round(time.Millisecond), d)
		start := time.Now()
		n.startListeningPlugin(plugCg.Dir, sock)
		pid = n.plugin.Pid()
		connected := time.Since(start)
		took, passed, err := n.decidedContainer(plainPod, "plain", "restarted", 15*time.Second)
		if err != nil {
			t.Fatalf("the restarted plugin: %v", err)
		}
		t.Logf("restarted: connected to the runtime in %s; a container of no class decided on by it %s after its start (%d created before it was registered)",
			connected.Round(time.Millisecond), (connected + took).Round(time.Millisecond), passed)
		var stuck int
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			d, stuck = dStateThreads(pid), pluginStatus(t, sock).StuckCalls[guestNFSServer]
			if (d == stuck && stuck > 0) || time.Now().After(deadline) {
				break
			}
		}
		t.Logf("the restarted plugin: %d threads in D state, %d stuck probes of %s, the mount %s", d, stuck, guestNFSServer, networkMount(pluginStatus(t, sock), key).State)
		if d > 1 || d != stuck {
			t.Errorf("the restarted plugin: %d threads in D state, %d stuck probes of %s: want at most 1, the same", d, stuck, guestNFSServer)
		}
	})

	t.Run("nfsd started again: the reader reads again, the refused pod's container is created and reads the export", func(t *testing.T) {
		before, _ := readsOf(t, n, reader)
		nfsd.start()
		back := time.Now()
		// The refused container tried again in its pod, as kubelet does, from when the mount is
		// mounted again (it takes seconds: it is made while the reader waits for its read).
		type newPod struct {
			id      string
			started time.Duration
			err     error
		}
		var created chan newPod
		var reads, unstuck, mounted time.Duration
		for reads == 0 || unstuck == 0 || mounted == 0 {
			if time.Since(back) > 30*time.Second {
				t.Fatalf("30s after nfsd started again: the reader read again after %s, stuck probes none after %s, the mount mounted after %s; status %+v",
					reads, unstuck, mounted, pluginStatus(t, sock))
			}
			if ok, _ := readsOf(t, n, reader); reads == 0 && ok > before {
				reads = time.Since(back)
			}
			st := pluginStatus(t, sock)
			if unstuck == 0 && st.StuckCalls[guestNFSServer] == 0 {
				unstuck = time.Since(back)
			}
			if mounted == 0 && networkMount(st, key).State == "mounted" {
				mounted = time.Since(back)
				created = make(chan newPod, 1)
				go func() {
					id, _, refused, err := n.timedContainer(refusedPod, "retried", nil)
					created <- newPod{id, time.Since(back), errors.Join(refused, err)}
				}()
			}
			time.Sleep(100 * time.Millisecond)
		}
		ok, fails := readsOf(t, n, reader)
		p := <-created
		if p.err != nil {
			t.Fatalf("the refused pod's container, tried again %s after nfsd started again (the mount mounted then), refused or failed %s after: %v", mounted, p.started, p.err)
		}
		readsExport(t, n, p.id)
		t.Logf("nfsd started again: the reader read again after %s (%d reads ok, %d failed in all), no stuck probe after %s, the mount mounted after %s, the refused pod's container, tried again, started after %s; %d threads of the plugin in D state",
			reads.Round(time.Millisecond), ok, fails, unstuck.Round(time.Millisecond), mounted.Round(time.Millisecond), p.started.Round(time.Millisecond), dStateThreads(pid))
	})

	t.Run("containers of no class and of another class are created as fast with the server dead as alive", func(t *testing.T) {
		// Alive before the death and again after the recovery: the guest's speed drifts
		// under TCG, and the two alive phases bracket the dead one.
		again := n.timedPhase(sock, cgroups, "alive-again", count, others)
		for i, o := range others {
			checkFairness(t, o.what, alive[i], deadPhase[i], again[i])
		}
	})

	t.Run("the export made anew on another filesystem (a failover): the reader reads the new one without a restart", func(t *testing.T) {
		const failedOver = "served after the failover\n"
		_, fails := readsOf(t, n, reader)
		deaths := networkMount(pluginStatus(t, sock), key).Deaths
		start := time.Now()
		export.Serve(t, failedOver, "112")
		var got string
		for got != failedOver {
			if time.Since(start) > 30*time.Second {
				t.Fatalf("30s after the failover the reader reads %q, want %q; status %+v", got, failedOver, pluginStatus(t, sock))
			}
			time.Sleep(100 * time.Millisecond)
			got, _ = n.fileIn(reader, "/data/hello")
		}
		took := time.Since(start)
		testsupport.Eventually(t, 10*time.Second, 100*time.Millisecond, "the mount mounted again after the failover", func() bool {
			return networkMount(pluginStatus(t, sock), key).State == "mounted"
		})
		_, failsAfter := readsOf(t, n, reader)
		after := networkMount(pluginStatus(t, sock), key).Deaths
		t.Logf("the reader reads the new filesystem %s after the failover began (%d of its reads failed meanwhile); the mount died %d time(s) more",
			took.Round(time.Millisecond), failsAfter-fails, after-deaths)
		if after <= deaths {
			t.Errorf("the mount's deaths are %d after the failover, %d before: the failover was not found", after, deaths)
		}
	})

	t.Run("after the last pod and the grace nothing is mounted and no scope is left", func(t *testing.T) {
		// The class's pods first; the other pod meanwhile, while the mount's grace runs.
		start := time.Now()
		n.removePodsAtOnce(readerPod, refusedPod)
		removed := time.Now()
		plain := make(chan error, 1)
		go func() { plain <- n.removePodsAtOnceErr(plainPod) }()
		for left := leftAfter(t, []*nfsClass{class}, scopes); left != ""; left = leftAfter(t, []*nfsClass{class}, scopes) {
			if time.Since(removed) > 30*time.Second {
				t.Fatalf("30s after the last pod's removal (grace 5s): %s", left)
			}
			time.Sleep(100 * time.Millisecond)
		}
		released := time.Since(removed)
		if err := <-plain; err != nil {
			t.Error(err)
		}
		t.Logf("the class's pods removed in %s; released %s after (grace 5s); the other pod removed %s after",
			removed.Sub(start).Round(time.Millisecond), released.Round(time.Millisecond), time.Since(removed).Round(time.Millisecond))
	})
	t.Logf("the test took %s", time.Since(began).Round(time.Millisecond))
}
