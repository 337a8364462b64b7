package controller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/controller/agentclient"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

// failoverStep runs the failover stage once over pods, the agents answering with reports (an
// instance without one does not answer), and keeps what it decided in the cluster's status.
func failoverStep(t *testing.T, r *PostgresClusterReconciler, cluster *pgv1.PostgresCluster, pods []corev1.Pod, reports map[string]*agentapi.Status) *stop {
	t.Helper()
	failures := map[string]string{}
	for _, pod := range pods {
		if reports[pod.Name] == nil {
			failures[pod.Name] = "timeout"
		}
	}
	s := newScope(cluster)
	s.observed = &observed{Observed: ha.Observed{Pods: pods, Reports: reports, Failures: failures}}
	st, err := r.failover(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Status.TargetPrimary, cluster.Status.FailoverReason = s.targetPrimary, s.failoverReason
	return st
}

// reconcilerWithLease talks to fake agents (by pod name) and to a fake API holding only the
// cluster's primary Lease, naming db-0.
func reconcilerWithLease(cluster *pgv1.PostgresCluster) (*PostgresClusterReconciler, *fakeAgents, client.Client) {
	agents := newFakeAgents()
	leases := fake.NewClientBuilder().WithObjects(pgbuilder.BuildPrimaryLease(cluster, "db-0", metav1.NowMicro())).Build()
	return &PostgresClusterReconciler{Client: leases, APIReader: leases, Agents: agents,
		AgentAddress: func(p *corev1.Pod) string { return p.Name }}, agents, leases
}

// A failover goes as far as it can in one reconcile: choose the replica with the most WAL, make
// sure the old primary is fenced, grant the target the Lease, promote it; the next reconcile
// records it.
func TestFailoverSteps(t *testing.T) {
	cluster := testCluster(3)
	cluster.Status.CurrentPrimary = "db-0"
	r, agents, leases := reconcilerWithLease(cluster)
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RoleReplica, true),
		testPod("db-2", pgbuilder.RoleReplica, true)}
	reconcile := func(reports map[string]*agentapi.Status) *stop {
		t.Helper()
		s := newScope(cluster)
		s.statefulSet = &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2}}
		s.observed = &observed{Observed: ha.Observed{Pods: pods, Reports: reports, Failures: map[string]string{}}}
		st, err := r.failover(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		cluster.Status.TargetPrimary, cluster.Status.FailoverReason = s.targetPrimary, s.failoverReason
		return st
	}
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Timeline: 1}
	behind, ahead := replica("0/3000000", "0/3000000", false), replica("0/3000100", "0/3000000", false)
	failovers := primaryChanges.WithLabelValues(cluster.Namespace, cluster.Name, "failover")
	promotions := agentclient.Requests.WithLabelValues("promote", "ok")
	failoversBefore, promotionsBefore := testutil.ToFloat64(failovers), testutil.ToFloat64(promotions)

	if st := reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": behind, "db-2": ahead}); st != nil {
		t.Fatalf("a healthy primary: %+v", st)
	}
	// db-0's agent answers but is not primary-ready: it is not yet a failure while its pod is
	// ready; once it says it is fenced, it is.
	fenced := &agentapi.Status{Fenced: true, FencedReason: "postgres exited"}
	agents.reports["db-1"], agents.reports["db-2"] = behind, ahead
	st := reconcile(map[string]*agentapi.Status{"db-0": fenced, "db-1": behind, "db-2": ahead})
	if st == nil || st.reason != "FailingOver" || cluster.Status.TargetPrimary != "db-2" {
		t.Fatalf("start: %+v, target %q (want db-2, the most WAL received)", st, cluster.Status.TargetPrimary)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-2" {
		t.Fatalf("lease names %q after the fence", holder)
	}
	if len(agents.detached) != 0 {
		t.Errorf("detached %v from a primary whose agent answers fenced", agents.detached)
	}
	if !slices.Equal(agents.promoted, []string{"db-2"}) || !slices.Equal(agents.promotedSlots, []string{"db_0", "db_1"}) {
		t.Fatalf("promote: %v with slots %v", agents.promoted, agents.promotedSlots)
	}
	if st := reconcile(map[string]*agentapi.Status{"db-0": fenced, "db-1": behind, "db-2": {Role: agentapi.RolePrimary, Timeline: 2}}); st != nil ||
		cluster.Status.TargetPrimary != "" || cluster.Status.FailoverReason != "" {
		t.Fatalf("complete: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if got := testutil.ToFloat64(failovers) - failoversBefore; got != 1 {
		t.Errorf("pgpilot_primary_changes_total{kind=failover} grew by %v, want 1", got)
	}
	if got := testutil.ToFloat64(promotions) - promotionsBefore; got != 1 {
		t.Errorf("pgpilot_agent_requests_total{operation=promote,outcome=ok} grew by %v, want 1", got)
	}
}

// An unreachable primary is fenced only by the Lease lapsing: no grant before LeaseExpiry.
func TestFailoverWaitsForAnUnreachablePrimarysLease(t *testing.T) {
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary = "db-0"
	r, agents, leases := reconcilerWithLease(cluster)
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RoleReplica, true)}
	for range 3 {
		s := newScope(cluster)
		s.observed = &observed{Observed: ha.Observed{Pods: pods, Reports: map[string]*agentapi.Status{"db-1": replica("0/3000000", "0/3000000", false)},
			Failures: map[string]string{"db-0": "timeout"}}}
		agents.reports["db-1"] = s.observed.Reports["db-1"]
		st, err := r.failover(context.Background(), s)
		if err != nil || st == nil || st.reason != "FailingOver" {
			t.Fatalf("%+v %v", st, err)
		}
		cluster.Status.TargetPrimary, cluster.Status.FailoverReason = s.targetPrimary, s.failoverReason
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-0" || len(agents.fenced) != 0 {
		t.Fatalf("lease granted to %q (fence orders %v) while the holder's lease had not lapsed", holder, agents.fenced)
	}
}

// An unreachable primary whose Lease lapsed is taken as fenced once every other instance has
// been detached from it for PeersGoneWait, by their own answers: each reconcile orders the
// detach again (keeping the hold), the grant waits for the least of their times, and the
// standbys that are not promoted stream again at once.
func TestUnreachablePrimaryIsFailedOverOnceEveryStandbyDetached(t *testing.T) {
	cluster := testCluster(3)
	cluster.Status.CurrentPrimary = "db-0"
	r, agents, leases := reconcilerWithLease(cluster)
	lease := primaryLeaseIn(t, leases, cluster)
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RoleReplica, true),
		testPod("db-2", pgbuilder.RoleReplica, true)}
	for i := range pods {
		if err := leases.Create(context.Background(), pods[i].DeepCopy()); err != nil {
			t.Fatal(err)
		}
	}
	agents.reports["db-1"], agents.reports["db-2"] = replica("0/3000100", "0/3000000", true), replica("0/3000000", "0/3000000", true)
	step := func(reports map[string]*agentapi.Status) *stop {
		t.Helper()
		return failoverStep(t, r, cluster, pods, reports)
	}
	answering := map[string]*agentapi.Status{"db-1": agents.reports["db-1"], "db-2": agents.reports["db-2"]}
	// A holder that still renews its Lease reaches the API server: no standby is detached from
	// it, which would only hold its commits back.
	r.leases().observe(cluster.UID, lease.ResourceVersion, time.Now())
	if st := step(answering); st == nil || !strings.Contains(st.message, "renewed its lease") || len(agents.detached) != 0 {
		t.Fatalf("a holder renewing its lease: %+v, detached %v", st, agents.detached)
	}
	r.leases().forget(cluster.UID)
	r.leases().observe(cluster.UID, lease.ResourceVersion, time.Now().Add(-agentapi.LeaseExpiry)) // unrenewed since
	agents.detachedMillis = (agentapi.PeersGoneWait - time.Second).Milliseconds()
	if st := step(answering); st == nil || !strings.Contains(st.message, "waiting 8s") || cluster.Status.TargetPrimary != "db-1" {
		t.Fatalf("detached for less than PeersGoneWait: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if want := map[string]string{"db-1": "db-0", "db-2": "db-0"}; !maps.Equal(agents.detached, want) || len(agents.attached) != 0 {
		t.Fatalf("detached %v (want %v), attached %v", agents.detached, want, agents.attached)
	}
	// db-2 does not answer this time: it may stream again, whatever db-1 says.
	agents.detachedMillis = agentapi.PeersGoneWait.Milliseconds()
	if st := step(map[string]*agentapi.Status{"db-1": agents.reports["db-1"]}); st == nil || !strings.Contains(st.message, "db-2 may still stream") {
		t.Fatalf("a standby not answering: %+v", st)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-0" {
		t.Fatalf("lease granted to %q while a standby may stream from db-0", holder)
	}
	step(answering)
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-1" || !slices.Equal(agents.promoted, []string{"db-1"}) {
		t.Fatalf("lease %q, promoted %v: want db-1 granted and promoted", holder, agents.promoted)
	}
	if !slices.Equal(agents.attached, []string{"db-2"}) {
		t.Errorf("attached %v after the grant, want db-2 (db-1 is promoted)", agents.attached)
	}
	promoted := &corev1.Pod{}
	if err := leases.Get(context.Background(), client.ObjectKey{Name: "db-1"}, promoted); err != nil || promoted.Labels[pgbuilder.RoleLabel] != pgbuilder.RolePrimary {
		t.Errorf("the promoted pod's role label is %q (%v): the -rw Service waits for the next reconcile", promoted.Labels[pgbuilder.RoleLabel], err)
	}
}

// A primary on a lost node: its pod stays ready in the API, its agent does not answer and its
// Lease is not renewed. One failed question is no failure (a slow answer on a loaded node); the
// second in a row, with the Lease that old, starts the failover.
func TestSilentPrimaryWithAStaleLeaseIsFailedOverOnTheSecondAsk(t *testing.T) {
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary = "db-0"
	r, agents, leases := reconcilerWithLease(cluster)
	lease := primaryLeaseIn(t, leases, cluster)
	r.leases().observe(cluster.UID, lease.ResourceVersion, time.Now().Add(-leaseAlarmAfter))
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RoleReplica, true)}
	agents.reports["db-1"] = replica("0/3000000", "0/3000000", true)
	step := func(reports map[string]*agentapi.Status) *stop {
		t.Helper()
		return failoverStep(t, r, cluster, pods, reports)
	}
	step(map[string]*agentapi.Status{"db-0": {Role: agentapi.RolePrimary}, "db-1": agents.reports["db-1"]}) // heard as the primary
	if st := step(map[string]*agentapi.Status{"db-1": agents.reports["db-1"]}); st == nil || st.reason != "PrimaryNotAnswering" || cluster.Status.TargetPrimary != "" {
		t.Fatalf("the first silence: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	time.Sleep(10 * time.Millisecond)
	if st := step(map[string]*agentapi.Status{"db-1": agents.reports["db-1"]}); st == nil || st.reason != "FailingOver" || cluster.Status.TargetPrimary != "db-1" {
		t.Fatalf("the second silence: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if agents.detached["db-1"] != "db-0" {
		t.Errorf("detached %v in the reconcile that started the failover, want db-1 from db-0", agents.detached)
	}
}

// With no replica to take over, a fenced primary gets the Lease back and starts again: a
// single instance after its pod restarted or its PostgreSQL crashed.
func TestFencedPrimaryWithoutCandidateRestarts(t *testing.T) {
	cluster := testCluster(1)
	cluster.Status.CurrentPrimary = "db-0"
	r, _, leases := reconcilerWithLease(cluster)
	s := newScope(cluster)
	s.observed = &observed{Observed: ha.Observed{Pods: []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false)},
		Reports: map[string]*agentapi.Status{"db-0": {Fenced: true, FencedReason: "the primary lease names no instance"}}}}
	st, err := r.failover(context.Background(), s)
	if err != nil || st == nil || st.reason != "PrimaryRestarting" {
		t.Fatalf("%+v %v", st, err)
	}
	lease := primaryLeaseIn(t, leases, cluster)
	if leaseHolder(lease) != "db-0" || *lease.Spec.LeaseTransitions != 2 {
		t.Errorf("lease %+v, want granted again to db-0", lease.Spec)
	}
}

// A primary that answers again before the Lease moved stays the primary.
func TestFailoverCancelledWhenThePrimaryComesBack(t *testing.T) {
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary, cluster.Status.TargetPrimary, cluster.Status.FailoverReason = "db-0", "db-1", "the primary db-0 is being deleted"
	r, agents, leases := reconcilerWithLease(cluster)
	s := newScope(cluster)
	s.observed = &observed{Observed: ha.Observed{Pods: []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RoleReplica, true)},
		Reports: map[string]*agentapi.Status{"db-0": {Role: agentapi.RolePrimary}, "db-1": replica("0/1", "0/1", true)}}}
	if st, err := r.failover(context.Background(), s); err != nil || st != nil || s.targetPrimary != "" || s.failoverReason != "" {
		t.Fatalf("%+v %v, target %q", st, err, s.targetPrimary)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-0" || len(agents.promoted) != 0 || len(agents.fenced) != 0 {
		t.Errorf("lease %q, promoted %v, fenced %v", holder, agents.promoted, agents.fenced)
	}
}

// A primary whose pod pgpilot replaces in place (primaryUpdateMethod restart) is waited for,
// not failed over; back and fenced (it gave the Lease up on shutdown), it gets the Lease again.
func TestPrimaryReplacedInPlaceHoldsFailover(t *testing.T) {
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary = "db-0"
	replaced := metav1.Now()
	cluster.Status.PrimaryReplacedAt = &replaced
	r, agents, leases := reconcilerWithLease(cluster)
	s := newScope(cluster)
	s.observed = &observed{Observed: ha.Observed{Pods: []corev1.Pod{testPod("db-1", pgbuilder.RoleReplica, true)},
		Reports: map[string]*agentapi.Status{"db-1": replica("0/1", "0/1", false)}}}
	st, err := r.failover(context.Background(), s)
	if err != nil || st == nil || st.reason != reasonPrimaryReplacing || s.targetPrimary != "" {
		t.Fatalf("pod gone while replaced: %+v %v, target %q", st, err, s.targetPrimary)
	}
	s = newScope(cluster)
	s.observed = &observed{Observed: ha.Observed{Pods: []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RoleReplica, true)},
		Reports: map[string]*agentapi.Status{"db-0": {Fenced: true, FencedReason: "the primary lease names no instance"}, "db-1": replica("0/1", "0/1", false)}}}
	if st, err := r.failover(context.Background(), s); err != nil || st == nil || st.reason != "PrimaryRestarting" {
		t.Fatalf("back and fenced: %+v %v", st, err)
	}
	if holder := leaseHolderIn(t, leases, cluster); holder != "db-0" || len(agents.promoted) != 0 {
		t.Errorf("lease %q, promoted %v", holder, agents.promoted)
	}
}

// A frozen primary (its agent answers, its PostgreSQL does not) is failed over like a fenced
// one, even while the kubelet still finds its pod ready: the operator orders the fence, which
// kills it, then grants the Lease. It is not taken as "back" while it is frozen.
func TestFrozenPrimaryIsFencedOnOrderAndFailedOver(t *testing.T) {
	cluster := testCluster(2)
	cluster.Status.CurrentPrimary = "db-0"
	r, agents, leases := reconcilerWithLease(cluster)
	// Both pods ready; labelled replica already, as after the fence's relabelling (the fake API
	// holds no pods).
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RoleReplica, true)}
	frozen := &agentapi.Status{Role: agentapi.RolePrimary, Unresponsive: "PostgreSQL has not answered the agent's local queries for 6s"}
	agents.reports["db-0"], agents.reports["db-1"] = frozen, replica("0/3000000", "0/3000000", false)
	if st := failoverStep(t, r, cluster, pods, map[string]*agentapi.Status{"db-0": frozen, "db-1": agents.reports["db-1"]}); st == nil || st.reason != "FailingOver" || cluster.Status.TargetPrimary != "db-1" {
		t.Fatalf("start: %+v, target %q", st, cluster.Status.TargetPrimary)
	}
	if !slices.Equal(agents.fenced, []string{"db-0"}) || leaseHolderIn(t, leases, cluster) != "db-1" {
		t.Fatalf("fence orders %v, lease %q; want db-0 fenced on order, then the lease granted to db-1", agents.fenced, leaseHolderIn(t, leases, cluster))
	}
	if !slices.Equal(agents.promoted, []string{"db-1"}) {
		t.Fatalf("promoted %v", agents.promoted)
	}
}
