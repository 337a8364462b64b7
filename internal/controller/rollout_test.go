package controller

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

func TestOutdatedPods(t *testing.T) {
	pod := func(name, role, revision string) corev1.Pod {
		p := testPod(name, role, true)
		p.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
		return p
	}
	sts := &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{UpdateRevision: "new"}}
	pods := []corev1.Pod{pod("db-0", pgbuilder.RolePrimary, "old"), pod("db-1", pgbuilder.RoleReplica, "old"),
		pod("db-2", pgbuilder.RoleReplica, "new"), pod("db-10", pgbuilder.RoleReplica, "old")}
	if got := outdatedPods(sts, pods); !slices.Equal(got, []string{"db-10", "db-1", "db-0"}) {
		t.Errorf("outdated %v, want the replicas from the highest ordinal, then the primary", got)
	}
	if got := outdatedPods(&appsv1.StatefulSet{}, pods); got != nil {
		t.Errorf("no update revision yet: %v", got)
	}
}

// A pod being deleted holds the roll back: outdated, it is the roll's own replacement; updated,
// the next outdated one waits for it all the same.
func TestTerminatingPod(t *testing.T) {
	sts := &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{UpdateRevision: "new"}}
	pod := func(name, revision string, deleting bool) corev1.Pod {
		p := testPod(name, pgbuilder.RoleReplica, true)
		p.Labels[appsv1.ControllerRevisionHashLabelKey] = revision
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Now()}
		}
		return p
	}
	for _, tc := range []struct {
		pods         []corev1.Pod
		name         string
		wantOutdated bool
	}{
		{[]corev1.Pod{pod("db-0", "old", false), pod("db-1", "new", false)}, "", false},
		{[]corev1.Pod{pod("db-0", "old", false), pod("db-2", "old", true)}, "db-2", true},
		{[]corev1.Pod{pod("db-0", "old", false), pod("db-1", "new", true)}, "db-1", false},
	} {
		name, outdated := terminatingPod(sts, tc.pods)
		if name != tc.name || outdated != tc.wantOutdated {
			t.Errorf("terminatingPod = %q, %t; want %q, %t", name, outdated, tc.name, tc.wantOutdated)
		}
	}
}

// After the last outdated pod went, the phase stays Upgrading until its replacement is ready;
// a cluster that was not upgrading is not held.
func TestWaitForReplacement(t *testing.T) {
	for _, tc := range []struct {
		name  string
		phase pgv1.Phase
		pods  []corev1.Pod
		wait  bool
	}{
		{"replacement not created yet", pgv1.PhaseUpgrading, []corev1.Pod{testPod("db-1", pgbuilder.RolePrimary, true)}, true},
		{"replacement starting", pgv1.PhaseUpgrading, []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RolePrimary, true)}, true},
		{"replacement ready, not streaming yet", pgv1.PhaseUpgrading, []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RolePrimary, true)}, true},
		{"replacement streaming", pgv1.PhaseUpgrading, []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, true), testPod("db-1", pgbuilder.RolePrimary, true)}, false},
		{"not upgrading", pgv1.PhaseReady, []corev1.Pod{testPod("db-0", pgbuilder.RoleReplica, false), testPod("db-1", pgbuilder.RolePrimary, true)}, false},
	} {
		cluster := &pgv1.PostgresCluster{Spec: pgv1.PostgresClusterSpec{Instances: 2}, Status: pgv1.PostgresClusterStatus{Phase: tc.phase}}
		s := &scope{cluster: cluster, observed: &observed{Observed: ha.Observed{Pods: tc.pods, Reports: map[string]*agentapi.Status{
			"db-1": {Role: agentapi.RolePrimary}, "db-0": {Role: agentapi.RoleReplica, Streaming: tc.name == "replacement streaming"}}}},
			primary: "db-1", statefulSet: &appsv1.StatefulSet{Status: appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: int32(len(tc.pods))}}}
		got := waitForReplacement(s)
		if (got != nil) != tc.wait {
			t.Errorf("%s: stop %+v, want waiting %t", tc.name, got, tc.wait)
		}
		if got != nil && got.reason != reasonRollingUpdate {
			t.Errorf("%s: reason %s", tc.name, got.reason)
		}
	}
}

// The reconcile that replaces a pod decides the status from what it saw before: the phase says
// Upgrading, never Ready, so nobody mistakes the moment for the end of the roll.
func TestPhaseWhileUpdating(t *testing.T) {
	ready := health{desired: 2, instances: 2, readyInstances: 2, primary: "db-0", primaryReady: true,
		primaryWritable: true, streamingReplicas: 1}
	for reason, want := range map[string]pgv1.Phase{reasonRollingUpdate: pgv1.PhaseUpgrading, reasonUpdateWaiting: pgv1.PhaseUpgrading, "": pgv1.PhaseReady} {
		o := summary{health: ready}
		if reason != "" {
			o.waiting = &reasonMessage{reason, "replacing db-1"}
		}
		if got := phase(o); got != want {
			t.Errorf("waiting %q: phase %s, want %s", reason, got, want)
		}
	}
}
