package nri

import (
	"sync"

	"github.com/containerd/nri/pkg/api"

	"github.com/mountkeeper/mountkeeper/internal/subpath/copies"
	"github.com/mountkeeper/mountkeeper/internal/subpath/liveupdate"
)

// Synchronize answers at once and leaves the slow part of catching up with the node to one
// background reconciler. The runtime holds every container creation of the node while a
// plugin synchronizes, and drops a plugin that takes its request timeout (2 s by default):
// on a node of 260 pods with a live subPath each, following them again took longer than that.
//
// Before answering, the plugin takes what it must know to decide the next container right,
// all of it read from memory or one state file: which live copies to resume (Load), the point
// after which a container the runtime did not list is new (Mark), which copy directories
// belong to containers that are gone, and the network mounts' users. After answering, the
// reconciler stops following what is gone, removes the copies of gone containers and
// resumes the live copies (Follower.ResumeLoaded: a look at the mounts per path).
//
// One reconciler runs at a time, whatever the number of Synchronizes: a Synchronize cut by the
// runtime's timeout goes on in the plugin beside the next one, so each takes a generation,
// and the reconciler works on the newest one only, giving up an older one between two
// steps. What it does is idempotent (a path followed once, a copy removed once), so a run
// given up and done again leaves what one run leaves. A container the runtime stops or
// removes meanwhile (Follower.Stop drops what Load read of it), or creates (followed after
// the Mark; its copy directory made after the listing), is decided as it would be without
// the reconciler.

// syncJob is what one Synchronize leaves to the reconciler.
type syncJob struct {
	gen     uint64
	live    *liveupdate.Follower
	running map[string]bool // containers listed as running (true) or created (false)
	mark    uint64          // live.Mark() when running was taken
	copies  *copies.Copies
	stale   []string // containers listed with copies and not by the runtime
}

// reconciler runs the newest syncJob on one goroutine, which ends when there is nothing left.
type reconciler struct {
	mu      sync.Mutex
	gen     uint64
	next    *syncJob
	running bool
	idle    *sync.Cond     // signalled when running goes false
	run     func(*syncJob) // does a job
	// hold, set by tests, is called before each job, and step between two of its steps:
	// either can keep the reconciler waiting.
	hold, step func()
}

func newReconciler(run func(*syncJob)) *reconciler {
	r := &reconciler{run: run}
	r.idle = sync.NewCond(&r.mu)
	return r
}

// submit makes j, numbered now, the job to do next, replacing one not begun.
func (r *reconciler) submit(j *syncJob) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	j.gen = r.gen
	r.next = j
	if !r.running {
		r.running = true
		go r.loop()
	}
}

// superseded says whether a newer job than gen was submitted.
func (r *reconciler) superseded(gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen != gen
}

func (r *reconciler) loop() {
	for {
		r.mu.Lock()
		j, hold := r.next, r.hold
		r.next = nil
		if j == nil {
			r.running = false
			r.idle.Broadcast()
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if hold != nil {
			hold()
		}
		r.run(j)
	}
}

// stop gives up the job under way (between two steps) and one not begun, and waits.
func (r *reconciler) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.next = nil
	for r.running {
		r.idle.Wait()
	}
}

// syncNow is the part of Synchronize done before answering: what a decision taken right
// after needs, from memory and one state file. The rest goes to the reconciler.
func (p *Plugin) syncNow(ctrs []*api.Container) {
	j := &syncJob{running: map[string]bool{}}
	listed := make(map[string]bool, len(ctrs))
	for _, ctr := range ctrs {
		listed[ctr.GetId()] = true
		switch ctr.GetState() {
		case api.ContainerState_CONTAINER_RUNNING:
			j.running[ctr.GetId()] = true
		case api.ContainerState_CONTAINER_CREATED:
			j.running[ctr.GetId()] = false // followed once PostStartContainer arms it
		}
	}
	if j.live = p.liveFollower(); j.live != nil {
		for _, ctr := range ctrs {
			if ctr.GetState() == api.ContainerState_CONTAINER_RUNNING {
				j.live.SetPid(ctr.GetId(), ctr.GetPid())
			}
		}
		if _, err := j.live.Load(j.running); err != nil {
			p.log.Warnf("live subPath copies: %v", err)
		}
		j.mark = j.live.Mark()
	}
	if j.copies = p.subPathCopies(); j.copies != nil {
		ids, err := j.copies.Containers()
		if err != nil {
			p.log.Warnf("list the subPath copies: %v", err)
		}
		for _, id := range ids {
			if !listed[id] {
				j.stale = append(j.stale, id)
			}
		}
	}
	p.reconcile.submit(j)
}

// reconcileJob is the reconciler's part of a Synchronize.
func (p *Plugin) reconcileJob(j *syncJob) {
	stop := func() bool {
		if p.reconcile.step != nil {
			p.reconcile.step()
		}
		return p.reconcile.superseded(j.gen)
	}
	if f := j.live; f != nil {
		f.Keep(j.running, j.mark)
	}
	removed := 0
	for _, id := range j.stale {
		if stop() {
			return
		}
		if err := j.copies.Remove(id); err != nil {
			p.log.WithField("container", id).Warnf("remove the subPath copies of a container that no longer exists: %v", err)
			continue
		}
		removed++
	}
	if removed > 0 {
		p.log.Infof("removed the subPath copies of %d containers that no longer exist", removed)
	}
	if j.live == nil || stop() {
		return
	}
	n, err := j.live.ResumeLoaded(stop)
	if err != nil {
		p.log.Warnf("live subPath copies: %v", err)
	}
	if n > 0 {
		p.log.Infof("following %d live subPath copies again", n)
	}
}

// Close stops what the plugin runs beside its requests: the reconciler (it gives up and ends) and
// the live copies' Follower (the copies stay mounted and recorded for the agent's successor).
func (p *Plugin) Close() {
	p.reconcile.stop()
	if f := p.liveFollower(); f != nil {
		f.Close()
	}
}
