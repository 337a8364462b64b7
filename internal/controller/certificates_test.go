package controller

import (
	"strings"
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
		_, err := agentapi.ClientTLS(caCert, ca.Data[pgbuilder.OperatorCertKey], ca.Data[pgbuilder.OperatorKeyKey], pgbuilder.AgentServerName(cluster))
		Expect(err).NotTo(HaveOccurred())

		By("a scraper's Secret: the metrics client certificate and the CA")
		metrics := secret(cluster, pgbuilder.MetricsSecretName(cluster))
		Expect(metrics.Type).To(Equal(corev1.SecretTypeTLS))
		Expect(metrics.Data[corev1.ServiceAccountRootCAKey]).To(Equal(caCert))
		Expect(subject(metrics.Data[corev1.TLSCertKey])).To(Equal(agentapi.MetricsCommonName))
		_, err = agentapi.ClientTLS(caCert, metrics.Data[corev1.TLSCertKey], metrics.Data[corev1.TLSPrivateKeyKey], pgbuilder.AgentServerName(cluster))
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
		metricsBefore := secret(cluster, pgbuilder.MetricsSecretName(cluster))
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
			metrics := &corev1.Secret{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(metricsBefore), metrics)).To(Succeed())
			g.Expect(metrics.Data[corev1.TLSCertKey]).NotTo(Equal(metricsBefore.Data[corev1.TLSCertKey]))
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

var _ = Describe("User-provided certificates", func() {
	// userServer is a kubernetes.io/tls Secret with a certificate for names from its own CA.
	userServer := func(ns, name string, names []string) (*corev1.Secret, certs.Pair) {
		ca, err := certs.NewAuthority("user CA", time.Now(), 24*time.Hour)
		Expect(err).NotTo(HaveOccurred())
		server, err := certs.Issue(ca, certs.Request{CommonName: "db", DNSNames: names, Usage: certs.Server, Validity: time.Hour}, time.Now())
		Expect(err).NotTo(HaveOccurred())
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": server.CertPEM, "tls.key": server.KeyPEM, "ca.crt": ca.CertPEM}}, ca
	}
	degradedBy := func(cluster *pgv1.PostgresCluster, parts ...string) func(Gomega) {
		return func(g Gomega) {
			d := condition(fetch(cluster), pgv1.ConditionDegraded)
			g.Expect(d).NotTo(BeNil())
			g.Expect(d.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(d.Reason).To(Equal("CertificatesInvalid"))
			for _, p := range parts {
				g.Expect(d.Message).To(ContainSubstring(p))
			}
		}
	}

	It("serves the user's server certificate and issues the replication certificate from the user's client CA, and refuses bad ones", func() {
		ns := newNamespace()
		cluster := createCluster(newCluster(ns, func(c *pgv1.PostgresCluster) {
			c.Spec.Certificates.ServerTLSSecret = "db-server"
			c.Spec.Certificates.ClientCASecret = "db-clients"
		}))
		By("a missing Secret is named, and the new cluster starts with pgpilot's own certificates")
		Eventually(degradedBy(cluster, "spec.certificates.serverTLSSecret", `"db-server" does not exist`)).Should(Succeed())
		tlsKey := client.ObjectKey{Namespace: ns, Name: pgbuilder.TLSSecretName(cluster)}
		instanceTLS := &corev1.Secret{}
		Eventually(k8sClient.Get).WithArguments(ctx, tlsKey, instanceTLS).Should(Succeed())

		By("good Secrets are used")
		good, userCA := userServer(ns, "db-server", pgbuilder.UserServerNames(cluster))
		Expect(k8sClient.Create(ctx, good)).To(Succeed())
		clientCA, err := certs.NewAuthority("user client CA", time.Now(), 24*time.Hour)
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db-clients", Namespace: ns},
			Data: map[string][]byte{"ca.crt": clientCA.CertPEM, "ca.key": clientCA.KeyPEM}})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, tlsKey, instanceTLS)).To(Succeed())
			g.Expect(instanceTLS.Data[agentapi.PostgresCertFile]).To(Equal(good.Data["tls.crt"]))
			g.Expect(instanceTLS.Data[agentapi.PostgresKeyFile]).To(Equal(good.Data["tls.key"]))
			g.Expect(string(instanceTLS.Data[agentapi.ServerCAFile])).To(ContainSubstring(string(userCA.CertPEM)))
			g.Expect(instanceTLS.Data[agentapi.ClientCAFile]).To(Equal(clientCA.CertPEM))
			g.Expect(condition(fetch(cluster), pgv1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		}).Should(Succeed())
		replication, err := certs.ParseCertificate(instanceTLS.Data[agentapi.ReplicationCertFile])
		Expect(err).NotTo(HaveOccurred())
		clientCACert, _ := certs.ParseCertificate(clientCA.CertPEM)
		Expect(replication.CheckSignatureFrom(clientCACert)).To(Succeed(), "the replication certificate is not from the user's client CA")
		// The agent API keeps pgpilot's certificate: the operator verifies it with the cluster's CA.
		Expect(instanceTLS.Data[agentapi.TLSCertFile]).NotTo(Equal(good.Data["tls.crt"]))

		By("a certificate whose names fall short, or whose key does not match, is refused; the instances keep the good one")
		short, _ := userServer(ns, "db-server", []string{"db-rw"})
		Expect(k8sClient.Update(ctx, short)).To(Succeed())
		Eventually(degradedBy(cluster, `"db-server"`, "do not cover", "db-ro."+ns+".svc")).Should(Succeed())
		mismatched := good.DeepCopy()
		mismatched.Data["tls.key"] = short.Data["tls.key"]
		mismatched.ResourceVersion = ""
		Expect(k8sClient.Update(ctx, mismatched)).To(Succeed())
		Eventually(degradedBy(cluster, `"db-server"`, "private key does not match")).Should(Succeed())
		Expect(k8sClient.Get(ctx, tlsKey, instanceTLS)).To(Succeed())
		Expect(instanceTLS.Data[agentapi.PostgresCertFile]).To(Equal(good.Data["tls.crt"]))
		Eventually(eventReasons).WithArguments(cluster).Should(ContainElement("CertificatesInvalid"))
	})

	It("rejects a server CA Secret without the server's Secret", func() {
		c := newCluster(newNamespace(), func(c *pgv1.PostgresCluster) { c.Spec.Certificates.ServerCASecret = "ca" })
		err := k8sClient.Create(ctx, c)
		Expect(err).To(MatchError(ContainSubstring("certificates.serverCASecret needs certificates.serverTLSSecret")))
	})
})
