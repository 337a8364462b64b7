package controller

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// Whoever may create or label pods in the namespace can make one carry a cluster's labels. The
// operator must not take it for an instance: it would send it the agents' token, and count it
// among the instances it fails over between.
var _ = Describe("A pod that only looks like an instance", func() {
	It("is never asked anything, nor sent the agents' token", func() {
		var mu sync.Mutex
		var asked []string
		decoy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, r.URL.Path+" token="+r.Header.Get("Authorization"))
			w.WriteHeader(http.StatusServiceUnavailable)
		}))
		DeferCleanup(decoy.Close)

		namespace := newNamespace()
		// A real owner: the garbage collector removes pods whose owner does not exist.
		owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "not-a-statefulset", Namespace: namespace}}
		Expect(k8sClient.Create(ctx, owner)).To(Succeed())
		cluster := newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 1 })
		for _, pod := range []*corev1.Pod{
			{ObjectMeta: metav1.ObjectMeta{Name: "decoy"}},
			// Named like the next instance, but no StatefulSet's.
			{ObjectMeta: metav1.ObjectMeta{Name: "db-1", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}}},
		} {
			pod.Namespace = namespace
			pod.Labels = pgbuilder.CommonLabels(cluster)
			pod.Spec.Containers = []corev1.Container{{Name: pgbuilder.PostgresContainerName, Image: "decoy"}}
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			agentAddresses.set(namespace, pod.Name, strings.TrimPrefix(decoy.URL, "http://"))
		}
		createCluster(cluster)

		By("reconciling the cluster with its StatefulSet's pod, and the decoys beside it")
		Eventually(func(g Gomega) {
			g.Expect(get(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: namespace}})).To(Succeed())
			pods := &corev1.PodList{}
			g.Expect(k8sClient.List(ctx, pods, client.InNamespace(namespace))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(3))
			g.Expect(fetch(cluster).Status.Phase).NotTo(BeEmpty())
		}).Should(Succeed())
		markPodReady(namespace, "db-0")
		Consistently(func() []string {
			mu.Lock()
			defer mu.Unlock()
			return asked
		}, 5*time.Second, 250*time.Millisecond).Should(BeEmpty())
		Expect(fetch(cluster).Status.Instances).To(BeEquivalentTo(1), "the decoys counted as instances")
	})
})
