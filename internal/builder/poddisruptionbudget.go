package builder

import (
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// BuildPodDisruptionBudget lets voluntary disruptions (node drains) take one instance at a time.
func BuildPodDisruptionBudget(c *pgv1.PostgresCluster) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(PodDisruptionBudgetName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))))
}
