package controller

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

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
