package controller

import (
	"bytes"
	"crypto/tls"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A CA rotation against a real agent over its mTLS API: the operator must reach it at every
// step, so the agent must trust the operator's certificate and the operator the agent's
// throughout; the test plays the kubelet, projecting the TLS Secret into the agent's files, and
// holds the projection back to see that the rotation waits for it.
var _ = Describe("CA rotation with a real agent", func() {
	It("trusts the new CA before it issues, and drops the old one only once the instance uses the new certificates", func() {
		cluster := createCluster(newCluster(newNamespace(), onHostServers, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 1 }))
		a := runAgentFor(cluster, "db-0", 0, "db-0", clusterLeases(cluster))
		expectAgentAnswers(cluster)

		secretOf := func(name string) *corev1.Secret {
			secret := &corev1.Secret{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: name}, secret)).To(Succeed())
			return secret
		}
		oldCA := secretOf(pgbuilder.CASecretName(cluster))
		var projecting atomic.Bool
		kubelet := make(chan struct{})
		DeferCleanup(func() { close(kubelet) })
		go func() {
			defer GinkgoRecover()
			for {
				select {
				case <-kubelet:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if projecting.Load() {
					pgtest.SetCertificates(GinkgoT(), a.Config, pgtest.Certificates{Files: secretOf(pgbuilder.TLSSecretName(cluster)).Data})
				}
			}
		}()

		updateCluster(cluster, func(c *pgv1.PostgresCluster) {
			c.Annotations = map[string]string{pgv1.RotateCAAnnotation: "2026-12-05T15:00:00Z"}
		})
		By("the next CA is trusted beside the current one, and nothing moves on while the instance has not loaded it")
		var next []byte
		Eventually(func(g Gomega) {
			ca := secretOf(pgbuilder.CASecretName(cluster))
			g.Expect(pgbuilder.CARotationOf(ca)).To(Equal(pgbuilder.CARotationTrusting))
			next = ca.Data[pgbuilder.CANextCertKey]
			tls := secretOf(pgbuilder.TLSSecretName(cluster))
			g.Expect(tls.Data[agentapi.TLSCAFile]).To(Equal(pgbuilder.CATrust(ca)))
			g.Expect(certs.IssuedBy(tls.Data[agentapi.TLSCertFile], oldCA.Data[agentapi.TLSCAFile])).To(BeTrue())
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(pgbuilder.CARotationOf(secretOf(pgbuilder.CASecretName(cluster)))).To(Equal(pgbuilder.CARotationTrusting))
		}, 4*time.Second, 250*time.Millisecond).Should(Succeed())
		progressing := condition(fetch(cluster), pgv1.ConditionProgressing)
		Expect(progressing).NotTo(BeNil())
		Expect(progressing.Reason).To(Equal(reasonCARotation))
		Expect(progressing.Message).To(ContainSubstring("waiting for db-0 to load the certificates"))

		By("once projected, the new CA issues everything, and the old one is dropped once the instance loaded that")
		projecting.Store(true)
		Eventually(func(g Gomega) {
			ca := secretOf(pgbuilder.CASecretName(cluster))
			g.Expect(pgbuilder.CARotationOf(ca)).To(Equal(pgbuilder.CARotationNone))
			g.Expect(ca.Data[agentapi.TLSCAFile]).To(Equal(next))
			tls := secretOf(pgbuilder.TLSSecretName(cluster))
			g.Expect(tls.Data[agentapi.TLSCAFile]).To(Equal(next))
			for _, file := range []string{agentapi.TLSCertFile, agentapi.ReplicationCertFile} {
				g.Expect(certs.IssuedBy(tls.Data[file], next)).To(BeTrue(), file)
			}
			metrics := secretOf(pgbuilder.MetricsSecretName(cluster))
			g.Expect(certs.IssuedBy(metrics.Data[corev1.TLSCertKey], next)).To(BeTrue())
			g.Expect(certs.IssuedBy(ca.Data[pgbuilder.OperatorCertKey], next)).To(BeTrue())
		}, 60*time.Second).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElements(
			"CARotationStarted", "CARotationReissuing", "CARotationCompleted"))
		expectAgentAnswers(cluster)

		By("the agent, once it loaded the last step, refuses the old CA's operator certificate")
		token := string(secretOf(pgbuilder.AgentSecretName(cluster)).Data[corev1.BasicAuthPasswordKey])
		operator := operatorTLS(cluster, secretOf(pgbuilder.CASecretName(cluster)))
		Eventually(func() (string, error) {
			status, err := agentapi.HTTPClient{}.Status(ctx, agentapi.Endpoint{Address: a.Address(), Token: token, TLS: operator})
			if err != nil {
				return "", err
			}
			return status.CertificatesDigest, nil
		}, 30*time.Second).Should(Equal(agentapi.CertificatesDigest(secretOf(pgbuilder.TLSSecretName(cluster)).Data)))
		oldOperator := operatorTLS(cluster, &corev1.Secret{Data: map[string][]byte{agentapi.TLSCAFile: next,
			pgbuilder.OperatorCertKey: oldCA.Data[pgbuilder.OperatorCertKey], pgbuilder.OperatorKeyKey: oldCA.Data[pgbuilder.OperatorKeyKey]}})
		_, err := agentapi.HTTPClient{}.Status(ctx, agentapi.Endpoint{Address: a.Address(), Token: token, TLS: oldOperator})
		Expect(err).To(HaveOccurred(), "the agent still accepts a certificate of the old CA")
		Expect(bytes.Contains(secretOf(pgbuilder.CASecretName(cluster)).Data[agentapi.TLSCAFile], oldCA.Data[agentapi.TLSCAFile])).To(BeFalse())
	})
})

// expectAgentAnswers: the operator reaches the instance's agent (its status carries no error).
func expectAgentAnswers(cluster *pgv1.PostgresCluster) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		current := fetch(cluster)
		g.Expect(current.Status.InstancesStatus).To(HaveLen(1))
		g.Expect(current.Status.InstancesStatus[0].Error).To(BeEmpty())
		g.Expect(current.Status.InstancesStatus[0].Role).To(Equal("primary"))
		g.Expect(condition(current, pgv1.ConditionProgressing).Status).To(Equal(metav1.ConditionFalse))
	}, 60*time.Second).Should(Succeed())
}

// operatorTLS is how the operator reaches the cluster's agents with the CA Secret ca.
func operatorTLS(cluster *pgv1.PostgresCluster, ca *corev1.Secret) *tls.Config {
	GinkgoHelper()
	config, err := agentapi.ClientTLS(pgbuilder.CATrust(ca), ca.Data[pgbuilder.OperatorCertKey], ca.Data[pgbuilder.OperatorKeyKey],
		pgbuilder.AgentServerName(cluster))
	Expect(err).NotTo(HaveOccurred())
	return config
}
