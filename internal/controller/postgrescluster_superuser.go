package controller

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// legacySuperuserAccessAnnotation, on the StatefulSet, keeps the record that the cluster was
// created before pgpilot 0.4.0 beside status.legacySuperuserAccess: a status can be lost (a
// restore without it), and the StatefulSet can be replaced (larger volumes); not both at once.
const legacySuperuserAccessAnnotation = "postgres.pgpilot.io/legacy-superuser-access"

// isLegacySuperuserAccess tells whether the cluster was created before the superuser's network
// access could be turned off: recorded so, or running a StatefulSet of an earlier release
// (without the major annotation 0.4.0 added).
func isLegacySuperuserAccess(c *pgv1.PostgresCluster, live *appsv1.StatefulSet) bool {
	if c.Status.LegacySuperuserAccess {
		return true
	}
	if live == nil {
		return false
	}
	_, recorded := live.Annotations[legacySuperuserAccessAnnotation]
	_, current := live.Annotations[pgbuilder.PostgresMajorAnnotation]
	return recorded || !current
}

// withSuperuserAccess is the cluster as the configuration builders should see it: an unset
// spec.enableSuperuserAccess of a legacy cluster stays on, as it always was; else it is off.
func withSuperuserAccess(c *pgv1.PostgresCluster, legacy bool) *pgv1.PostgresCluster {
	if c.Spec.EnableSuperuserAccess != nil || !legacy {
		return c
	}
	resolved := c.DeepCopy()
	resolved.Spec.EnableSuperuserAccess = ptr.To(true)
	return resolved
}
