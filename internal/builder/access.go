package builder

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/utils/ptr"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// The instance agents reach the API server for one thing: the cluster's primary Lease, which
// says which of them may run as the primary (agentapi.LeaseName). Their ServiceAccount's Role
// allows reading and renewing that one Lease, nothing else.

// InstanceAccessName names the instances' ServiceAccount, Role and RoleBinding.
func InstanceAccessName(c *pgv1.PostgresCluster) string { return c.Name + "-instance" }

// PrimaryLeaseName is the cluster's primary Lease.
func PrimaryLeaseName(c *pgv1.PostgresCluster) string { return agentapi.LeaseName(c.Name) }

func BuildInstanceServiceAccount(c *pgv1.PostgresCluster) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(InstanceAccessName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c))
}

func BuildInstanceRole(c *pgv1.PostgresCluster) *rbacv1ac.RoleApplyConfiguration {
	return rbacv1ac.Role(InstanceAccessName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithRules(rbacv1ac.PolicyRule().
			WithAPIGroups("coordination.k8s.io").
			WithResources("leases").
			WithResourceNames(PrimaryLeaseName(c)).
			WithVerbs("get", "update"))
}

func BuildInstanceRoleBinding(c *pgv1.PostgresCluster) *rbacv1ac.RoleBindingApplyConfiguration {
	return rbacv1ac.RoleBinding(InstanceAccessName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("Role").WithName(InstanceAccessName(c))).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(InstanceAccessName(c)).WithNamespace(c.Namespace))
}

// BuildPrimaryLease is the Lease a cluster starts with: it names holder, the cluster's primary.
// A new cluster's has never been granted (its initial primary may run initdb); one created for
// a cluster that already had a primary counts one grant, so that no instance initialises a new
// database over a lost volume.
func BuildPrimaryLease(c *pgv1.PostgresCluster, holder string, now metav1.MicroTime) *coordinationv1.Lease {
	transitions := int32(0)
	if c.Status.CurrentPrimary != "" {
		transitions = 1
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: PrimaryLeaseName(c), Namespace: c.Namespace,
			Labels:          CommonLabels(c),
			OwnerReferences: []metav1.OwnerReference{ControllerReference(c)},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(agentapi.LeaseExpiry.Seconds())),
			AcquireTime:          &now,
			RenewTime:            &now,
			LeaseTransitions:     ptr.To(transitions),
		},
	}
}
