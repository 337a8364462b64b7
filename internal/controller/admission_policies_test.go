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
// (a restart writes nothing, test/bench), yet must repair what differs or is gone. Writes are
// counted as requests: applying what is there changes no resourceVersion, yet is a write.
var _ = Describe("The admission policy installer", Serial, func() {
	It("writes a policy or binding only when it is missing or differs from what it would apply", func(ctx SpecContext) {
		counted := &writeCounter{byNamespace: map[string]int{}}
		installer := &AdmissionPolicies{Client: countingClient{Client: k8sClient, writes: counted}, Reader: k8sClient}
		// install runs the installer once and says how many writes it made.
		install := func() int {
			before := counted.count("")
			Expect(installer.apply(ctx)).To(Succeed())
			return counted.count("") - before
		}
		policy := &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.PrimaryLeasePolicyName}}
		binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.SecretReferencesPolicyName}}
		DeferCleanup(func(ctx SpecContext) {
			for _, name := range []string{pgbuilder.PrimaryLeasePolicyName, pgbuilder.SecretReferencesPolicyName} {
				_ = k8sClient.Delete(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})
				_ = k8sClient.Delete(ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})
			}
		})
		Expect(install()).To(Equal(4), "two policies and their bindings")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())

		By("leaving them alone when they are as built")
		Expect(install()).To(BeZero())

		By("applying over a policy an older operator installed")
		validations := len(policy.Spec.Validations)
		policy.Annotations[appliedHashAnnotation] = "older"
		policy.Spec.Validations = policy.Spec.Validations[:1]
		Expect(k8sClient.Update(ctx, policy)).To(Succeed())
		Expect(install()).To(Equal(1))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), policy)).To(Succeed())
		Expect(policy.Spec.Validations).To(HaveLen(validations))

		By("putting back a deleted binding")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
		Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
		Expect(install()).To(Equal(1))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(binding), binding)).To(Succeed())
		Expect(binding.Spec.PolicyName).To(Equal(pgbuilder.SecretReferencesPolicyName))
	})
})
