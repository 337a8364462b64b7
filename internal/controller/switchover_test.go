package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// The lease is granted before the promotion.
func leaseHolderIn(t *testing.T, c client.Reader, cluster *pgv1.PostgresCluster) string {
	t.Helper()
	return leaseHolder(primaryLeaseIn(t, c, cluster))
}

// primaryLeaseIn is cluster's primary Lease as c has it.
func primaryLeaseIn(t *testing.T, c client.Reader, cluster *pgv1.PostgresCluster) *coordinationv1.Lease {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.PrimaryLeaseName(cluster)}, lease); err != nil {
		t.Fatal(err)
	}
	return lease
}

// switchoverTest is a cluster of db-0 (the primary) and replicas, annotated for a switchover
// to db-1, with fake agents and the primary Lease. Its reconcile runs the switchover stage
// once over ready pods and the agents' reports, and keeps in the cluster's status what the
// status write would, for the next reconcile.
type switchoverTest struct {
	cluster *pgv1.PostgresCluster
	agents  *fakeAgents
	leases  client.Client
	r       *PostgresClusterReconciler
	pods    []corev1.Pod
	// last is the scope of the last reconcile.
	last *scope
}

func newSwitchoverTest(instances int32) *switchoverTest {
	cluster := testCluster(instances)
	r, agents, leases := reconcilerWithLease(cluster)
	cluster.Annotations = map[string]string{pgv1.SwitchoverAnnotation: "db-1"}
	cluster.Status.CurrentPrimary = "db-0"
	var pods []corev1.Pod
	for i := range int(instances) {
		pods = append(pods, testPod(pgbuilder.InstancePodName(cluster, i), pgbuilder.RoleReplica, true))
	}
	return &switchoverTest{cluster: cluster, agents: agents, leases: leases, r: r, pods: pods}
}

func (st *switchoverTest) reconcile(t *testing.T, reports map[string]*agentapi.Status) *stop {
	t.Helper()
	cluster := st.cluster
	s := newScope(cluster)
	s.statefulSet = &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: cluster.Spec.Instances, ReadyReplicas: cluster.Spec.Instances}}
	s.observed = &observed{Observed: ha.Observed{Pods: st.pods, Reports: reports}}
	result, err := st.r.switchover(context.Background(), s)
	st.last = s
	if err != nil {
		t.Fatal(err)
	}
	if s.targetPrimary != cluster.Status.TargetPrimary {
		cluster.Status.TargetPrimaryTimestamp = &metav1.Time{Time: time.Now()}
	}
	cluster.Status.TargetPrimary, cluster.Status.SwitchoverLSN = s.targetPrimary, s.switchoverLSN
	cluster.Status.SwitchoverRequest = s.switchoverRequest
	return result
}

func streamingReplica(replayed string) *agentapi.Status {
	return &agentapi.Status{Role: agentapi.RoleReplica, Streaming: true, ReplayLSN: replayed, Timeline: 1}
}

// A switchover moves on one step per reconcile, from what was observed and what the status
// recorded. The pods carry no primary label here, as after the fence, so no API write is due.
func TestSwitchoverSteps(t *testing.T) {
	st := newSwitchoverTest(2)
	cluster, agents, leases := st.cluster, st.agents, st.leases
	reconcile := func(reports map[string]*agentapi.Status) *stop { t.Helper(); return st.reconcile(t, reports) }
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Timeline: 1}
	replica := streamingReplica

	if stopped := reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": {Role: agentapi.RoleReplica}}); stopped != nil ||
		st.last.waiting == nil || st.last.waiting.reason != "SwitchoverWaiting" {
		t.Fatalf("a target that does not stream: %+v, waiting %+v; want SwitchoverWaiting, and failover not held up", stopped, st.last.waiting)
	}
	if st := reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": replica("0/3000000")}); st == nil || st.reason != "SwitchingOver" || cluster.Status.TargetPrimary != "db-1" {
		t.Fatalf("start: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": replica("0/3000000")})
	if !slices.Equal(agents.demoted, []string{"db-0"}) || cluster.Status.SwitchoverLSN != "0/3000100" {
		t.Fatalf("demote: %v, LSN %q", agents.demoted, cluster.Status.SwitchoverLSN)
	}
	demoted := replica("0/3000100")
	reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": replica("0/3000000")})
	if len(agents.promoted) != 0 {
		t.Fatalf("promoted %v before the target replayed the old primary's last WAL", agents.promoted)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-0" {
		t.Fatalf("lease granted to %q before the target caught up", holder)
	}
	reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": replica("0/3000108")})
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-1" {
		t.Fatalf("promoted while the lease names %q", holder)
	}
	if !slices.Equal(agents.promoted, []string{"db-1"}) || !slices.Equal(agents.promotedSlots, []string{"db_0"}) {
		t.Fatalf("promote: %v with slots %v", agents.promoted, agents.promotedSlots)
	}
	if st := reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": {Role: agentapi.RolePrimary, Timeline: 2}}); st != nil || cluster.Status.TargetPrimary != "" {
		t.Fatalf("completion: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if len(agents.demoted) != 1 || len(agents.promoted) != 1 {
		t.Errorf("role changes repeated: demoted %v, promoted %v", agents.demoted, agents.promoted)
	}

	// The annotation asked for one switchover: after a failover back to db-0 it does nothing.
	cluster.Status.CurrentPrimary = "db-0"
	if st := reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": replica("0/3000200")}); st != nil || cluster.Status.TargetPrimary != "" {
		t.Fatalf("an acted-on annotation started another switchover: %+v, target %q", st, cluster.Status.TargetPrimary)
	}

	// Withdrawn before the demotion: cancelled, the primary stays.
	cluster.Status.CurrentPrimary = "db-1" // as decidePrimary records it
	cluster.Annotations[pgv1.SwitchoverAnnotation] = "db-0"
	reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": {Role: agentapi.RolePrimary, Timeline: 2}})
	if cluster.Status.TargetPrimary != "db-0" {
		t.Fatalf("a second switchover (back to db-0) did not start: target %q", cluster.Status.TargetPrimary)
	}
	delete(cluster.Annotations, pgv1.SwitchoverAnnotation)
	if st := reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": {Role: agentapi.RolePrimary, Timeline: 2}}); st != nil || cluster.Status.TargetPrimary != "" {
		t.Fatalf("withdrawn before the demotion: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if len(agents.demoted) != 1 {
		t.Errorf("a withdrawn switchover demoted: %v", agents.demoted)
	}

	cluster.Annotations = map[string]string{pgv1.SwitchoverAnnotation: "db-7"}
	if stopped := reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": primary}); stopped != nil ||
		st.last.switchoverProblem == nil || st.last.switchoverProblem.reason != "SwitchoverTargetUnknown" {
		t.Errorf("unknown target: %+v, problem %+v; want SwitchoverTargetUnknown, and failover not held up", stopped, st.last.switchoverProblem)
	}
}

// A target that missed the end of the old primary's WAL (its WAL receiver reconnecting when
// the primary was fenced: nothing serves that WAL to it) must not leave the cluster without a
// primary: after switchoverCatchUp the instance that has it all is promoted instead, another
// replica before the old primary.
func TestSwitchoverPromotesAnInstanceWithAllTheWALWhenTheTargetMissedTheEnd(t *testing.T) {
	st, reconcile := demotedForSwitchover(t)
	cluster, agents, leases := st.cluster, st.agents, st.leases
	replica := streamingReplica
	if cluster.Status.SwitchoverLSN != "0/3000100" {
		t.Fatalf("not demoted: %+v", cluster.Status)
	}
	missed := map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": {Role: agentapi.RoleReplica, ReplayLSN: "0/3000000", Timeline: 1},
		"db-2": replica("0/3000108")}
	if st := reconcile(missed); len(agents.promoted) != 0 || st == nil || st.reason != "SwitchingOver" {
		t.Fatalf("gave up on the target at once: promoted %v, %+v", agents.promoted, st)
	}

	cluster.Status.TargetPrimaryTimestamp = &metav1.Time{Time: time.Now().Add(-switchoverCatchUp - time.Second)}
	reconcile(missed)
	if !slices.Equal(agents.promoted, []string{"db-2"}) || cluster.Status.TargetPrimary != "db-2" {
		t.Fatalf("after %s: promoted %v, target %q; want db-2, which replayed all of db-0's WAL", switchoverCatchUp, agents.promoted, cluster.Status.TargetPrimary)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-2" {
		t.Fatalf("db-2 promoted while the lease names %q", holder)
	}
	if !slices.Equal(agents.promotedSlots, []string{"db_0", "db_1"}) {
		t.Errorf("slots for the followers: %v", agents.promotedSlots)
	}
}

// Once the target holds the Lease, it replayed all of the old primary's WAL: while it promotes
// (or, for a major upgrade, stops for pg_upgrade) its report may show no replay, and the
// switchover must wait for it however long that takes. Another target then would be a second
// primary: in CI a slow pg_upgrade had the old primary upgraded too, and the first fenced.
func TestSwitchoverKeepsATargetThatHoldsTheLease(t *testing.T) {
	st, reconcile := demotedForSwitchover(t)
	cluster, agents, leases := st.cluster, st.agents, st.leases
	replica := streamingReplica
	reconcile(map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": replica("0/3000108"), "db-2": replica("0/3000108")})
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-1" || !slices.Equal(agents.promoted, []string{"db-1"}) {
		t.Fatalf("after the catch-up: lease %q, promoted %v; want db-1", holder, agents.promoted)
	}

	cluster.Status.TargetPrimaryTimestamp = &metav1.Time{Time: time.Now().Add(-10 * switchoverCatchUp)}
	busy := map[string]*agentapi.Status{"db-0": replica("0/3000108"), "db-1": {Role: agentapi.RoleReplica, Timeline: 1}, "db-2": replica("0/3000108")}
	for range 3 {
		if stopped := reconcile(busy); stopped == nil || stopped.reason != "SwitchingOver" {
			t.Fatalf("while the target promotes: %+v", stopped)
		}
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-1" || cluster.Status.TargetPrimary != "db-1" || slices.Contains(agents.promoted, "db-0") || slices.Contains(agents.promoted, "db-2") {
		t.Fatalf("the target changed after it was given the lease: lease %q, target %q, promoted %v", holder, cluster.Status.TargetPrimary, agents.promoted)
	}
}

// demotedForSwitchover is a switchover of 3 instances from db-0 to db-1 run up to db-0's
// demotion, with its reconcile.
func demotedForSwitchover(t *testing.T) (*switchoverTest, func(map[string]*agentapi.Status) *stop) {
	st := newSwitchoverTest(3)
	reconcile := func(reports map[string]*agentapi.Status) *stop { t.Helper(); return st.reconcile(t, reports) }
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Timeline: 1}
	for range 2 {
		reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": streamingReplica("0/3000000"), "db-2": streamingReplica("0/3000000")})
	}
	return st, reconcile
}
