package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// none, and nothing else changes.
var _ = Describe("A PodMonitor asked for where none is served", func() {
	It("makes the cluster Degraded, naming what to install", func() {
		r := &PostgresClusterReconciler{PodMonitors: false}
		s := newScope(newCluster("ns", func(c *pgv1.PostgresCluster) {
			c.Spec.Monitoring.PodMonitor = &pgv1.PodMonitorSpec{Enabled: true}
		}))
		stopped, err := r.ensurePodMonitor(context.Background(), s)
		Expect(err).NotTo(HaveOccurred())
		Expect(stopped).To(BeNil(), "the rest of the reconcile must go on")
		status := &pgv1.PostgresClusterStatus{}
		setDegradedCondition(status, summary{monitoringProblem: s.monitoringProblem})
		degraded := status.Conditions[0]
		Expect(degraded.Status).To(Equal(metav1.ConditionTrue))
		Expect(degraded.Reason).To(Equal(reasonPodMonitorUnavailable))
		Expect(degraded.Message).To(ContainSubstring("install the Prometheus operator's CRDs, then restart pgpilot"))
	})
})
