//go:build e2e

package e2e

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// prometheusInterval is the Prometheus server's evaluation interval and its scrape interval
// where a monitor sets none.
const prometheusInterval = 5 * time.Second

// prometheusServer is a real Prometheus (Debian's, in the image localcluster builds) in its own
// namespace. Its scrape configuration is what the Prometheus operator makes of pgpilot's
// PodMonitor (read from the API server) and of the operator's ServiceMonitor
// (config/prometheus/monitor.yaml); its rules are config/prometheus/rules.yaml's PrometheusRule.
type prometheusServer struct {
	api promv1.API
}

// startPrometheus runs the server until the calling container ends, and waits until it is ready.
func startPrometheus(ctx context.Context, podMonitor *monitoringv1.PodMonitor) *prometheusServer {
	image := os.Getenv("E2E_PROMETHEUS_IMAGE")
	Expect(image).NotTo(BeEmpty(), "E2E_PROMETHEUS_IMAGE is unset: run the suite with `make test-e2e`")
	ns := newNamespace(ctx, "e2e-prometheus")

	// Both monitors go through the API server first: its CRDs validate what pgpilot ships.
	rules := e2eRules()
	rules.Namespace = ns
	Expect(k8s.Create(ctx, rules)).To(Succeed())
	operatorMonitor := &monitoringv1.ServiceMonitor{}
	readManifest("prometheus/monitor.yaml", operatorMonitor)
	operatorMonitor.Name, operatorMonitor.Namespace = "pgpilot-operator-"+operatorMonitor.Name, operatorNamespace
	Expect(k8s.Create(ctx, operatorMonitor)).To(Succeed())
	deleteAfter(operatorMonitor)

	ruleFile, err := yaml.Marshal(map[string]any{"groups": rules.Spec.Groups})
	Expect(err).NotTo(HaveOccurred())
	config, err := yaml.Marshal(map[string]any{
		"global": map[string]any{
			"scrape_interval":     model.Duration(prometheusInterval).String(),
			"evaluation_interval": model.Duration(prometheusInterval).String(),
		},
		"rule_files":     []string{"/etc/prometheus/rules.yaml"},
		"scrape_configs": []any{podMonitorJob(podMonitor), serviceMonitorJob(operatorMonitor)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns},
		Data:       map[string]string{"prometheus.yml": string(config), "rules.yaml": string(ruleFile)},
	})).To(Succeed())
	copyScrapeSecret(ctx, podMonitor, ns)
	grantDiscoveryAndMetrics(ctx, ns)

	pod := prometheusPod(ns, image)
	Expect(k8s.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(podReady(pod)).To(BeTrue(), "Prometheus is not ready")
	}).WithTimeout(2 * time.Minute).Should(Succeed())
	c, err := promapi.NewClient(promapi.Config{Address: "http://" + net.JoinHostPort(pod.Status.PodIP, "9090")})
	Expect(err).NotTo(HaveOccurred())
	return &prometheusServer{api: promv1.NewAPI(c)}
}

// query is the instant vector of expr now.
func (p *prometheusServer) query(g Gomega, ctx context.Context, expr string) model.Vector {
	value, _, _, err := p.api.Query(ctx, expr, time.Now())
	g.Expect(err).NotTo(HaveOccurred(), "query %s", expr)
	g.Expect(value.Type()).To(Equal(model.ValVector), "query %s", expr)
	return value.(model.Vector)
}

// alertState is the state (pending, firing) of the alert name about pod, "" when inactive.
func (p *prometheusServer) alertState(g Gomega, ctx context.Context, name, pod string) promv1.AlertState {
	alerts, err := p.api.Alerts(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, a := range alerts.Alerts {
		if string(a.Labels[model.AlertNameLabel]) == name && string(a.Labels["pod"]) == pod {
			return a.State
		}
	}
	return ""
}

// readManifest reads a YAML file of config/ into obj, strictly.
func readManifest(path string, obj any) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", path))
	Expect(err).NotTo(HaveOccurred())
	Expect(yaml.UnmarshalStrict(data, obj)).To(Succeed(), "config/%s", path)
}

// deleteAfter deletes a cluster-scoped or other namespace's object when the container ends.
func deleteAfter(obj client.Object) {
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj))).To(Succeed())
	})
}

// grantDiscoveryAndMetrics lets the namespace's default service account discover pods and
// endpoint slices, and read the operator's metrics through the ClusterRole pgpilot ships for it.
func grantDiscoveryAndMetrics(ctx context.Context, ns string) {
	discovery := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-discovery"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	Expect(k8s.Create(ctx, discovery)).To(Succeed())
	deleteAfter(discovery)
	for _, role := range []string{discovery.Name, metricsReaderRole} {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}},
		}
		Expect(k8s.Create(ctx, binding)).To(Succeed())
		deleteAfter(binding)
	}
}

func prometheusPod(ns, image string) *corev1.Pod {
	container := restrictedContainer(corev1.Container{
		Name:  "prometheus",
		Image: image,
		Args: []string{"--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
			"--storage.tsdb.retention.time=1h", "--web.listen-address=:9090"},
		Ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/-/ready", Port: intstr.FromInt32(9090)}},
			PeriodSeconds: 1,
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/prometheus"}, {Name: "data", MountPath: "/prometheus"},
			{Name: "scrape-tls", MountPath: scrapeTLSDir, ReadOnly: true}},
	})
	container.SecurityContext.ReadOnlyRootFilesystem = ptr.To(true)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers:                    []corev1.Container{container},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "prometheus"}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "scrape-tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: scrapeTLSSecret}}},
			},
		},
	}
}

// The Prometheus pod reads the PodMonitor's TLS Secret keys as files here, as the Prometheus
// operator copies them into its server's Secret.
const (
	scrapeTLSSecret = "scrape-tls"
	scrapeTLSDir    = "/etc/prometheus-tls"
)

// copyScrapeSecret copies the Secret the PodMonitor's TLS configuration names (one Secret, as
// pgpilot's does) into the Prometheus namespace.
func copyScrapeSecret(ctx context.Context, pm *monitoringv1.PodMonitor, ns string) {
	tls := pm.Spec.PodMetricsEndpoints[0].TLSConfig
	Expect(tls).NotTo(BeNil(), "the PodMonitor scrapes without TLS")
	names := []string{tls.CA.Secret.Name, tls.Cert.Secret.Name, tls.KeySecret.Name}
	Expect(slices.Compact(names)).To(HaveLen(1), "the PodMonitor's TLS keys come from one Secret")
	source := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: pm.Namespace, Name: names[0]}, source)).To(Succeed())
	Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: scrapeTLSSecret, Namespace: ns},
		Data: source.Data})).To(Succeed())
}

// podMonitorTLS is the scrape job's tls_config of a PodMonitor's TLS configuration, whose keys
// copyScrapeSecret mounted.
func podMonitorTLS(tls *monitoringv1.SafeTLSConfig) map[string]any {
	rest := *tls
	rest.CA, rest.Cert, rest.KeySecret, rest.ServerName = monitoringv1.SecretOrConfigMap{}, monitoringv1.SecretOrConfigMap{}, nil, nil
	Expect(rest).To(BeZero(), "a TLS field the e2e does not translate")
	return map[string]any{
		"ca_file":     filepath.Join(scrapeTLSDir, tls.CA.Secret.Key),
		"cert_file":   filepath.Join(scrapeTLSDir, tls.Cert.Secret.Key),
		"key_file":    filepath.Join(scrapeTLSDir, tls.KeySecret.Key),
		"server_name": ptr.Deref(tls.ServerName, ""),
	}
}

// podMonitorJob is the scrape job the Prometheus operator makes of a PodMonitor's first
// endpoint, for the fields pgpilot's PodMonitor sets. Any other field fails the spec: a field
// left out here would make the scrape differ from what users' Prometheus does.
func podMonitorJob(pm *monitoringv1.PodMonitor) map[string]any {
	Expect(pm.Spec.PodMetricsEndpoints).To(HaveLen(1))
	endpoint := pm.Spec.PodMetricsEndpoints[0]
	rest, spec := endpoint, pm.Spec
	rest.Port, rest.Interval, rest.RelabelConfigs, rest.Scheme, rest.TLSConfig = nil, "", nil, nil, nil
	spec.PodMetricsEndpoints, spec.Selector.MatchLabels = nil, nil
	Expect(rest).To(BeZero(), "a PodMonitor endpoint field the e2e does not translate")
	Expect(spec).To(BeZero(), "a PodMonitor field the e2e does not translate")

	relabel := keepLabels("__meta_kubernetes_pod_label_", pm.Spec.Selector.MatchLabels)
	relabel = append(relabel,
		keep("__meta_kubernetes_pod_container_port_name", ptr.Deref(endpoint.Port, "")),
		copyLabel("__meta_kubernetes_namespace", "namespace"),
		copyLabel("__meta_kubernetes_pod_name", "pod"),
		copyLabel("__meta_kubernetes_pod_container_name", "container"))
	relabel = append(relabel, relabelConfigs(endpoint.RelabelConfigs)...)
	job := map[string]any{
		"job_name":              "podMonitor/" + pm.Namespace + "/" + pm.Name + "/0",
		"kubernetes_sd_configs": []any{map[string]any{"role": "pod", "namespaces": map[string]any{"names": []string{pm.Namespace}}}},
		"relabel_configs":       relabel,
		"scheme":                endpoint.Scheme.String(),
		"tls_config":            podMonitorTLS(endpoint.TLSConfig),
	}
	if endpoint.Interval != "" {
		job["scrape_interval"] = string(endpoint.Interval)
	}
	return job
}

// serviceMonitorJob is the scrape job of a ServiceMonitor's first endpoint, for the fields the
// operator's ServiceMonitor sets (bearer token, TLS without verification, honorLabels).
func serviceMonitorJob(sm *monitoringv1.ServiceMonitor) map[string]any {
	Expect(sm.Spec.Endpoints).To(HaveLen(1))
	endpoint := sm.Spec.Endpoints[0]
	Expect(endpoint.TLSConfig).NotTo(BeNil())
	tls := *endpoint.TLSConfig
	tls.InsecureSkipVerify = nil
	Expect(tls).To(BeZero(), "a TLS field the e2e does not translate")
	rest, spec := endpoint, sm.Spec
	//nolint:staticcheck // bearerTokenFile: what config/prometheus/monitor.yaml (kubebuilder's) sets
	rest.Path, rest.Port, rest.Scheme, rest.HonorLabels, rest.BearerTokenFile, rest.TLSConfig = "", "", nil, false, "", nil
	spec.Endpoints, spec.Selector.MatchLabels = nil, nil
	Expect(rest).To(BeZero(), "a ServiceMonitor endpoint field the e2e does not translate")
	Expect(spec).To(BeZero(), "a ServiceMonitor field the e2e does not translate")

	relabel := keepLabels("__meta_kubernetes_service_label_", sm.Spec.Selector.MatchLabels)
	relabel = append(relabel,
		keep("__meta_kubernetes_endpointslice_port_name", endpoint.Port),
		copyLabel("__meta_kubernetes_namespace", "namespace"),
		copyLabel("__meta_kubernetes_service_name", "service"),
		copyLabel("__meta_kubernetes_pod_name", "pod"))
	return map[string]any{
		"job_name":      "serviceMonitor/" + sm.Namespace + "/" + sm.Name + "/0",
		"honor_labels":  endpoint.HonorLabels,
		"scheme":        strings.ToLower(endpoint.Scheme.String()),
		"metrics_path":  endpoint.Path,
		"authorization": map[string]any{"credentials_file": endpoint.BearerTokenFile}, //nolint:staticcheck // as above
		"tls_config":    map[string]any{"insecure_skip_verify": ptr.Deref(endpoint.TLSConfig.InsecureSkipVerify, false)},
		"kubernetes_sd_configs": []any{map[string]any{"role": "endpointslice",
			"namespaces": map[string]any{"names": []string{sm.Namespace}}}},
		"relabel_configs": relabel,
	}
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// keepLabels keeps the targets whose Kubernetes labels (meta labels named prefix+label) match.
func keepLabels(prefix string, labels map[string]string) []any {
	var out []any
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		out = append(out, keep(prefix+invalidLabelChars.ReplaceAllString(name, "_"), labels[name]))
	}
	return out
}

func keep(label, value string) map[string]any {
	return map[string]any{"action": "keep", "source_labels": []string{label}, "regex": regexp.QuoteMeta(value)}
}

func copyLabel(from, to string) map[string]any {
	return map[string]any{"source_labels": []string{from}, "target_label": to}
}

// relabelConfigs are a monitor's relabelings in Prometheus' own keys.
func relabelConfigs(configs []monitoringv1.RelabelConfig) []any {
	var out []any
	for _, c := range configs {
		rule := map[string]any{}
		if len(c.SourceLabels) > 0 {
			rule["source_labels"] = c.SourceLabels
		}
		if c.Separator != nil {
			rule["separator"] = *c.Separator
		}
		if c.TargetLabel != "" {
			rule["target_label"] = c.TargetLabel
		}
		if c.Regex != "" {
			rule["regex"] = c.Regex
		}
		if c.Modulus != 0 {
			rule["modulus"] = c.Modulus
		}
		if c.Replacement != nil {
			rule["replacement"] = *c.Replacement
		}
		if c.Action != "" {
			rule["action"] = strings.ToLower(c.Action)
		}
		out = append(out, rule)
	}
	return out
}
