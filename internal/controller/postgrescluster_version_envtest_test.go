package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

var _ = Describe("spec.postgresVersion", func() {
	var namespace string
	BeforeEach(func() { namespace = newNamespace() })

	statefulSet := func(c *pgv1.PostgresCluster) *appsv1.StatefulSet {
		sts := &appsv1.StatefulSet{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Name}, sts)
		}).Should(Succeed())
		return sts
	}

	It("runs the operator's image of the default major when unset, records it, and starts a major upgrade when a higher one is set later", func() {
		c := createCluster(newCluster(namespace))
		sts := statefulSet(c)
		Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal(testImage))
		Expect(sts.Annotations).To(HaveKeyWithValue(pgbuilder.PostgresMajorAnnotation, "17"))
		Eventually(func() int32 { return fetch(c).Status.PostgresMajor }).Should(Equal(DefaultPostgresMajor))

		// A higher major is an upgrade: the pods move to its image with the data's major's
		// server carried in by an init container of the old image; the data's major stays.
		// (The steps after need instances: the unit tests and the e2e run them.)
		updateCluster(c, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 18 })
		Eventually(func(g Gomega) {
			pod := statefulSet(c).Spec.Template.Spec
			g.Expect(pod.Containers[0].Image).To(Equal("registry.example/postgresql:18"))
			g.Expect(pod.InitContainers).To(HaveLen(2))
			g.Expect(pod.InitContainers[1].Name).To(Equal(pgbuilder.CarryContainerName))
			g.Expect(pod.InitContainers[1].Image).To(Equal(testImage))
			g.Expect(pod.InitContainers[1].Command).To(Equal([]string{pgbuilder.AgentPath, "carry", "17", "/pgpilot/carried"}))
		}).Should(Succeed())
		// Lower than the data's major is refused by the API; back to it cancels the upgrade
		// before its point of no return, and the pods go back to the data's major's image.
		c = fetch(c)
		c.Spec.PostgresVersion = 15
		Expect(apierrors.IsInvalid(k8sClient.Update(ctx, c))).To(BeTrue())
		Expect(fetch(c).Status.PostgresMajor).To(Equal(int32(17)))
		updateCluster(c, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 17 })
		Eventually(func(g Gomega) {
			pod := statefulSet(c).Spec.Template.Spec
			g.Expect(pod.Containers[0].Image).To(Equal(testImage))
			g.Expect(pod.InitContainers).To(HaveLen(1))
		}).Should(Succeed())
	})

	It("runs the operator's image of the major named", func() {
		c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 15 }))
		sts := statefulSet(c)
		Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example/postgresql:15"))
		Expect(sts.Annotations).To(HaveKeyWithValue(pgbuilder.PostgresMajorAnnotation, "15"))
	})

	It("is refused by the API when lowered, removed, or not a major pgpilot ships", func() {
		c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 17 }))
		for _, version := range []int32{15, 0} {
			c = fetch(c)
			c.Spec.PostgresVersion = version
			err := k8sClient.Update(ctx, c)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%d: %v", version, err)
			Expect(err.Error()).To(ContainSubstring("spec.postgresVersion cannot be lowered or removed"))
		}
		err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Name = "sixteen"
			c.Spec.PostgresVersion = 16
		}))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("supported values: \"15\", \"17\", \"18\""))
	})
})
