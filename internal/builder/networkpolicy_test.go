package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestBuildNetworkPolicy(t *testing.T) {
	port := func(n int32) []networkingv1.NetworkPolicyPort {
		return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(n))}}
	}
	instances := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"postgres.pgpilot.io/cluster": "db"}}}
	operator := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "pgpilot-system"}}}
	app := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
	everyPodOf := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}, PodSelector: &metav1.LabelSelector{}}
	office := networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}
	monitoring := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}}}

	tests := []struct {
		name              string
		spec              pgv1.NetworkPolicySpec
		operatorNamespace string
		want              []networkingv1.NetworkPolicyIngressRule
	}{{
		name:              "defaults: PostgreSQL and metrics from anyone, the agent API from the operator's namespace",
		spec:              pgv1.NetworkPolicySpec{Enabled: true},
		operatorNamespace: "pgpilot-system",
		want: []networkingv1.NetworkPolicyIngressRule{
			{Ports: port(5432)}, {Ports: port(8000), From: []networkingv1.NetworkPolicyPeer{operator}}, {Ports: port(9187)}},
	}, {
		name: "clients and monitoring named: the cluster's own instances keep PostgreSQL, every peer kind is copied",
		spec: pgv1.NetworkPolicySpec{Enabled: true, Clients: []networkingv1.NetworkPolicyPeer{app, everyPodOf, office},
			Monitoring: []networkingv1.NetworkPolicyPeer{monitoring}},
		operatorNamespace: "pgpilot-system",
		want: []networkingv1.NetworkPolicyIngressRule{
			{Ports: port(5432), From: []networkingv1.NetworkPolicyPeer{instances, app, everyPodOf, office}},
			{Ports: port(8000), From: []networkingv1.NetworkPolicyPeer{operator}},
			{Ports: port(9187), From: []networkingv1.NetworkPolicyPeer{monitoring}}},
	}, {
		name: "an operator outside the cluster: the agent API from anywhere (still mTLS)",
		spec: pgv1.NetworkPolicySpec{Enabled: true},
		want: []networkingv1.NetworkPolicyIngressRule{{Ports: port(5432)}, {Ports: port(8000)}, {Ports: port(9187)}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(func(c *pgv1.PostgresCluster) { c.Spec.NetworkPolicy = &tt.spec })
			np := toTyped[networkingv1.NetworkPolicy](t, BuildNetworkPolicy(c, tt.operatorNamespace))
			if np.Name != "db" || np.Namespace != "ns" {
				t.Errorf("object = %s/%s, want ns/db", np.Namespace, np.Name)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, np.OwnerReferences); diff != "" {
				t.Errorf("owner references (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"postgres.pgpilot.io/cluster": "db"}, np.Spec.PodSelector.MatchLabels); diff != "" {
				t.Errorf("pod selector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, np.Spec.PolicyTypes); diff != "" {
				t.Errorf("policy types (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.want, np.Spec.Ingress); diff != "" {
				t.Errorf("ingress (-want +got):\n%s", diff)
			}
		})
	}
}
