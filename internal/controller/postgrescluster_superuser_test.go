package controller

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// An upgrade to 0.4.0 must lock no client out: a cluster made before keeps the superuser's
// network access while spec.enableSuperuserAccess is unset; a new one starts without it.
func TestSuperuserAccess(t *testing.T) {
	statefulSet := func(annotations map[string]string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	current := map[string]string{pgbuilder.PostgresMajorAnnotation: "17"}
	for _, tc := range []struct {
		name     string
		recorded bool
		live     *appsv1.StatefulSet
		spec     *bool
		legacy   bool
		want     bool
	}{
		{name: "a new cluster", want: false},
		{name: "a new cluster's StatefulSet", live: statefulSet(current), want: false},
		{name: "a new cluster that asks for it", live: statefulSet(current), spec: ptr.To(true), want: true},
		{name: "a StatefulSet of 0.3.0", live: statefulSet(nil), legacy: true, want: true},
		{name: "a legacy cluster that turns it off", live: statefulSet(nil), spec: ptr.To(false), legacy: true, want: false},
		{name: "recorded in the status, its StatefulSet being replaced", recorded: true, legacy: true, want: true},
		{name: "recorded on the StatefulSet, the status lost", legacy: true, want: true,
			live: statefulSet(map[string]string{pgbuilder.PostgresMajorAnnotation: "15", legacySuperuserAccessAnnotation: "true"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &pgv1.PostgresCluster{Spec: pgv1.PostgresClusterSpec{EnableSuperuserAccess: tc.spec},
				Status: pgv1.PostgresClusterStatus{LegacySuperuserAccess: tc.recorded}}
			legacy := isLegacySuperuserAccess(c, tc.live)
			if legacy != tc.legacy {
				t.Errorf("legacy %v, want %v", legacy, tc.legacy)
			}
			resolved := withSuperuserAccess(c, legacy)
			if got := ptr.Deref(resolved.Spec.EnableSuperuserAccess, false); got != tc.want {
				t.Errorf("superuser access %v, want %v", got, tc.want)
			}
			if c.Spec.EnableSuperuserAccess != tc.spec {
				t.Error("the cluster's own spec was changed")
			}
		})
	}
}
