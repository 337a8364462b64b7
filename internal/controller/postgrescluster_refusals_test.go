package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// Writes the API server refuses for good stop, instead of being retried on every event and
// backoff step. This control plane has no namespace controller, so a deleted namespace stays
// terminating, as one held by another controller's finalizer does.
var _ = Describe("Writes the API server refuses for good", func() {
	deleteChild := func(obj client.Object) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed())
	}
	service := func(c *pgv1.PostgresCluster, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	}
	// settledWrites waits out a reconcile already under way (one that started before the
	// refusal reached the cache tries once more, rightly) and returns the count it ended on.
	settledWrites := func(namespace string) int {
		last := -1
		Eventually(func() bool {
			n := writes.count(namespace)
			settled := n == last
			last = n
			return settled
		}).WithPolling(time.Second).Should(BeTrue())
		return last
	}

	It("stop in a namespace stuck terminating, however many events arrive", func() {
		cluster := createCluster(newCluster(newNamespace()))
		Eventually(get).WithArguments(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace, Name: pgbuilder.StatefulSetName(cluster)}}).Should(Succeed())
		Expect(k8sClient.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster.Namespace}})).To(Succeed())

		deleteChild(service(cluster, pgbuilder.ReadWriteServiceName(cluster)))
		Eventually(degradedReason).WithArguments(cluster).Should(Equal(reasonNamespaceTerminating))
		// A reconcile that reads a cache without the condition yet tries once more, rightly.
		Eventually(func(g Gomega) {
			cached := &pgv1.PostgresCluster{}
			g.Expect(managerCache.Get(ctx, client.ObjectKeyFromObject(cluster), cached)).To(Succeed())
			g.Expect(condition(cached, pgv1.ConditionDegraded)).NotTo(BeNil())
			g.Expect(condition(cached, pgv1.ConditionDegraded).Reason).To(Equal(reasonNamespaceTerminating))
		}).Should(Succeed())

		before := settledWrites(cluster.Namespace)
		for _, name := range []string{pgbuilder.ReadOnlyServiceName(cluster), pgbuilder.AnyServiceName(cluster)} {
			deleteChild(service(cluster, name)) // each deletion is a watch event, a reconcile
		}
		Consistently(func() int { return writes.count(cluster.Namespace) - before }, 5*time.Second).
			Should(BeZero(), "a cluster in a terminating namespace must not keep trying to create children")
	})

	It("hold a spec that makes an invalid object until the spec changes", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Resources = corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			}
		}))
		Eventually(degradedReason).WithArguments(cluster).Should(Equal(reasonChildRejected))
		Expect(condition(fetch(cluster), pgv1.ConditionDegraded).Message).To(ContainSubstring("must be less than or equal to cpu limit"))
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement(reasonChildRejected))

		before := settledWrites(cluster.Namespace)
		deleteChild(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: pgbuilder.ConfigMapName(cluster)}})
		Consistently(func() int { return writes.count(cluster.Namespace) - before }, 5*time.Second).
			Should(BeZero(), "a rejected spec must not be re-sent on every event and backoff step")

		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Resources.Limits = nil })
		Eventually(get).WithArguments(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace, Name: pgbuilder.StatefulSetName(cluster)}}).Should(Succeed())
		Eventually(degradedReason).WithArguments(cluster).Should(BeEmpty())
	})
})

// Input the API server accepts but no node can satisfy (contradictory scheduling, an unknown
// storage class) leaves pods Pending: the cluster says why instead of waiting silently.
var _ = Describe("Instances the scheduler cannot place", func() {
	It("make the cluster Degraded with the scheduler's message", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Scheduling.NodeSelector = map[string]string{"disktype": "nvme"}
		}))
		pod := &corev1.Pod{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: "db-0"}, pod)
		}).Should(Succeed())
		// What the scheduler writes when no node matches.
		message := "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: message, LastTransitionTime: metav1.Now()}}
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			d := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(d).NotTo(BeNil(), "no Degraded condition yet")
			g.Expect(d.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(d.Reason).To(Equal("InstancesUnschedulable"))
			g.Expect(d.Message).To(ContainSubstring(message))
		}).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("InstancesUnschedulable"))
	})
})
