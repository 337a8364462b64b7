package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
)

// A restarted leader installs the policies again: it must not write what is already there
// (a restart writes nothing, test/bench), yet must repair what differs or is gone.
var _ = Describe("The admission policy installer", Serial, func() {
	It("writes a policy or binding only when it is missing or differs from what it would apply", func(ctx SpecContext) {
		installer := &AdmissionPolicies{Client: k8sClient, Reader: k8sClient}
		policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.PrimaryLeasePolicyName}}
		binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.SecretReferencesPolicyName}}
		DeferCleanup(func(ctx SpecContext) {
			for _, name := range []string{pgbuilder.PrimaryLeasePolicyName, pgbuilder.SecretReferencesPolicyName} {
				_ = k8sClient.Delete(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
				_ = k8sClient.Delete(ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
		})
		Expect(installer.apply(ctx)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
		policyVersion, bindingVersion := policy.ResourceVersion, binding.ResourceVersion

		By("leaving them alone when they are as built")
		Expect(installer.apply(ctx)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
		Expect(policy.ResourceVersion).To(Equal(policyVersion))
		Expect(binding.ResourceVersion).To(Equal(bindingVersion))

		By("applying over a policy an older operator installed")
		validations := len(policy.Spec.Validations)
		policy.Annotations[appliedHashAnnotation] = "older"
		policy.Spec.Validations = policy.Spec.Validations[:1]
		Expect(k8sClient.Update(ctx, policy)).To(Succeed())
		Expect(installer.apply(ctx)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		Expect(policy.Spec.Validations).To(HaveLen(validations))

		By("putting back a deleted binding")
		Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
		Expect(installer.apply(ctx)).To(Succeed())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
		Expect(binding.Spec.PolicyName).To(Equal(pgbuilder.SecretReferencesPolicyName))
	})
})
