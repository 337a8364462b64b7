package builder

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// ControllerReference makes the cluster the controlling owner, so garbage collection removes
// what pgpilot created when the cluster goes.
func ControllerReference(c *pgv1.PostgresCluster) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         pgv1.GroupVersion.String(),
		Kind:               "PostgresCluster",
		Name:               c.Name,
		UID:                c.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// ownerReference is ControllerReference for apply configurations.
func ownerReference(c *pgv1.PostgresCluster) *metav1ac.OwnerReferenceApplyConfiguration {
	ref := ControllerReference(c)
	return metav1ac.OwnerReference().
		WithAPIVersion(ref.APIVersion).
		WithKind(ref.Kind).
		WithName(ref.Name).
		WithUID(ref.UID).
		WithController(*ref.Controller).
		WithBlockOwnerDeletion(*ref.BlockOwnerDeletion)
}
