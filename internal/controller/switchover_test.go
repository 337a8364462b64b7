package controller

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

// The lease is granted before the promotion.
func leaseHolderIn(t *testing.T, c client.Reader, cluster *pgv1.PostgresCluster) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.PrimaryLeaseName(cluster)}, lease); err != nil {
		t.Fatal(err)
	}
	return leaseHolder(lease)
}

// A switchover moves on one step per reconcile, from what was observed and what the status
// recorded. The pods carry no primary label here, as after the fence, so no API write is due.
func TestSwitchoverSteps(t *testing.T) {
	cluster := testCluster(2)
	r, agents, leases := reconcilerWithLease(cluster)
	cluster.Annotations = map[string]string{pgv1.SwitchoverAnnotation: "db-1"}
	cluster.Status.CurrentPrimary = "db-0"
	pods := []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RoleReplica, true)}
	reconcile := func(reports map[string]*agentapi.Status) *stop {
		t.Helper()
		s := newScope(cluster)
		s.statefulSet = &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2}}
		s.observed = &observed{pods: pods, reports: reports}
		st, err := r.switchover(context.Background(), s)
		if err != nil {
			t.Fatal(err)
		}
		// What the status write would keep for the next reconcile.
		cluster.Status.TargetPrimary, cluster.Status.SwitchoverLSN = s.targetPrimary, s.switchoverLSN
		cluster.Status.SwitchoverRequest = s.switchoverRequest
		return st
	}
	primary := &agentapi.Status{Role: agentapi.RolePrimary, Timeline: 1}
	replica := func(replayed string) *agentapi.Status {
		return &agentapi.Status{Role: agentapi.RoleReplica, Streaming: true, ReplayLSN: replayed, Timeline: 1}
	}

	if st := reconcile(map[string]*agentapi.Status{"db-0": primary, "db-1": {Role: agentapi.RoleReplica}}); st == nil || st.reason != "SwitchoverWaiting" {
		t.Fatalf("a target that does not stream: %+v, want SwitchoverWaiting", st)
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
	if st := reconcile(map[string]*agentapi.Status{"db-0": demoted, "db-1": primary}); st == nil || st.reason != "SwitchoverTargetUnknown" || !st.failed {
		t.Errorf("unknown target: %+v", st)
	}
}

func TestParseLSN(t *testing.T) {
	for lsn, want := range map[string]uint64{"0/3000060": 0x3000060, "1/0": 1 << 32, "A/FF": 0xA<<32 | 0xFF} {
		if got, ok := parseLSN(lsn); !ok || got != want {
			t.Errorf("parseLSN(%q) = %x, %v", lsn, got, ok)
		}
	}
	for _, bad := range []string{"", "3000060", "x/1"} {
		if _, ok := parseLSN(bad); ok {
			t.Errorf("parseLSN(%q) accepted", bad)
		}
	}
}
