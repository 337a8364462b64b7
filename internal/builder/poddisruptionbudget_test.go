package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestBuildPodDisruptionBudget(t *testing.T) {
	pdb := toTyped[policyv1.PodDisruptionBudget](t, BuildPodDisruptionBudget(newCluster()))

	if pdb.Name != "db" || pdb.Namespace != "ns" {
		t.Errorf("name = %s/%s, want ns/db", pdb.Namespace, pdb.Name)
	}
	wantSpec := policyv1.PodDisruptionBudgetSpec{
		MaxUnavailable: ptr.To(intstr.FromInt32(1)),
		Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"postgres.pgpilot.io/cluster": "db"}},
	}
	if diff := cmp.Diff(wantSpec, pdb.Spec); diff != "" {
		t.Errorf("spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCommonLabels(), pdb.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, pdb.OwnerReferences); diff != "" {
		t.Errorf("owner references (-want +got):\n%s", diff)
	}
}
