package controller

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The primary Leases are watched, but a renewal wakes no reconcile: the event only tells this
// process when it saw each Lease change (a lapse is measured from there). A watchdog wakes the
// cluster whose Lease stops being renewed. That is how a primary on a lost node is noticed:
// its kubelet can report nothing, and the node controller marks its pod unready only after its
// grace period (40 s and more).

// leaseAlarmAfter: a renewal missed, by a second. A false alarm costs one reconcile that asks
// the agents and writes nothing.
const leaseAlarmAfter = agentapi.LeaseRenewInterval + time.Second

// leaseWatchHandler records each Lease version it sees and enqueues nothing for it. A deleted
// Lease is forgotten and its cluster reconciled, which creates it again.
func (r *PostgresClusterReconciler) leaseWatchHandler() handler.TypedEventHandler[*coordinationv1.Lease, reconcile.Request] {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.TypedFuncs[*coordinationv1.Lease, reconcile.Request]{
		CreateFunc: func(_ context.Context, e event.TypedCreateEvent[*coordinationv1.Lease], _ queue) {
			r.noteWatchedLease(e.Object)
		},
		UpdateFunc: func(_ context.Context, e event.TypedUpdateEvent[*coordinationv1.Lease], _ queue) {
			r.noteWatchedLease(e.ObjectNew)
		},
		DeleteFunc: func(_ context.Context, e event.TypedDeleteEvent[*coordinationv1.Lease], q queue) {
			if uid, cluster, ok := leaseCluster(e.Object); ok {
				r.leases().forget(uid)
				q.Add(reconcile.Request{NamespacedName: cluster})
			}
		},
	}
}

func (r *PostgresClusterReconciler) noteWatchedLease(lease *coordinationv1.Lease) {
	if uid, cluster, ok := leaseCluster(lease); ok {
		r.leases().watched(uid, cluster, lease.ResourceVersion, leaseHolder(lease), time.Now())
	}
}

// leaseCluster is the cluster a primary Lease belongs to, by its controller reference.
func leaseCluster(lease *coordinationv1.Lease) (types.UID, types.NamespacedName, bool) {
	owner := metav1.GetControllerOf(lease)
	if owner == nil || owner.APIVersion != pgv1.GroupVersion.String() || owner.Kind != "PostgresCluster" {
		return "", types.NamespacedName{}, false
	}
	return owner.UID, types.NamespacedName{Namespace: lease.Namespace, Name: owner.Name}, true
}

// alarmStaleLeases wakes, once per Lease version, each cluster whose held Lease this process
// has seen unchanged for leaseAlarmAfter. It runs on the leader only.
func (r *PostgresClusterReconciler) alarmStaleLeases(ctx context.Context) error {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-ticker.C:
			for _, key := range r.leases().stale(now) {
				select {
				case r.leaseAlarms <- event.TypedGenericEvent[types.NamespacedName]{Object: key}:
				case <-ctx.Done():
					return nil
				}
			}
		}
	}
}

// enqueueAlarm turns an alarm into a reconcile of its cluster.
var enqueueAlarm = handler.TypedFuncs[types.NamespacedName, reconcile.Request]{
	GenericFunc: func(_ context.Context, e event.TypedGenericEvent[types.NamespacedName], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.Add(reconcile.Request{NamespacedName: e.Object})
	},
}
