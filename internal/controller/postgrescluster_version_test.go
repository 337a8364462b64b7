package controller

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

func TestResolveMajor(t *testing.T) {
	annotated := func(major string) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{pgbuilder.PostgresMajorAnnotation: major}}}
	}
	legacy := &appsv1.StatefulSet{}
	for _, tc := range []struct {
		name     string
		spec     int32
		recorded int32
		live     *appsv1.StatefulSet
		want     int32
		refused  bool
	}{
		{name: "new cluster naming none gets the default", want: DefaultPostgresMajor},
		{name: "new cluster naming one gets it", spec: 18, want: 18},
		{name: "the recorded major stays when spec names none", recorded: 18, live: annotated("18"), want: 18},
		{name: "the StatefulSet's annotation before the status records it", live: annotated("15"), want: 15},
		{name: "a StatefulSet of a release before 0.4.0 is PostgreSQL 15", live: legacy, want: 15},
		{name: "naming the running major on a legacy cluster", spec: 15, live: legacy, want: 15},
		{name: "naming a higher major on a legacy cluster is an upgrade: the data stays 15 until it", spec: 17, live: legacy, want: 15},
		{name: "naming a higher major than recorded is an upgrade", spec: 18, recorded: 17, live: annotated("17"), want: 17},
		{name: "naming a lower major than recorded is refused", spec: 15, recorded: 17, live: annotated("17"), refused: true},
		{name: "the status wins over the annotation", recorded: 17, live: annotated("15"), want: 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &pgv1.PostgresCluster{Spec: pgv1.PostgresClusterSpec{PostgresVersion: tc.spec},
				Status: pgv1.PostgresClusterStatus{PostgresMajor: tc.recorded}}
			got, st := resolveMajor(c, tc.live)
			if tc.refused {
				if st == nil || st.reason != "PostgresVersionLowered" || !strings.Contains(st.message, "cannot move to an older major") {
					t.Fatalf("want a PostgresVersionLowered refusal, got %d %+v", got, st)
				}
				return
			}
			if st != nil || got != tc.want {
				t.Fatalf("resolveMajor = %d %+v, want %d", got, st, tc.want)
			}
		})
	}
}

func TestPostgresImage(t *testing.T) {
	r := &PostgresClusterReconciler{PostgresImages: map[int32]string{17: "ghcr.io/pgpilot/postgresql:17"}}
	c := &pgv1.PostgresCluster{}
	if image, st := r.postgresImage(c, 17); st != nil || image != "ghcr.io/pgpilot/postgresql:17" {
		t.Errorf("default of 17 = %q %+v", image, st)
	}
	if _, st := r.postgresImage(c, 18); st == nil || !strings.Contains(st.message, "RELATED_IMAGE_POSTGRES_18") {
		t.Errorf("no image of 18: %+v", st)
	}
	c.Spec.Image = "example.com/postgres:18.1"
	if image, st := r.postgresImage(c, 18); st != nil || image != c.Spec.Image {
		t.Errorf("spec.image = %q %+v", image, st)
	}
}

func TestSummarizeVersions(t *testing.T) {
	s := &scope{postgresMajor: 17, observed: &observed{Observed: ha.Observed{Reports: map[string]*agentapi.Status{
		"db-0": {Role: agentapi.RolePrimary, ServerVersion: "17.12"},
		"db-1": {Role: agentapi.RoleReplica, ServerVersion: "16.4",
			CollationMismatches: []agentapi.CollationMismatch{{Database: "app", Recorded: "2.36", Actual: "2.41"}}},
		"db-2": nil,
	}}}}
	v := summarizeVersions(s, "db-0")
	if v.running != "17.12" {
		t.Errorf("running = %q, want the primary's 17.12", v.running)
	}
	if v.mismatch == nil || v.mismatch.reason != "PostgresVersionMismatch" ||
		!strings.Contains(v.mismatch.message, "PostgreSQL 17") || !strings.Contains(v.mismatch.message, "db-1 runs 16.4") {
		t.Errorf("mismatch = %+v", v.mismatch)
	}
	if !strings.Contains(v.collations, "db-1: database app (recorded 2.36, now 2.41)") {
		t.Errorf("collations = %q", v.collations)
	}

	status := &pgv1.PostgresClusterStatus{}
	setVersions(status, versionSummary{major: 17}, 1)
	if status.PostgresMajor != 17 || meta.FindStatusCondition(status.Conditions, pgv1.ConditionCollationVersionMismatch) != nil {
		t.Errorf("no mismatch ever: %+v", status)
	}
	setVersions(status, v, 2)
	c := meta.FindStatusCondition(status.Conditions, pgv1.ConditionCollationVersionMismatch)
	if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "REINDEX") || status.PostgresVersion != "17.12" {
		t.Errorf("mismatch found: %+v %+v", c, status)
	}
	setVersions(status, versionSummary{major: 17}, 3)
	c = meta.FindStatusCondition(status.Conditions, pgv1.ConditionCollationVersionMismatch)
	if c == nil || c.Status != metav1.ConditionFalse || status.PostgresVersion != "17.12" {
		t.Errorf("mismatch resolved: %+v %+v", c, status)
	}
}
