package controller

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agentapi"
)

var _ = Describe("Certificates", func() {
	secret := func(c *pgv1.PostgresCluster, name string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
		Eventually(get).WithArguments(s).Should(Succeed(), "Secret %s", name)
		return s
	}
	subject := func(pem []byte) string {
		cert, err := certs.ParseCertificate(pem)
		Expect(err).NotTo(HaveOccurred())
		return cert.Subject.CommonName
	}

	It("issues a CA, the instances' certificates for every name they answer to, and the operator's", func() {
		cluster := createCluster(newCluster(newNamespace()))
		ca := secret(cluster, pgbuilder.CASecretName(cluster))
		tlsSecret := secret(cluster, pgbuilder.TLSSecretName(cluster))
		caCert := ca.Data[agentapi.TLSCAFile]
		Expect(tlsSecret.Data[agentapi.TLSCAFile]).To(Equal(caCert))
		server := certs.Pair{CertPEM: tlsSecret.Data[agentapi.TLSCertFile], KeyPEM: tlsSecret.Data[agentapi.TLSKeyFile]}
		ns := cluster.Namespace
		Expect(certs.CheckServer(server, caCert, []string{"db-rw", "db-ro." + ns, "db-r." + ns + ".svc",
			"db-rw." + ns + ".svc.cluster.local", "db-0.db-instances." + ns + ".svc"}, time.Now())).To(Succeed())
		Expect(subject(tlsSecret.Data[agentapi.ReplicationCertFile])).To(Equal(agentapi.DefaultReplicationUser))
		Expect(subject(ca.Data[pgbuilder.OperatorCertKey])).To(Equal(agentapi.OperatorCommonName))
		_, err := agentapi.OperatorTLS(caCert, ca.Data[pgbuilder.OperatorCertKey], ca.Data[pgbuilder.OperatorKeyKey], pgbuilder.AgentServerName(cluster))
		Expect(err).NotTo(HaveOccurred())

		By("the application Secret says how to connect with verification")
		app := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.AppSecretName(cluster), Namespace: ns}}
		Eventually(func(g Gomega) {
			g.Expect(get(app)).To(Succeed())
			g.Expect(app.Data[pgbuilder.AppCAKey]).To(Equal(caCert))
			g.Expect(string(app.Data[pgbuilder.AppURIKey])).To(And(
				HavePrefix("postgresql://app:"), ContainSubstring("@db-rw."+ns+".svc:5432/app?sslmode=verify-full")))
		}).Should(Succeed())

		By("the ConfigMap requires TLS: no instance runs an agent without certificates")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: pgbuilder.ConfigMapName(cluster), Namespace: ns}}
		Eventually(get).WithArguments(cm).Should(Succeed())
		Expect(cm.Data[agentapi.TLSPolicyFile]).To(Equal(`{"required":true}`))
		Expect(cm.Data[agentapi.HBAConfFile]).To(ContainSubstring("hostssl replication streaming_replica all cert"))
	})

	It("renews the certificates when due, keeping the CA, with an Event", func() {
		cluster := createCluster(newCluster(newNamespace(), func(c *pgv1.PostgresCluster) {
			c.Spec.Certificates.Duration = &metav1.Duration{Duration: time.Hour}
			c.Spec.Certificates.RenewBefore = &metav1.Duration{Duration: 10 * time.Minute}
		}))
		before := secret(cluster, pgbuilder.TLSSecretName(cluster))
		caBefore := secret(cluster, pgbuilder.CASecretName(cluster))
		renewAt, err := pgbuilder.SecretRenewAt(before)
		Expect(err).NotTo(HaveOccurred())
		Expect(renewAt).To(BeTemporally("~", testClock.now().Add(50*time.Minute), time.Minute))

		testClock.advance(51 * time.Minute)
		DeferCleanup(testClock.advance, -51*time.Minute)
		Eventually(func(g Gomega) {
			after := &corev1.Secret{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(before), after)).To(Succeed())
			g.Expect(after.Data[agentapi.TLSCertFile]).NotTo(Equal(before.Data[agentapi.TLSCertFile]))
			g.Expect(after.Data[agentapi.ReplicationCertFile]).NotTo(Equal(before.Data[agentapi.ReplicationCertFile]))
			g.Expect(after.Data[agentapi.TLSCAFile]).To(Equal(caBefore.Data[agentapi.TLSCAFile]))
			ca := &corev1.Secret{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(caBefore), ca)).To(Succeed())
			g.Expect(ca.Data[pgbuilder.CAKeyKey]).To(Equal(caBefore.Data[pgbuilder.CAKeyKey]))
			g.Expect(ca.Data[pgbuilder.OperatorCertKey]).NotTo(Equal(caBefore.Data[pgbuilder.OperatorCertKey]))
		}).Should(Succeed())
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("CertificatesRenewed"))
	})

	It("says what is wrong with a damaged CA Secret and keeps its certificates", func() {
		cluster := createCluster(newCluster(newNamespace()))
		ca := secret(cluster, pgbuilder.CASecretName(cluster))
		tlsBefore := secret(cluster, pgbuilder.TLSSecretName(cluster))
		delete(ca.Data, pgbuilder.CAKeyKey)
		Expect(k8sClient.Update(ctx, ca)).To(Succeed())
		Eventually(func(g Gomega) {
			degraded := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(degraded).NotTo(BeNil())
			g.Expect(degraded.Reason).To(Equal("CertificatesInvalid"))
			g.Expect(degraded.Message).To(And(ContainSubstring(ca.Name), ContainSubstring(`"ca.key"`)))
		}).Should(Succeed())
		after := secret(cluster, pgbuilder.TLSSecretName(cluster))
		Expect(after.Data).To(Equal(tlsBefore.Data))
		Expect(strings.Contains(string(after.Data[agentapi.TLSCAFile]), "CERTIFICATE")).To(BeTrue())
	})
})
