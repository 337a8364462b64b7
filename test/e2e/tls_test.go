//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/certs"
)

// tlsSpecs run on a Ready cluster of the suite that calls them (it shares the bring-up).
func tlsSpecs(cluster func() *pgv1.PostgresCluster) {
	It("encrypts every replication and client connection, and clients verify the server with the app Secret's CA", func(ctx SpecContext) {
		c := cluster()
		report, ok := psqlVerified(ctx, c, "tls-check", c.Name+"-superuser", "verify-full", `SELECT format(
			'replication %s/%s encrypted by certificate, unencrypted remote clients %s, this client %s',
			(SELECT count(*) FILTER (WHERE s.ssl AND s.client_dn LIKE '%CN=streaming_replica%')
			   FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)),
			(SELECT count(*) FROM pg_stat_replication),
			(SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
			   WHERE a.client_addr IS NOT NULL AND a.client_addr <> '127.0.0.1' AND NOT s.ssl),
			(SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()))`)
		Expect(ok).To(BeTrue(), "psql with sslmode=verify-full through -rw failed:\n%s", report)
		replicas := c.Spec.Instances - 1
		Expect(report).To(ContainSubstring(fmt.Sprintf(
			"replication %d/%d encrypted by certificate, unencrypted remote clients 0, this client TLSv1.3", replicas, replicas)))

		logs, ok := psqlVerified(ctx, c, "tls-plain", c.Name+"-app", "disable", "SELECT 1")
		Expect(ok).To(BeFalse(), "a client without TLS got in:\n%s", logs)
		Expect(logs).To(ContainSubstring("no encryption"))
	})

	It("renews its certificates without dropping Ready or a write", func(ctx SpecContext) {
		c := cluster()
		secret := &corev1.Secret{}
		secretKey := client.ObjectKey{Namespace: c.Namespace, Name: c.Name + "-tls"}
		Expect(k8s.Get(ctx, secretKey, secret)).To(Succeed())
		first := serial(secret.Data["tls.crt"])
		checker := startWriteChecker(ctx, c)
		setCertificates(ctx, c, pgv1.CertificatesSpec{Duration: &metav1.Duration{Duration: 4 * time.Minute},
			RenewBefore: &metav1.Duration{Duration: time.Minute}})
		DeferCleanup(setCertificates, c, pgv1.CertificatesSpec{})
		start := time.Now()
		Eventually(func(g Gomega) {
			current := &pgv1.PostgresCluster{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
			Expect(current.Status.Phase).To(Equal(pgv1.PhaseReady), "the cluster left Ready during the renewal")
			g.Expect(k8s.Get(ctx, secretKey, secret)).To(Succeed())
			renewed := serial(secret.Data["tls.crt"])
			g.Expect(renewed).NotTo(Equal(first), "not renewed yet")
			g.Expect(servedSerial(ctx, c)).To(Equal(renewed), "the primary does not serve the renewed certificate yet")
		}).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("certificate renewal to served by the primary", time.Since(start).Round(time.Second).String())
		report := checker.finish(ctx, "certificate renewal")
		Expect(report.Failed).To(BeZero(), "writes failed during the renewal: %s", report)
		expectReplication(ctx, c, c.Spec.Instances)
	})

	It("rotates its CA with overlap without dropping Ready, a write or replication by certificate", func(ctx SpecContext) {
		c := cluster()
		caKey := client.ObjectKey{Namespace: c.Namespace, Name: pgbuilder.CASecretName(c)}
		before := &corev1.Secret{}
		Expect(k8s.Get(ctx, caKey, before)).To(Succeed())
		checker := startWriteChecker(ctx, c)
		current := c.DeepCopy()
		Expect(retryUpdate(ctx, current, func() {
			if current.Annotations == nil {
				current.Annotations = map[string]string{}
			}
			current.Annotations[pgv1.RotateCAAnnotation] = time.Now().UTC().Format(time.RFC3339)
		})).To(Succeed())
		start := time.Now()
		steps := map[pgbuilder.CARotation]bool{}
		ca := &corev1.Secret{}
		Eventually(func(g Gomega) {
			got := &pgv1.PostgresCluster{}
			Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), got)).To(Succeed())
			Expect(got.Status.Phase).To(Equal(pgv1.PhaseReady), "the cluster left Ready during the CA rotation")
			g.Expect(k8s.Get(ctx, caKey, ca)).To(Succeed())
			steps[pgbuilder.CARotationOf(ca)] = true
			g.Expect(pgbuilder.CARotationOf(ca)).To(Equal(pgbuilder.CARotationNone))
			g.Expect(ca.Data["ca.crt"]).NotTo(Equal(before.Data["ca.crt"]), "not rotated yet")
			served := servedCertificate(ctx, c)
			g.Expect(served).NotTo(BeNil())
			g.Expect(certs.IssuedBy(served, ca.Data["ca.crt"])).To(BeTrue(), "the primary does not serve a certificate of the new CA yet")
		}).WithTimeout(5 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("CA rotation, request to the old CA dropped", time.Since(start).Round(time.Second).String())
		Expect(steps).To(HaveKey(pgbuilder.CARotationTrusting), "never seen trusting both CAs")
		report := checker.finish(ctx, "CA rotation")
		Expect(report.Failed).To(BeZero(), "writes failed during the CA rotation: %s", report)

		By("the standbys reconnect with certificates of the new CA only, verified both ways")
		conn := connectSuperuser(ctx, c)
		defer func() { _ = conn.Close(ctx) }()
		var dropped int
		Expect(conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_replication").Scan(&dropped)).To(Succeed())
		Expect(dropped).To(BeEquivalentTo(c.Spec.Instances - 1))
		Eventually(func(g Gomega) {
			var byNewCertificate int
			g.Expect(conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)
				WHERE r.state = 'streaming' AND s.ssl AND s.client_dn LIKE '%CN=streaming_replica%'`).Scan(&byNewCertificate)).To(Succeed())
			g.Expect(byNewCertificate).To(BeEquivalentTo(c.Spec.Instances - 1))
		}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		Eventually(func(g Gomega) { expectReplicationWith(ctx, g, c, c.Spec.Instances) }).WithTimeout(time.Minute).Should(Succeed())
		logs, ok := psqlVerified(ctx, c, "tls-rotated", c.Name+"-app", "verify-full", "SELECT 'verified ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
		Expect(ok).To(BeTrue(), "a client verifying with the app Secret's CA failed after the rotation:\n%s", logs)
		Expect(logs).To(ContainSubstring("verified t"))
	})

	It("serves the user's certificate once spec.certificates names it, verified with the app Secret's CA", func(ctx SpecContext) {
		c := cluster()
		userSerial := userServerSecret(ctx, c, c.Name+"-user-tls")
		setCertificates(ctx, c, pgv1.CertificatesSpec{ServerTLSSecret: c.Name + "-user-tls"})
		DeferCleanup(setCertificates, c, pgv1.CertificatesSpec{})
		Eventually(func() *big.Int { return servedSerial(ctx, c) }).WithTimeout(4*time.Minute).WithPolling(2*time.Second).
			Should(Equal(userSerial), "the primary does not serve the user's certificate")
		Eventually(func() (string, error) {
			logs, ok := psqlVerified(ctx, c, fmt.Sprintf("tls-user-%d", time.Now().Unix()), c.Name+"-app", "verify-full",
				"SELECT 'verified ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
			if !ok {
				return logs, fmt.Errorf("psql failed")
			}
			return logs, nil
		}).WithTimeout(3 * time.Minute).WithPolling(10 * time.Second).Should(ContainSubstring("verified t"))
		expectReplication(ctx, c, c.Spec.Instances)
	})
}

// userServerSecret creates a kubernetes.io/tls Secret as cert-manager would: a certificate
// for the names pgpilot asks of a user's, from a CA of the user's.
func userServerSecret(ctx context.Context, c *pgv1.PostgresCluster, name string) *big.Int {
	ca, err := certs.NewAuthority("e2e user CA", time.Now(), 24*time.Hour)
	Expect(err).NotTo(HaveOccurred())
	server, err := certs.Issue(ca, certs.Request{CommonName: c.Name + "-rw", DNSNames: pgbuilder.UserServerNames(c),
		Usage: certs.Server, Validity: 12 * time.Hour}, time.Now())
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Type: corev1.SecretTypeTLS, Data: map[string][]byte{"tls.crt": server.CertPEM, "tls.key": server.KeyPEM, "ca.crt": ca.CertPEM}})).To(Succeed())
	return serial(server.CertPEM)
}

func setCertificates(ctx context.Context, c *pgv1.PostgresCluster, spec pgv1.CertificatesSpec) {
	GinkgoHelper()
	current := c.DeepCopy()
	Expect(retryUpdate(ctx, current, func() { current.Spec.Certificates = spec })).To(Succeed())
}

func serial(certPEM []byte) *big.Int {
	cert, err := certs.ParseCertificate(certPEM)
	Expect(err).NotTo(HaveOccurred())
	return cert.SerialNumber
}

// servedSerial is the serial of the certificate the primary presents through -rw.
func servedSerial(ctx context.Context, c *pgv1.PostgresCluster) *big.Int {
	served := servedCertificate(ctx, c)
	if served == nil {
		return nil
	}
	return serial(served)
}

// servedCertificate is the certificate (PEM) the primary presents through -rw; nil when it
// cannot be reached.
func servedCertificate(ctx context.Context, c *pgv1.PostgresCluster) []byte {
	config, err := pgx.ParseConfig(rwConnInfo(ctx, c, "app", "app") + " sslmode=require")
	Expect(err).NotTo(HaveOccurred())
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		return nil
	}
	defer func() { _ = conn.Close(ctx) }()
	tlsConn, ok := conn.PgConn().Conn().(*tls.Conn)
	Expect(ok).To(BeTrue(), "the connection is not TLS")
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsConn.ConnectionState().PeerCertificates[0].Raw})
}

// psqlVerified runs statement with psql from another pod through <cluster>-rw as the login of
// Secret secret, with sslmode and the CA of the cluster's application Secret mounted as an
// application would.
func psqlVerified(ctx context.Context, c *pgv1.PostgresCluster, job, secret, sslmode, statement string) (string, bool) {
	sts := &appsv1.StatefulSet{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), sts)).To(Succeed())
	fromSecret := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}
	}
	return tryJob(ctx, c.Namespace, job, corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: "app", VolumeSource: corev1.VolumeSource{
			Secret: &corev1.SecretVolumeSource{SecretName: c.Name + "-app"}}}},
		Containers: []corev1.Container{restrictedContainer(corev1.Container{
			Name:         "psql",
			Image:        sts.Spec.Template.Spec.Containers[0].Image,
			Command:      []string{"psql", "-h", c.Name + "-rw", "-d", "postgres", "-v", "ON_ERROR_STOP=1", "-tAc", statement},
			VolumeMounts: []corev1.VolumeMount{{Name: "app", MountPath: "/etc/app", ReadOnly: true}},
			Env: []corev1.EnvVar{
				{Name: "PGUSER", ValueFrom: fromSecret(corev1.BasicAuthUsernameKey)},
				{Name: "PGPASSWORD", ValueFrom: fromSecret(corev1.BasicAuthPasswordKey)},
				{Name: "PGSSLMODE", Value: sslmode},
				{Name: "PGSSLROOTCERT", Value: "/etc/app/ca.crt"},
				{Name: "PGCONNECT_TIMEOUT", Value: "10"},
			},
		})},
	})
}
