package controller

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
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
