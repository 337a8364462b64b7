//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// apiCutLength is how long the primary is cut off from the API server: more than twice the
// Lease's expiry, so that every rule that could fail it over has had its chance.
const apiCutLength = 30 * time.Second

// apiServerCutSpec cuts the primary's pod off from the API server alone (its standbys, its
// clients and the operator still reach it): its Lease goes unrenewed, yet no failover may
// start, and it must keep acknowledging writes, because a standby streaming from it vouches
// for it and the operator still hears its agent.
func apiServerCutSpec(cluster **pgv1.PostgresCluster) {
	It("keeps the primary, writing, while it is cut off from the API server and its standby streams", func(ctx SpecContext) {
		c := *cluster
		// The standby that vouches for the primary streams before the cut: the spec before
		// this one may leave it still rejoining (a CI rehearsal cut the primary off while no
		// standby streamed, and a failover started).
		Eventually(func(g Gomega) { expectReplicationWith(ctx, g, c, c.Spec.Instances) }).
			WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		primary := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: current.Status.CurrentPrimary}, primary)).To(Succeed())
		netns := podNetns(primary)
		rules := apiServerRules(ctx)

		checker := startWriteChecker(ctx, c)
		time.Sleep(2 * time.Second)
		start := time.Now()
		netnsRules(netns, true, rules)
		DeferCleanup(netnsRules, netns, false, rules)
		time.Sleep(2 * time.Second) // a renewal already on its way lands
		renewedBefore := leaseRenewTime(ctx, c)
		for time.Since(start) < apiCutLength {
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			Expect(current.Status.CurrentPrimary).To(Equal(primary.Name), "the primary changed while cut off from the API server")
			Expect(current.Status.TargetPrimary).To(BeEmpty(), "a failover started: %s", current.Status.FailoverReason)
			time.Sleep(time.Second)
		}
		Expect(leaseRenewTime(ctx, c)).To(Equal(renewedBefore), "the Lease was renewed through the cut: the cut did not hold")
		netnsRules(netns, false, rules)
		Eventually(func() time.Time { return leaseRenewTime(ctx, c) }).WithTimeout(30*time.Second).WithPolling(time.Second).
			ShouldNot(Equal(renewedBefore), "the primary does not renew its Lease after the cut")
		AddReportEntry("API server cut: the primary renewed its Lease again after", time.Since(start).Round(100*time.Millisecond).String())
		// No fault to resume from: no gap between acknowledged writes may be longer than a blip.
		report := checker.finish(ctx, "primary cut off from the API server for 30 s")
		Expect(report.LongestGap).To(BeNumerically("<=", rtoNone), "writes stopped while the primary was cut off from the API server: %s", report)
		Expect(clusterEventReasons(ctx, c, start)).NotTo(ContainElement("FailoverStarted"))
		holder, err := primaryLeaseHolder(ctx, c)
		Expect(err).NotTo(HaveOccurred())
		Expect(holder).To(Equal(primary.Name))
	})
}

// apiServerRules drop what a pod sends to the API server, by the kubernetes Service's
// ClusterIP and by the server's own address behind it.
func apiServerRules(ctx SpecContext) [][]string {
	svc := &corev1.Service{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, svc)).To(Succeed())
	rules := [][]string{{"OUTPUT", "-d", svc.Spec.ClusterIP, "-j", "DROP"}}
	endpoints := &corev1.Endpoints{} //nolint:staticcheck // the API server's own address is published here
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, endpoints)).To(Succeed())
	for _, subset := range endpoints.Subsets {
		for _, address := range subset.Addresses {
			rules = append(rules, []string{"OUTPUT", "-d", address.IP, "-j", "DROP"})
		}
	}
	return rules
}

func leaseRenewTime(ctx SpecContext, c *pgv1.PostgresCluster) time.Time {
	lease := &coordinationv1.Lease{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name + "-primary"}, lease)).To(Succeed())
	if lease.Spec.RenewTime == nil {
		return time.Time{}
	}
	return lease.Spec.RenewTime.Time
}
