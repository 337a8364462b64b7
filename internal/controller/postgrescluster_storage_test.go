package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

var _ = Describe("Growing spec.storage.size", func() {
	It("expands the claims and replaces the StatefulSet without touching the pods", func() {
		class := &storagev1.StorageClass{
			ObjectMeta:           metav1.ObjectMeta{GenerateName: "expandable-"},
			Provisioner:          "example.com/test",
			AllowVolumeExpansion: ptr.To(true),
		}
		Expect(k8sClient.Create(ctx, class)).To(Succeed())
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Instances = 1
			c.Spec.Storage.StorageClassName = ptr.To(class.Name)
		}))

		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name, Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(sts).Should(Succeed())
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.InstancePodName(cluster, 0), Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(pod).Should(Succeed())
		// Bind the claim as a provisioner would, so the API server allows expanding it.
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: claimName(sts, 0), Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(claim).Should(Succeed())
		claim.Status.Phase = corev1.ClaimBound
		claim.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
		Expect(k8sClient.Status().Update(ctx, claim)).To(Succeed())

		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("3Gi") })

		Eventually(func(g Gomega) {
			replaced := &appsv1.StatefulSet{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(sts), replaced)).To(Succeed())
			g.Expect(replaced.UID).NotTo(Equal(sts.UID))
			size, ok := claimSize(replaced)
			g.Expect(ok).To(BeTrue())
			g.Expect(size.String()).To(Equal("3Gi"))
		}).Should(Succeed())
		Expect(get(claim)).To(Succeed())
		Expect(claim.Spec.Resources.Requests.Storage().String()).To(Equal("3Gi"))
		kept := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), kept)).To(Succeed())
		Expect(kept.UID).To(Equal(pod.UID), "the instance pod must survive the StatefulSet replacement")
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("VolumesGrown"))
	})

	It("reports claims that cannot grow and still moves to the larger template", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) { c.Spec.Instances = 1 }))
		sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: cluster.Name, Namespace: cluster.Namespace}}
		Eventually(get).WithArguments(sts).Should(Succeed())
		Eventually(get).WithArguments(&corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claimName(sts, 0), Namespace: cluster.Namespace}}).Should(Succeed())

		updateCluster(cluster, func(c *pgv1.PostgresCluster) { c.Spec.Storage.Size = resource.MustParse("2Gi") })
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("VolumeExpansionFailed"))
		Eventually(func(g Gomega) {
			replaced := &appsv1.StatefulSet{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(sts), replaced)).To(Succeed())
			size, _ := claimSize(replaced)
			g.Expect(size.String()).To(Equal("2Gi"))
		}).Should(Succeed())
	})
})
