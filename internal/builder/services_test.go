package builder

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestBuildServices(t *testing.T) {
	cluster := map[string]string{"postgres.pgpilot.io/cluster": "db"}
	withRole := func(role string) map[string]string {
		return map[string]string{"postgres.pgpilot.io/cluster": "db", "postgres.pgpilot.io/role": role}
	}
	tests := []struct {
		name                string
		wantType            corev1.ServiceType
		wantClusterIP       string
		wantPublishNotReady bool
		wantSelector        map[string]string
	}{
		{name: "db-instances", wantClusterIP: corev1.ClusterIPNone, wantPublishNotReady: true, wantSelector: cluster},
		{name: "db-rw", wantType: corev1.ServiceTypeClusterIP, wantSelector: withRole("primary")},
		{name: "db-ro", wantType: corev1.ServiceTypeClusterIP, wantSelector: withRole("replica")},
		{name: "db-r", wantType: corev1.ServiceTypeClusterIP, wantSelector: cluster},
	}

	services := BuildServices(newCluster())
	if len(services) != len(tests) {
		t.Fatalf("got %d services, want %d", len(services), len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := toTyped[corev1.Service](t, services[i])

			if svc.Name != tt.name || svc.Namespace != "ns" {
				t.Errorf("name = %s/%s, want ns/%s", svc.Namespace, svc.Name, tt.name)
			}
			if svc.Spec.Type != tt.wantType {
				t.Errorf("type = %q, want %q", svc.Spec.Type, tt.wantType)
			}
			if svc.Spec.ClusterIP != tt.wantClusterIP {
				t.Errorf("clusterIP = %q, want %q", svc.Spec.ClusterIP, tt.wantClusterIP)
			}
			if svc.Spec.PublishNotReadyAddresses != tt.wantPublishNotReady {
				t.Errorf("publishNotReadyAddresses = %v, want %v", svc.Spec.PublishNotReadyAddresses, tt.wantPublishNotReady)
			}
			if diff := cmp.Diff(tt.wantSelector, svc.Spec.Selector); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			wantPorts := []corev1.ServicePort{{
				Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromString("postgres"),
			}}
			if diff := cmp.Diff(wantPorts, svc.Spec.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantCommonLabels(), svc.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, svc.OwnerReferences); diff != "" {
				t.Errorf("owner references (-want +got):\n%s", diff)
			}
		})
	}
}
