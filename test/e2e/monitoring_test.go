//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Custom queries end to end: a ConfigMap of postgres_exporter-style queries, projected into the
// instance, exported beside pgpilot's metrics; a change of the ConfigMap is exported without a
// restart, and a query that fails shows in pgpilot_query_error and the Monitoring condition.
// Then the instance's log: JSON lines, and an Event of a failed login.
var _ = Describe("Custom queries", Ordered, func() {
	var cluster *pgv1.PostgresCluster
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
		cluster.Spec.Instances = 1
		cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		cluster.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{ConfigMap: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: queries.Name}, Key: "queries.yaml"}}}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 6*time.Minute)
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
})

// instanceMetrics reads an instance's metrics port from the node's network.
func instanceMetrics(g Gomega, ctx context.Context, cluster *pgv1.PostgresCluster, name string) string {
	pod := &corev1.Pod{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, pod)).To(Succeed())
	g.Expect(pod.Status.PodIP).NotTo(BeEmpty())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(pod.Status.PodIP, "9187")+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	return "\n" + string(body) // every line, the first included, between newlines
}
