package builder

import (
	"maps"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

func TestBuildPodMonitor(t *testing.T) {
	relabelCluster := monitoringv1.RelabelConfig{
		SourceLabels: []monitoringv1.LabelName{"__meta_kubernetes_pod_label_postgres_pgpilot_io_cluster"},
		TargetLabel:  "pgpilot_cluster",
	}
	secretKey := func(key string) *corev1.SecretKeySelector {
		return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-metrics-client"}, Key: key}
	}
	// Over TLS with the metrics client certificate, the instances verified for the -r Service.
	withTLS := monitoringv1.HTTPConfigWithProxy{HTTPConfig: monitoringv1.HTTPConfig{TLSConfig: &monitoringv1.SafeTLSConfig{
		CA:         monitoringv1.SecretOrConfigMap{Secret: secretKey("ca.crt")},
		Cert:       monitoringv1.SecretOrConfigMap{Secret: secretKey("tls.crt")},
		KeySecret:  secretKey("tls.key"),
		ServerName: ptr.To("db-r.ns.svc"),
	}}}
	https := ptr.To(monitoringv1.SchemeHTTPS)
	tests := []struct {
		name         string
		podMonitor   *pgv1.PodMonitorSpec
		wantLabels   map[string]string
		wantEndpoint monitoringv1.PodMetricsEndpoint
	}{{
		name:       "defaults: Prometheus's interval, pgpilot's labels",
		podMonitor: &pgv1.PodMonitorSpec{Enabled: true},
		wantLabels: wantCommonLabels(),
		wantEndpoint: monitoringv1.PodMetricsEndpoint{Port: ptr.To("metrics"), Scheme: https, HTTPConfigWithProxy: withTLS,
			RelabelConfigs: []monitoringv1.RelabelConfig{relabelCluster}},
	}, {
		name: "interval, and labels for a Prometheus's podMonitorSelector, which never replace pgpilot's",
		podMonitor: &pgv1.PodMonitorSpec{Enabled: true, Interval: "15s",
			Labels: map[string]string{"release": "prometheus", ManagedByLabel: "someone-else"}},
		wantLabels: func() map[string]string {
			labels := wantCommonLabels()
			maps.Copy(labels, map[string]string{"release": "prometheus"})
			return labels
		}(),
		wantEndpoint: monitoringv1.PodMetricsEndpoint{Port: ptr.To("metrics"), Interval: "15s", Scheme: https, HTTPConfigWithProxy: withTLS,
			RelabelConfigs: []monitoringv1.RelabelConfig{relabelCluster}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pm := toTyped[monitoringv1.PodMonitor](t, BuildPodMonitor(newCluster(func(c *pgv1.PostgresCluster) {
				c.Spec.Monitoring.PodMonitor = tt.podMonitor
			})))
			if pm.Kind != "PodMonitor" || pm.APIVersion != "monitoring.coreos.com/v1" || pm.Name != "db" || pm.Namespace != "ns" {
				t.Errorf("object = %s %s %s/%s, want monitoring.coreos.com/v1 PodMonitor ns/db", pm.APIVersion, pm.Kind, pm.Namespace, pm.Name)
			}
			if diff := cmp.Diff(tt.wantLabels, pm.Labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{wantOwnerReference()}, pm.OwnerReferences); diff != "" {
				t.Errorf("owner references (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]string{"postgres.pgpilot.io/cluster": "db"}, pm.Spec.Selector.MatchLabels); diff != "" {
				t.Errorf("selector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]monitoringv1.PodMetricsEndpoint{tt.wantEndpoint}, pm.Spec.PodMetricsEndpoints); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSanitizedLabelName(t *testing.T) {
	for in, want := range map[string]string{
		"postgres.pgpilot.io/cluster": "postgres_pgpilot_io_cluster",
		"app.kubernetes.io/name":      "app_kubernetes_io_name",
		"plain_Name9":                 "plain_Name9",
	} {
		if got := sanitizedLabelName(in); got != want {
			t.Errorf("sanitizedLabelName(%q) = %q, want %q", in, got, want)
		}
	}
}
