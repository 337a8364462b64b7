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

	It("runs the operator's image of the default major when unset, records it, and refuses another major set later", func() {
		c := createCluster(newCluster(namespace))
		sts := statefulSet(c)
		Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal(testImage))
		Expect(sts.Annotations).To(HaveKeyWithValue(pgbuilder.PostgresMajorAnnotation, "17"))
		Eventually(func() int32 { return fetch(c).Status.PostgresMajor }).Should(Equal(DefaultPostgresMajor))

		// Setting the field where there was none passes the API (it cannot know the data's
		// major); the operator refuses it and leaves the instances as they are.
		updateCluster(c, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 18 })
		Eventually(func() string { return degradedReason(c) }).Should(Equal("MajorVersionChange"))
		Expect(statefulSet(c).Spec.Template.Spec.Containers[0].Image).To(Equal(testImage))
		// The API takes it back to the data's major (status.postgresMajor), and nothing else.
		c = fetch(c)
		c.Spec.PostgresVersion = 15
		Expect(apierrors.IsInvalid(k8sClient.Update(ctx, c))).To(BeTrue())
		updateCluster(c, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 17 })
		Eventually(func() string { return degradedReason(c) }).ShouldNot(Equal("MajorVersionChange"))
	})

	It("runs the operator's image of the major named", func() {
		c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 15 }))
		sts := statefulSet(c)
		Expect(sts.Spec.Template.Spec.Containers[0].Image).To(Equal("registry.example/postgresql:15"))
		Expect(sts.Annotations).To(HaveKeyWithValue(pgbuilder.PostgresMajorAnnotation, "15"))
	})

	It("is refused by the API when changed, removed, or not a major pgpilot ships", func() {
		c := createCluster(newCluster(namespace, func(c *pgv1.PostgresCluster) { c.Spec.PostgresVersion = 15 }))
		for _, version := range []int32{17, 0} {
			c = fetch(c)
			c.Spec.PostgresVersion = version
			err := k8sClient.Update(ctx, c)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%d: %v", version, err)
			Expect(err.Error()).To(ContainSubstring("spec.postgresVersion cannot change or be removed"))
		}
		err := k8sClient.Create(ctx, newCluster(namespace, func(c *pgv1.PostgresCluster) {
			c.Name = "sixteen"
			c.Spec.PostgresVersion = 16
		}))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring("supported values: \"15\", \"17\", \"18\""))
	})
})
