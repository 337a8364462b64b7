package builder

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// NetworkPolicyName is the name of the cluster's NetworkPolicy (spec.networkPolicy).
func NetworkPolicyName(c *pgv1.PostgresCluster) string { return c.Name }

// BuildNetworkPolicy admits to the instances: PostgreSQL from the cluster's own instances
// (streaming, clones, pg_rewind) and spec.networkPolicy.clients (anyone when none), the agent
// API from the operator's namespace (from anywhere when operatorNamespace is unknown: an
// operator running outside the cluster), and the metrics from spec.networkPolicy.monitoring
// (anyone when none). Egress is left alone: the instances reach the API server, DNS and the
// backup repository, whose addresses pgpilot cannot know.
func BuildNetworkPolicy(c *pgv1.PostgresCluster, operatorNamespace string) *networkingv1ac.NetworkPolicyApplyConfiguration {
	spec := c.Spec.NetworkPolicy
	if spec == nil {
		spec = &pgv1.NetworkPolicySpec{}
	}
	postgres := ingressRule(agentapi.DefaultPostgresPort)
	if len(spec.Clients) > 0 {
		postgres.WithFrom(networkingv1ac.NetworkPolicyPeer().WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))))
		postgres.WithFrom(peers(spec.Clients)...)
	}
	agent := ingressRule(agentapi.DefaultAgentPort)
	if operatorNamespace != "" {
		agent.WithFrom(networkingv1ac.NetworkPolicyPeer().WithNamespaceSelector(
			metav1ac.LabelSelector().WithMatchLabels(map[string]string{corev1.LabelMetadataName: operatorNamespace})))
	}
	metrics := ingressRule(agentapi.DefaultMetricsPort).WithFrom(peers(spec.Monitoring)...)
	return networkingv1ac.NetworkPolicy(NetworkPolicyName(c), c.Namespace).
		WithLabels(CommonLabels(c)).
		WithOwnerReferences(ownerReference(c)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(SelectorLabels(c))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(postgres, agent, metrics))
}

func ingressRule(port int32) *networkingv1ac.NetworkPolicyIngressRuleApplyConfiguration {
	return networkingv1ac.NetworkPolicyIngressRule().WithPorts(networkingv1ac.NetworkPolicyPort().
		WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(port)))
}

// peers turns the spec's peers into apply configurations, field by field.
func peers(from []networkingv1.NetworkPolicyPeer) []*networkingv1ac.NetworkPolicyPeerApplyConfiguration {
	out := make([]*networkingv1ac.NetworkPolicyPeerApplyConfiguration, 0, len(from))
	for _, p := range from {
		peer := networkingv1ac.NetworkPolicyPeer()
		if p.PodSelector != nil {
			peer.WithPodSelector(labelSelector(p.PodSelector))
		}
		if p.NamespaceSelector != nil {
			peer.WithNamespaceSelector(labelSelector(p.NamespaceSelector))
		}
		if p.IPBlock != nil {
			peer.WithIPBlock(networkingv1ac.IPBlock().WithCIDR(p.IPBlock.CIDR).WithExcept(p.IPBlock.Except...))
		}
		out = append(out, peer)
	}
	return out
}

// labelSelector copies a selector into its apply configuration; an empty one stays empty (all).
func labelSelector(s *metav1.LabelSelector) *metav1ac.LabelSelectorApplyConfiguration {
	out := metav1ac.LabelSelector().WithMatchLabels(s.MatchLabels)
	for _, e := range s.MatchExpressions {
		out.WithMatchExpressions(metav1ac.LabelSelectorRequirement().WithKey(e.Key).WithOperator(e.Operator).WithValues(e.Values...))
	}
	return out
}
