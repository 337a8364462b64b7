//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// Monitoring end to end, on one two-instance cluster. Custom queries: a ConfigMap of
// postgres_exporter-style queries, projected into the instances, exported beside pgpilot's
// metrics; a change of the ConfigMap is exported without a restart, and a query that fails shows
// in pgpilot_query_error and the Monitoring condition. The instance's log: JSON lines, and an
// Event of a failed login. Then a real Prometheus scrapes what the cluster's PodMonitor and the
// operator's ServiceMonitor describe, and evaluates pgpilot's alerts.
var _ = Describe("Monitoring", Ordered, SpecPriority(slowerSpecs), func() {
	var cluster *pgv1.PostgresCluster
	var prometheus *prometheusServer
	queries := &corev1.ConfigMap{}
	queryFile := func(value int, broken bool) string {
		file := fmt.Sprintf("app_greeting:\n  query: \"SELECT %d AS value\"\n  metrics:\n    - value: {usage: GAUGE}\n", value)
		if broken {
			file += "app_broken:\n  query: \"SELECT count(*) AS n FROM no_such_table\"\n  metrics:\n    - n: {usage: GAUGE}\n"
		}
		return file
	}
	monitoring := func(g Gomega, ctx context.Context) *metav1.Condition {
		current := &pgv1.PostgresCluster{}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		c := meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionMonitoring)
		g.Expect(c).NotTo(BeNil(), "no Monitoring condition")
		return c
	}

	BeforeAll(func(ctx SpecContext) {
		ns := newNamespace(ctx, "e2e-monitoring")
		queries.Name, queries.Namespace = "app-queries", ns
		queries.Data = map[string]string{"queries.yaml": queryFile(1, false)}
		Expect(k8s.Create(ctx, queries)).To(Succeed())
		cluster = loadSample(ns)
		cluster.Name = "metrics"
		cluster.Spec.Instances = 2
		cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		cluster.Spec.Monitoring.PodMonitor = &pgv1.PodMonitorSpec{Enabled: true, Interval: "5s"}
		cluster.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{ConfigMap: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: queries.Name}, Key: "queries.yaml"}}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 6*time.Minute)

		// Prometheus lives as long as this container (the cleanups of BeforeAll run after it).
		podMonitor := &monitoringv1.PodMonitor{}
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), podMonitor)).To(Succeed())
		}).WithTimeout(operatorReacts).Should(Succeed())
		prometheus = startPrometheus(ctx, podMonitor)
	})
	AfterEach(dumpOnFailure)

	It("exports a custom query's metric beside pgpilot's, and says Monitoring True", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			body := instanceMetrics(g, ctx, cluster, cluster.Name+"-0")
			g.Expect(body).To(ContainSubstring("\napp_greeting_value 1\n"))
			g.Expect(body).To(ContainSubstring("\npgpilot_up 1\n"))
			g.Expect(body).To(ContainSubstring("\npgpilot_custom_queries 1\n"))
			g.Expect(monitoring(g, ctx).Status).To(Equal(metav1.ConditionTrue))
		}).WithTimeout(2 * time.Minute).Should(Succeed())

		By("nobody else reads them: not over plain HTTP, not over TLS without the metrics certificate")
		code, body, err := scrapeInstance(ctx, cluster, cluster.Name+"-0", nil)
		Expect(err == nil && code == http.StatusOK).To(BeFalse(), "plain HTTP answered: %.200s", body)
		code, _, err = scrapeInstance(ctx, cluster, cluster.Name+"-0", &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a scraper without credentials
		Expect(err).To(HaveOccurred(), "TLS without a client certificate answered %d", code)
	})

	It("exports a changed ConfigMap without a restart, and reports a query that fails", func(ctx SpecContext) {
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-0"}, pod)).To(Succeed())
		started := pod.Status.ContainerStatuses[0].State.Running.StartedAt

		queries.Data["queries.yaml"] = queryFile(2, true)
		Expect(k8s.Update(ctx, queries)).To(Succeed())
		changed := time.Now()
		Eventually(func(g Gomega) {
			body := instanceMetrics(g, ctx, cluster, pod.Name)
			g.Expect(body).To(ContainSubstring("\napp_greeting_value 2\n"))
			g.Expect(body).To(ContainSubstring("\n" + `pgpilot_query_error{query="app_broken"} 1` + "\n"))
		}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("custom queries: ConfigMap change exported after", time.Since(changed).Round(time.Second).String())
		Eventually(func(g Gomega) {
			c := monitoring(g, ctx)
			g.Expect(c.Reason).To(Equal("CustomQueryFailed"))
			g.Expect(c.Message).To(ContainSubstring(pod.Name + ": app_broken"))
		}).Should(Succeed())

		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeZero())
		Expect(pod.Status.ContainerStatuses[0].State.Running).NotTo(BeNil())
		Expect(pod.Status.ContainerStatuses[0].State.Running.StartedAt).To(Equal(started), "the instance restarted")
	})

	It("logs one JSON line per record, PostgreSQL's too, and makes an Event of a failed login", func(ctx SpecContext) {
		since := time.Now()
		connInfo := rwConnInfo(ctx, cluster, "app", "app")
		conn, err := pgx.Connect(ctx, strings.Replace(connInfo, "password=", "password=wrong", 1))
		if err == nil {
			_ = conn.Close(ctx)
		}
		Expect(err).To(MatchError(ContainSubstring("password authentication failed")))
		Eventually(func(g Gomega) {
			g.Expect(clusterEventReasons(ctx, cluster, since)).To(ContainElement("AuthenticationFailed"))
		}).WithTimeout(2 * time.Minute).Should(Succeed())

		logs, err := clientset.CoreV1().Pods(cluster.Namespace).GetLogs(cluster.Name+"-0",
			&corev1.PodLogOptions{Container: "postgres"}).DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred())
		var failedLogin map[string]any
		for line := range strings.Lines(string(logs)) {
			var record map[string]any
			Expect(json.Unmarshal([]byte(line), &record)).To(Succeed(), "not a JSON line: %q", line)
			Expect(record).To(HaveKeyWithValue("cluster", cluster.Name), "line %q", line)
			Expect(record).To(HaveKeyWithValue("instance", cluster.Name+"-0"), "line %q", line)
			if fields, ok := record["record"].(map[string]any); ok && fields["state_code"] == "28P01" {
				failedLogin = record
			}
		}
		Expect(failedLogin).NotTo(BeNil(), "no record of the failed login in the container's log")
		Expect(failedLogin).To(HaveKeyWithValue("level", "ERROR"))
		Expect(failedLogin["msg"]).To(ContainSubstring("password authentication failed"))
	})

	It("is scraped by a real Prometheus: every instance through the PodMonitor, a lag series per replica, "+
		"the operator's authenticated endpoint", func(ctx SpecContext) {
		pods, replicas := clusterPodNames(ctx, cluster)
		instances := fmt.Sprintf(`{namespace=%q, pgpilot_cluster=%q}`, cluster.Namespace, cluster.Name)
		operator := fmt.Sprintf(`{job="serviceMonitor/%s/pgpilot-operator-controller-manager-metrics-monitor/0"}`, operatorNamespace)
		Eventually(func(g Gomega) {
			g.Expect(labelValues(prometheus.query(g, ctx, "up"+instances+" == 1"), "pod")).To(ConsistOf(pods))
			g.Expect(labelValues(prometheus.query(g, ctx, "pgpilot_up"+instances+" == 1"), "pod")).To(ConsistOf(pods))
			g.Expect(labelValues(prometheus.query(g, ctx, "app_greeting_value"+instances), "pod")).To(ConsistOf(pods))
			for _, lag := range []string{"pgpilot_replication_lag_bytes", "pgpilot_replication_lag_seconds"} {
				g.Expect(labelValues(prometheus.query(g, ctx, lag+instances), "application_name")).To(ConsistOf(replicas), lag)
			}
			g.Expect(prometheus.query(g, ctx, "up"+operator+" == 1")).To(HaveLen(1), "the operator's endpoint is not scraped")
			g.Expect(prometheus.query(g, ctx, "pgpilot_reconcile_stage_outcomes_total"+operator)).NotTo(BeEmpty())
		}).WithTimeout(operatorReacts).WithPolling(time.Second).Should(Succeed())
		for _, cost := range []string{"scrape_duration_seconds", "scrape_samples_scraped"} {
			for _, sample := range prometheus.query(Default, ctx, cost+instances) {
				AddReportEntry(fmt.Sprintf("prometheus: %s of %s", cost, sample.Metric["pod"]), sample.Value.String())
			}
		}
		for _, pod := range clusterPods(ctx, cluster) {
			_, agent := findPostmaster(&pod)
			AddReportEntry("prometheus: the agent's resident memory after scrapes every 5 s, "+pod.Name, residentMemory(agent))
		}
	})

	// A standby whose PostgreSQL stops restarts its container at once (the agent exits), so a
	// replica that stays out of streaming is one whose connections to PostgreSQL elsewhere are
	// reset: its server runs and answers the exporter, its WAL receiver cannot connect.
	It("fires PgpilotReplicaNotStreaming within its for: and a scrape when a replica stops streaming, "+
		"and resolves it when it streams again", func(ctx SpecContext) {
		const alert = "PgpilotReplicaNotStreaming"
		hold := alertFor(alert)
		_, replicas := clusterPodNames(ctx, cluster)
		replica := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: replicas[0]}, replica)).To(Succeed())
		Expect(prometheus.alertState(Default, ctx, alert, replica.Name)).To(BeEmpty(), "firing before the fault")
		netns := podNetns(replica)

		cutReplication(netns, true)
		DeferCleanup(cutReplication, netns, false)
		cut := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(instanceMetrics(g, ctx, cluster, replica.Name)).To(ContainSubstring("\npgpilot_wal_receiver_up 0\n"))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		stopped := time.Now()
		AddReportEntry("prometheus: the replica's agent exported wal_receiver_up 0 after the cut", stopped.Sub(cut).Round(time.Second).String())
		// Pending from the first evaluation after the first scrape that sees 0, firing `for:` later.
		deadline := hold + 5*time.Second + prometheusInterval + time.Second
		Eventually(func(g Gomega) {
			g.Expect(prometheus.alertState(g, ctx, alert, replica.Name)).To(Equal(promv1.AlertStateFiring))
		}).WithTimeout(deadline).WithPolling(time.Second).Should(Succeed())
		firedAfter := time.Since(stopped)
		AddReportEntry("prometheus: "+alert+" fired after the replica stopped streaming", firedAfter.Round(time.Second).String())
		Expect(firedAfter).To(BeNumerically(">=", hold-2*time.Second), "fired before its for:")

		cutReplication(netns, false)
		healed := time.Now()
		Eventually(func(g Gomega) {
			g.Expect(prometheus.alertState(g, ctx, alert, replica.Name)).To(BeEmpty())
			g.Expect(prometheus.query(g, ctx, fmt.Sprintf(`pgpilot_wal_receiver_up{namespace=%q, pod=%q} == 1`,
				cluster.Namespace, replica.Name))).To(HaveLen(1))
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("prometheus: "+alert+" resolved after replication returned", time.Since(healed).Round(time.Second).String())
		waitForReady(ctx, cluster, 3*time.Minute)
	})

	// Last: it moves the primary. This cluster replicates asynchronously (the default), where
	// README says a deleted pod loses no acknowledged write: its clean shutdown sends the
	// standby every WAL record first.
	It("fails over when the primary's pod is deleted, losing no acknowledged write with asynchronous replication", func(ctx SpecContext) {
		// The claim needs a standby to send the WAL to: the spec before cut replication, and
		// Ready does not wait for the standby to stream again (one CI rehearsal deleted the pod
		// before it did, and lost a write the old primary had acknowledged alone).
		Eventually(func(g Gomega) { expectReplicationWith(ctx, g, cluster, 2) }).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		underFault(ctx, cluster, "primary pod deleted, 2 instances, asynchronous", rtoCrash, func(old *corev1.Pod) {
			Expect(k8s.Delete(ctx, old)).To(Succeed())
		})
	})
	// A crash is where asynchronous replication may lose what the primary acknowledged and had
	// not sent yet: measured, not assumed (the report's "acknowledged but lost").
	It("fails over when the primary's postmaster is killed with asynchronous replication, and reports what it lost", func(ctx SpecContext) {
		underFault(ctx, cluster, "kill -9 of the primary's postmaster, 2 instances, asynchronous", rtoCrash, killPostmaster, measuresLoss)
	})
})

// clusterPodNames are the names of the cluster's instance pods, and of those that are not its
// current primary.
func clusterPodNames(ctx context.Context, c *pgv1.PostgresCluster) (pods, replicas []string) {
	current := &pgv1.PostgresCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
	Expect(current.Status.CurrentPrimary).NotTo(BeEmpty())
	for _, pod := range clusterPods(ctx, c) {
		pods = append(pods, pod.Name)
		if pod.Name != current.Status.CurrentPrimary {
			replicas = append(replicas, pod.Name)
		}
	}
	return pods, replicas
}

// residentMemory is the VmRSS line of a process of the node.
func residentMemory(pid int) string {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	Expect(err).NotTo(HaveOccurred())
	for line := range strings.Lines(string(status)) {
		if rss, found := strings.CutPrefix(line, "VmRSS:"); found {
			return strings.TrimSpace(rss)
		}
	}
	Fail(fmt.Sprintf("no VmRSS in /proc/%d/status", pid))
	return ""
}

// labelValues are the values of label in a query's result.
func labelValues(vector model.Vector, label model.LabelName) []string {
	values := []string{}
	for _, sample := range vector {
		values = append(values, string(sample.Metric[label]))
	}
	return values
}

// alertFor is the `for:` of an alert as the e2e's Prometheus runs it (e2eRules).
func alertFor(name string) time.Duration {
	for _, group := range e2eRules().Spec.Groups {
		for _, rule := range group.Rules {
			if rule.Alert == name && rule.For != nil {
				hold, err := model.ParseDuration(string(*rule.For))
				Expect(err).NotTo(HaveOccurred())
				return time.Duration(hold)
			}
		}
	}
	Fail("no alert " + name + " with a for: in config/prometheus/rules.yaml")
	return 0
}

// e2eHolds shortens the for: of the alerts the specs wait for: the spec still proves the real
// exporter and Prometheus fire the shipped expression no sooner than its for: and resolve it,
// without waiting minutes; promtool's tests (test/monitoring/alerts_test.yaml) hold the
// shipped durations.
var e2eHolds = map[string]monitoringv1.Duration{"PgpilotReplicaNotStreaming": "30s"}

// e2eRules is config/prometheus/rules.yaml's PrometheusRule with e2eHolds applied.
func e2eRules() *monitoringv1.PrometheusRule {
	rules := &monitoringv1.PrometheusRule{}
	readManifest("prometheus/rules.yaml", rules)
	for g := range rules.Spec.Groups {
		for i, rule := range rules.Spec.Groups[g].Rules {
			if hold, ok := e2eHolds[rule.Alert]; ok {
				Expect(rule.For).NotTo(BeNil(), "alert %s has no for:", rule.Alert)
				rules.Spec.Groups[g].Rules[i].For = &hold
			}
		}
	}
	return rules
}

// instanceMetrics reads an instance's metrics port from the node's network, as a scraper
// holding the cluster's metrics client certificate.
func instanceMetrics(g Gomega, ctx context.Context, cluster *pgv1.PostgresCluster, name string) string {
	secret := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: pgbuilder.MetricsSecretName(cluster)}, secret)).To(Succeed())
	config, err := agentapi.ClientTLS(secret.Data[corev1.ServiceAccountRootCAKey], secret.Data[corev1.TLSCertKey],
		secret.Data[corev1.TLSPrivateKeyKey], pgbuilder.AgentServerName(cluster))
	g.Expect(err).NotTo(HaveOccurred())
	code, body, err := scrapeInstance(ctx, cluster, name, config)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	return "\n" + body // every line, the first included, between newlines
}

// scrapeInstance reads an instance's metrics over HTTPS with config (nil: over plain HTTP).
func scrapeInstance(ctx context.Context, cluster *pgv1.PostgresCluster, name string, config *tls.Config) (int, string, error) {
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, pod); err != nil || pod.Status.PodIP == "" {
		return 0, "", fmt.Errorf("pod %s has no IP yet: %v", name, err)
	}
	scheme := "https://"
	if config == nil {
		scheme = "http://"
	}
	return pgtest.Scrape(ctx, scheme+net.JoinHostPort(pod.Status.PodIP, "9187")+"/metrics", config)
}
