package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// The suite's API server serves the Prometheus operator's CRDs (test/crds), as a cluster with
// the Prometheus operator does.
var _ = Describe("The PodMonitor of spec.monitoring.podMonitor", func() {
	podMonitor := func(c *pgv1.PostgresCluster) *monitoringv1.PodMonitor {
		return &monitoringv1.PodMonitor{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: pgbuilder.PodMonitorName(c)}}
	}

	It("is made, owned and kept while enabled, written only when it differs, and deleted when disabled", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.PodMonitor = &pgv1.PodMonitorSpec{Enabled: true, Interval: "15s",
				Labels: map[string]string{"release": "prometheus"}}
		}))
		pm := podMonitor(cluster)
		Eventually(get).WithArguments(pm).Should(Succeed())
		Expect(pm.Labels).To(HaveKeyWithValue("release", "prometheus"))
		Expect(metav1.IsControlledBy(pm, fetch(cluster))).To(BeTrue(), "the cluster must control its PodMonitor")
		Expect(pm.Spec.PodMetricsEndpoints).To(HaveLen(1))
		Expect(pm.Spec.PodMetricsEndpoints[0].Interval).To(Equal(monitoringv1.Duration("15s")))

		By("an idle cluster does not write it again")
		settled := pm.ResourceVersion
		Consistently(func() string {
			Expect(get(pm)).To(Succeed())
			return pm.ResourceVersion
		}, 3*time.Second, 500*time.Millisecond).Should(Equal(settled))

		By("an edit by someone else is undone")
		pm.Spec.PodMetricsEndpoints = nil
		Expect(k8sClient.Update(ctx, pm)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(pm)).To(Succeed())
			g.Expect(pm.Spec.PodMetricsEndpoints).To(HaveLen(1))
		}).Should(Succeed())

		By("disabling it deletes it")
		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Monitoring.PodMonitor.Enabled = false })
		Eventually(func() bool { return apierrors.IsNotFound(get(podMonitor(cluster))) }).Should(BeTrue())
	})

	It("is not made when not asked for", func() {
		cluster := createCluster(newCluster(newNamespace()))
		Eventually(func() int64 { return fetch(cluster).Status.ObservedGeneration }).Should(Equal(cluster.Generation))
		Expect(apierrors.IsNotFound(get(podMonitor(cluster)))).To(BeTrue())
	})
})

// Without the Prometheus operator's CRDs, a cluster that asks for a PodMonitor says why it has
// none, and the reconcile goes on.
var _ = Describe("A PodMonitor asked for where none is served", func() {
	It("sets Monitoring False, naming what to install", func() {
		r := &PostgresClusterReconciler{PodMonitors: false}
		s := newScope(newCluster("ns", func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.PodMonitor = &pgv1.PodMonitorSpec{Enabled: true}
		}))
		stopped, err := r.ensureMonitoring(context.Background(), s)
		Expect(err).NotTo(HaveOccurred())
		Expect(stopped).To(BeNil(), "the rest of the reconcile must go on")
		status := &pgv1.PostgresClusterStatus{}
		setMonitoring(status, summarizeMonitoring(s), 1)
		c := meta.FindStatusCondition(status.Conditions, pgv1.ConditionMonitoring)
		Expect(c).NotTo(BeNil())
		Expect(c.Status).To(Equal(metav1.ConditionFalse))
		Expect(c.Reason).To(Equal(reasonPodMonitorUnavailable))
		Expect(c.Message).To(ContainSubstring("install the Prometheus operator's CRDs, then restart pgpilot"))
	})
})

var _ = DescribeTable("The Monitoring condition",
	func(prior *metav1.Condition, o monitoringSummary, want *metav1.Condition) {
		status := &pgv1.PostgresClusterStatus{}
		if prior != nil {
			meta.SetStatusCondition(&status.Conditions, *prior)
		}
		setMonitoring(status, o, 1)
		got := meta.FindStatusCondition(status.Conditions, pgv1.ConditionMonitoring)
		if want == nil {
			Expect(got).To(BeNil())
			return
		}
		Expect(got).NotTo(BeNil())
		Expect(got.Status).To(Equal(want.Status))
		Expect(got.Reason).To(Equal(want.Reason))
		Expect(got.Message).To(ContainSubstring(want.Message))
	},
	Entry("is absent without spec.monitoring", &metav1.Condition{Type: pgv1.ConditionMonitoring, Status: metav1.ConditionTrue, Reason: reasonMetricsExported},
		monitoringSummary{}, nil),
	Entry("says a source is missing", nil,
		monitoringSummary{configured: true, customQueries: true, problem: &reasonMessage{reasonCustomQueriesMissing, `ConfigMap "q" does not exist`}},
		&metav1.Condition{Status: metav1.ConditionFalse, Reason: reasonCustomQueriesMissing, Message: `ConfigMap "q" does not exist`}),
	Entry("names the instances whose files did not load", nil,
		monitoringSummary{configured: true, customQueries: true, metrics: map[string]*agentapi.MetricsStatus{
			"db-0": {CustomQueries: 1}, "db-1": {CustomQueries: 1, LoadError: "configmap.q.k: x: no query"}}},
		&metav1.Condition{Status: metav1.ConditionFalse, Reason: reasonCustomQueriesInvalid, Message: "db-1: configmap.q.k: x: no query"}),
	Entry("names the failing queries of each instance", nil,
		monitoringSummary{configured: true, customQueries: true, metrics: map[string]*agentapi.MetricsStatus{
			"db-0": {CustomQueries: 2, FailingQueries: []string{"a", "b"}}, "db-1": {CustomQueries: 2}}},
		&metav1.Condition{Status: metav1.ConditionFalse, Reason: reasonCustomQueryFailed, Message: "db-0: a, b"}),
	Entry("is Unknown until an instance reports", nil,
		monitoringSummary{configured: true, customQueries: true},
		&metav1.Condition{Status: metav1.ConditionUnknown, Reason: reasonWaitingForInstances}),
	Entry("keeps what the instances said when none answered this time",
		&metav1.Condition{Type: pgv1.ConditionMonitoring, Status: metav1.ConditionFalse, Reason: reasonCustomQueryFailed, Message: "db-0: a"},
		monitoringSummary{configured: true, customQueries: true},
		&metav1.Condition{Status: metav1.ConditionFalse, Reason: reasonCustomQueryFailed, Message: "db-0: a"}),
	Entry("forgets a fixed missing source even when no instance answered",
		&metav1.Condition{Type: pgv1.ConditionMonitoring, Status: metav1.ConditionFalse, Reason: reasonCustomQueriesMissing},
		monitoringSummary{configured: true, customQueries: true},
		&metav1.Condition{Status: metav1.ConditionUnknown, Reason: reasonWaitingForInstances}),
	Entry("is True when every instance runs its queries", nil,
		monitoringSummary{configured: true, customQueries: true, metrics: map[string]*agentapi.MetricsStatus{"db-0": {CustomQueries: 2}}},
		&metav1.Condition{Status: metav1.ConditionTrue, Reason: reasonMetricsExported}),
	Entry("is True with a PodMonitor only, which needs no report", nil,
		monitoringSummary{configured: true},
		&metav1.Condition{Status: metav1.ConditionTrue, Reason: reasonMetricsExported}),
)

// The custom queries' sources are the user's: one that does not exist is reported, not waited
// for (the instances run without it).
var _ = Describe("Custom queries from a ConfigMap", func() {
	It("that does not exist set Monitoring False with a Warning Event, and clear once it does", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.CustomQueries = []pgv1.CustomQueriesSource{{ConfigMap: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "queries"}, Key: "queries.yaml"}}}
		}))
		monitoring := func() *metav1.Condition { return condition(fetch(cluster), pgv1.ConditionMonitoring) }
		Eventually(func(g Gomega) {
			g.Expect(monitoring()).NotTo(BeNil())
			g.Expect(monitoring().Reason).To(Equal(reasonCustomQueriesMissing))
			g.Expect(monitoring().Message).To(ContainSubstring(`spec.monitoring.customQueries[0].configMap: ConfigMap "queries" does not exist`))
		}).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement(reasonCustomQueriesMissing))

		Expect(k8sClient.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "queries"},
			Data: map[string]string{"queries.yaml": "q:\n  query: SELECT 1 AS one\n  metrics:\n    - one: {usage: GAUGE}\n"}})).To(Succeed())
		// Not a watched object (the cache holds pgpilot's own); a spec change or the next
		// periodic reconcile reads it again.
		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Annotations = map[string]string{"touch": "1"} })
		Eventually(func() string { return monitoring().Reason }).Should(Equal(reasonWaitingForInstances))
	})
})
