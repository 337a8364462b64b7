package builder

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// BuildServices returns the cluster's Services: the headless one that gives instances stable
// DNS names, <name>-rw (the primary), <name>-ro (the replicas) and <name>-r (any instance).
func BuildServices(c *pgv1.PostgresCluster) []*corev1ac.ServiceApplyConfiguration {
	headless := service(c, HeadlessServiceName(c), SelectorLabels(c)).
		WithSpec(serviceSpec(SelectorLabels(c)).
			WithClusterIP(corev1.ClusterIPNone).
			// Replicas must resolve the primary before it is ready, to clone from it.
			WithPublishNotReadyAddresses(true))
	return []*corev1ac.ServiceApplyConfiguration{
		headless,
		service(c, ReadWriteServiceName(c), RoleSelector(c, RolePrimary)),
		service(c, ReadOnlyServiceName(c), RoleSelector(c, RoleReplica)),
		service(c, AnyServiceName(c), SelectorLabels(c)),
	}
}

func service(c *pgv1.PostgresCluster, name string, selector map[string]string) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(name, c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(serviceSpec(selector).WithType(corev1.ServiceTypeClusterIP))
}

func serviceSpec(selector map[string]string) *corev1ac.ServiceSpecApplyConfiguration {
	return corev1ac.ServiceSpec().
		WithSelector(selector).
		WithPorts(corev1ac.ServicePort().
			WithName("postgres").
			WithProtocol(corev1.ProtocolTCP).
			WithPort(agentapi.DefaultPostgresPort).
			WithTargetPort(intstr.FromString("postgres")))
}
