package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// A reconcile runs in lanes. Each lane is a chain of idempotent stages that stops at its first
// stop or error, but no lane stops another: a missing user Secret, a refused child or a bad
// certificate holds the children's lane and shows in the status, while the HA lane still
// observes the instances and fails over. Only the follow lane, which changes running instances
// (rolling updates, restarts), waits for both: it must not act on children it could not ensure,
// nor during a failover.

// stage is one idempotent step of the reconcile. It goes on (nil, nil), stops its lane for a
// reason (a *stop: waiting or invalid input), or fails (an error, retried with backoff).
type stage struct {
	name string
	run  func(ctx context.Context, s *scope) (*stop, error)
}

// childrenLane ensures the owned objects from the spec.
func (r *PostgresClusterReconciler) childrenLane() []stage {
	return []stage{
		{"refusals", r.holdAfterRefusal},
		{"certificates", r.ensureCertificates},
		{"secrets", r.ensureSecrets},
		{"appconnection", r.ensureAppConnection},
		{"backupsecrets", r.checkBackupSecrets},
		{"unchanged", r.skipUnchangedChildren},
		{"instanceaccess", unlessUnchanged(r.ensureInstanceAccess)},
		{"configmap", unlessUnchanged(r.ensureConfigMap)},
		{"statefulset", unlessUnchanged(r.ensureStatefulSet)},
		{"services", unlessUnchanged(r.ensureServices)},
		{"poddisruptionbudget", unlessUnchanged(r.ensurePodDisruptionBudget)},
		{"networkpolicy", unlessUnchanged(r.ensureNetworkPolicy)},
		{"monitoring", r.ensureMonitoring},
		{"remember", r.rememberUnchangedChildren},
	}
}

// haLane observes the instances once and decides who is primary: failover, switchover,
// fencing and the role labels. It needs nothing of the children's lane but the Lease and the
// operator's client certificate, which it makes sure of itself.
func (r *PostgresClusterReconciler) haLane() []stage {
	return []stage{
		{"lease", r.ensurePrimaryLease},
		{"agenttls", r.loadAgentTLS},
		{"observe", r.observe},
		{"switchover", r.switchover},
		{"failover", r.failover},
		{"rejoins", r.announceRejoins},
		{"lognotices", r.announceLogNotices},
		{"primary", r.decidePrimary},
		{"majorupgrade", r.advanceMajorUpgrade},
	}
}

// followLane acts on running instances from the ensured children and the decided primary.
func (r *PostgresClusterReconciler) followLane() []stage {
	return []stage{
		{"credentials", r.announceRotation},
		{"slots", r.dropRemovedSlots},
		{"update", r.rollOutTemplate},
		{"restarts", r.restartPending},
		{"carotation", r.advanceCARotation},
	}
}

// laneEnd is how a lane ended: it ran through (both nil), stopped, or failed.
type laneEnd struct {
	stopped *stop
	err     error
}

func (e laneEnd) through() bool { return e.stopped == nil && e.err == nil }

// runLanes runs the children's, the HA and the catalog lane whatever the others say (the catalog
// lane acts on the primary the HA lane decided), then the follow lane
// when both ran through, and makes one result of them.
func (r *PostgresClusterReconciler) runLanes(ctx context.Context, s *scope) (ctrl.Result, error) {
	children := r.runLane(ctx, s, r.childrenLane())
	ha := r.runLane(ctx, s, r.haLane())
	ends := []laneEnd{children, ha, r.runLane(ctx, s, r.catalogLane())}
	if children.through() && ha.through() {
		ends = append(ends, r.runLane(ctx, s, r.followLane()))
	}
	var err error
	for _, end := range ends {
		err = errors.Join(err, end.err)
	}
	if err != nil && urgent(ha.stopped) {
		// A failover or switchover steps every second; the error's backoff (up to minutes)
		// must not slow it down. The error is in the status and the log, and is tried again
		// at the HA lane's pace.
		logf.FromContext(ctx).Error(err, "reconcile error; the HA lane goes on", "retryAfter", ha.stopped.after)
		return ctrl.Result{RequeueAfter: ha.stopped.after}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	return soonest(r, ends), nil
}

// urgent: the HA lane is in the middle of something that moves on within seconds.
func urgent(st *stop) bool {
	return st != nil && st.retry && st.after > 0 && st.after <= settlingInterval
}

// soonest is when the first lane that asked to look again wants to; zero when none did.
func soonest(r *PostgresClusterReconciler, ends []laneEnd) ctrl.Result {
	var result ctrl.Result
	for _, end := range ends {
		if end.stopped == nil || !end.stopped.retry {
			continue
		}
		after := end.stopped.after
		if after == 0 {
			after = r.notYet().RequeueAfter
		}
		result.RequeueAfter = sooner(result.RequeueAfter, after)
	}
	return result
}

// sooner is the earlier of two requeue delays, where zero means none.
func sooner(a, b time.Duration) time.Duration {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// runLane runs stages in order until one stops or fails, and records why in the scope: the
// first failure is kept (it is what Degraded says), a later lane's wait replaces an earlier's
// (what the HA lane waits for is what the cluster is doing).
func (r *PostgresClusterReconciler) runLane(ctx context.Context, s *scope, stages []stage) laneEnd {
	log := logf.FromContext(ctx)
	for _, st := range stages {
		stopped, err := st.run(ctx, s)
		if refusal := refusalOf(err, r.refusalBackoff()); refusal != nil {
			stopped, err = refusal, nil
		}
		if err != nil {
			recordStage(st.name, "error")
			if s.failure == nil {
				s.failure = &reasonMessage{"ReconcileError", "stage " + st.name + ": " + err.Error()}
			}
			return laneEnd{err: fmt.Errorf("stage %s: %w", st.name, err)}
		}
		if stopped == nil {
			recordStage(st.name, "ok")
			continue
		}
		if stopped.failed {
			recordStage(st.name, "invalid")
			if s.failure == nil {
				s.failure = &stopped.reasonMessage
			}
			log.Info("stopped on invalid input", "stage", st.name, "reason", stopped.reason)
		} else {
			recordStage(st.name, "waiting")
			s.waiting = &stopped.reasonMessage
			log.V(1).Info("waiting", "stage", st.name, "reason", stopped.reason)
		}
		return laneEnd{stopped: stopped}
	}
	return laneEnd{}
}
