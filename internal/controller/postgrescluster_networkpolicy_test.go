package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// testOperatorNamespace is where the suite's operator says it runs (POD_NAMESPACE).
const testOperatorNamespace = "pgpilot-system"

var _ = Describe("The NetworkPolicy of spec.networkPolicy", func() {
	networkPolicy := func(c *pgv1.PostgresCluster) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: pgbuilder.NetworkPolicyName(c)}}
	}

	It("is made, owned and kept while enabled, and deleted when disabled", func() {
		app := networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"}}}
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.NetworkPolicy = &pgv1.NetworkPolicySpec{Enabled: true, Clients: []networkingv1.NetworkPolicyPeer{app}}
		}))
		np := networkPolicy(cluster)
		Eventually(get).WithArguments(np).Should(Succeed())
		Expect(metav1.IsControlledBy(np, fetch(cluster))).To(BeTrue(), "the cluster must control its NetworkPolicy")
		Expect(np.Spec.Ingress).To(HaveLen(3))
		Expect(np.Spec.Ingress[0].From).To(ContainElement(app))
		Expect(np.Spec.Ingress[1].From).To(ConsistOf(networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{
			MatchLabels: map[string]string{"kubernetes.io/metadata.name": testOperatorNamespace}}}))

		By("an edit by someone else is undone")
		np.Spec.Ingress = nil
		Expect(k8sClient.Update(ctx, np)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(get(np)).To(Succeed())
			g.Expect(np.Spec.Ingress).To(HaveLen(3))
		}).Should(Succeed())

		By("disabling it deletes it")
		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.NetworkPolicy.Enabled = false })
		Eventually(func() bool { return apierrors.IsNotFound(get(networkPolicy(cluster))) }).Should(BeTrue())
	})

	It("is not made when not asked for", func() {
		cluster := createCluster(newCluster(newNamespace()))
		Eventually(func() int64 { return fetch(cluster).Status.ObservedGeneration }).WithTimeout(10 * time.Second).Should(Equal(cluster.Generation))
		Expect(apierrors.IsNotFound(get(networkPolicy(cluster)))).To(BeTrue())
	})
})
