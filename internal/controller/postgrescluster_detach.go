package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// A primary the operator cannot reach keeps running while a standby still replies to it
// (its self-fencing rule). Waiting for the standbys' WAL receivers to time out on their own
// would add their timeout and the operator's own observation to every node loss and partition;
// instead the operator orders every other instance to stop streaming from it (PathDetach) and
// counts from when each confirmed. A detached standby cannot stream again before the order's
// hold ends, which is far longer than this reconcile's step from the answers to the grant.

// peersGone is how long every instance but holder has been known not to stream from it, by
// their answers to a detach order sent now; "" or why not. An agent of an older release, which
// does not know the order, counts from when this process first saw it report no streaming.
func (r *PostgresClusterReconciler) peersGone(ctx context.Context, s *scope, holder string) (time.Duration, string) {
	type answer struct {
		name   string
		gone   time.Duration
		legacy bool
		err    error
	}
	var answers []answer
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		report := s.observed.Reports[pod.Name]
		if pod.Name == holder || (report != nil && report.Fenced) {
			continue // a fenced instance runs no server, so it streams from nobody
		}
		if report == nil {
			answers = append(answers, answer{name: pod.Name, err: fmt.Errorf("its agent does not answer (%s)", s.observed.Failures[pod.Name])})
			continue
		}
		wg.Go(func() {
			a := answer{name: pod.Name}
			status, err := r.agents().Detach(ctx, r.endpoint(s, pod), holder)
			switch {
			case errors.Is(err, agentapi.ErrNotSupported) && !report.Streaming:
				a.legacy = true
			case err != nil:
				a.err = err
			default:
				a.gone = time.Duration(status.DetachedMillis) * time.Millisecond
			}
			mu.Lock()
			defer mu.Unlock()
			answers = append(answers, a)
			if err == nil {
				s.detached = append(s.detached, pod.Name)
			}
		})
	}
	wg.Wait()
	slices.SortFunc(answers, func(a, b answer) int { return ha.CompareNames(a.name, b.name) })
	legacy := slices.ContainsFunc(answers, func(a answer) bool { return a.legacy })
	legacyGone := r.leases().since(r.leases().peersGone, s.cluster.UID, legacy, time.Now())
	gone := time.Duration(1<<63 - 1)
	for _, a := range answers {
		switch {
		case a.err != nil:
			return 0, fmt.Sprintf("%s may still stream from it: %v", a.name, a.err)
		case a.legacy:
			gone = min(gone, legacyGone)
		default:
			gone = min(gone, a.gone)
		}
	}
	return gone, ""
}

// attachPeers lets every instance detached from the old primary (in this reconcile, or as its
// report says) stream again, but except (promoted next, it streams from nobody): the old
// primary is fenced or answers again, so the -rw Service cannot lead them to a second primary.
// A standby missed here attaches when its hold ends.
func (r *PostgresClusterReconciler) attachPeers(ctx context.Context, s *scope, except string) {
	var wg sync.WaitGroup
	for i := range s.observed.Pods {
		pod := &s.observed.Pods[i]
		report := s.observed.Reports[pod.Name]
		if pod.Name == except || report == nil || (report.DetachedFrom == "" && !slices.Contains(s.detached, pod.Name)) {
			continue
		}
		wg.Go(func() {
			if err := r.agents().Attach(ctx, r.endpoint(s, pod)); err != nil && !errors.Is(err, agentapi.ErrNotSupported) {
				logf.FromContext(ctx).Info("attach failed; the standby attaches when its detach hold ends", "instance", pod.Name, "error", err.Error())
			}
		})
	}
	wg.Wait()
}
