package manager_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const (
	// leaseNamespace is passed with --leader-election-namespace: out of cluster there is no
	// service account namespace to detect.
	leaseNamespace = "default"
	// leaseName is the LeaderElectionID set in cmd/main.go.
	leaseName = "pgpilot-operator.pgpilot.io"
	// acquiredLease is what client-go's leader elector logs, lower case, once it holds the
	// lease; controller-runtime routes that log through its own logger, capitalized.
	acquiredLease = "successfully acquired lease"
)

var leaderElectionFlags = []string{"--leader-elect", "--leader-election-namespace=" + leaseNamespace}

var _ = Describe("Manager binary", func() {
	It("leader election: a second manager takes over when the first stops", func(ctx SpecContext) {
		first := startManager("first", leaderElectionFlags...)
		second := startManager("second", leaderElectionFlags...)

		// Both run on this host, so the holderIdentity (hostname_<uuid>) does not say which
		// process holds the lease; each one's log does.
		var leader, standby *managerProcess
		var firstHolder string
		Eventually(func(g Gomega) {
			firstHolder = leaseHolder(g, ctx)
			g.Expect(firstHolder).NotTo(BeEmpty())
			firstLeads, secondLeads := first.hasAcquiredLease(), second.hasAcquiredLease()
			g.Expect(firstLeads).NotTo(Equal(secondLeads), "exactly one manager should have acquired the lease")
			leader, standby = first, second
			if secondLeads {
				leader, standby = second, first
			}
		}).Should(Succeed())
		// A standby keeps trying without taking over while the leader renews.
		Consistently(standby.hasAcquiredLease, 3*time.Second).Should(BeFalse())

		// Exit code 0: SIGTERM, as sent on a rollout or node drain, is a clean shutdown, not a
		// failure that would make the kubelet report a crash.
		Expect(leader.stop()).To(Equal(0), "leader log:\n%s", leader.log())

		// With the release, the standby takes over at its next retry (RetryPeriod 2s). Without it,
		// the standby waits for the lease to expire (LeaseDuration 15s), and the process still exits
		// 0: a window below 15s is what makes this spec catch a lost LeaderElectionReleaseOnCancel.
		Eventually(func(g Gomega) {
			g.Expect(leaseHolder(g, ctx)).To(And(Not(BeEmpty()), Not(Equal(firstHolder))))
		}, 10*time.Second).Should(Succeed(), "the standby did not take over before the lease could expire")
		Expect(standby.running()).To(BeTrue(), "the new leader should still be running")
		Eventually(standby.hasAcquiredLease).Should(BeTrue())
	})

	It("metrics endpoint requires authentication and authorization", func(ctx SpecContext) {
		m := startManager("metrics", leaderElectionFlags...)
		url := fmt.Sprintf("https://%s/metrics", addr(m.metricsPort))

		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "metrics-"}}
		ns, err := clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(clientset.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})).To(Succeed())
		})
		noMetricsToken := serviceAccountToken(ctx, ns.Name, "no-metrics")
		prometheusToken := serviceAccountToken(ctx, ns.Name, "prometheus")
		grantShippedMetricsReaderRole(ctx, ns.Name, "prometheus")

		By("rejecting a request without a token")
		// The metrics server starts in the background; the first answer may take a moment.
		Eventually(func() (int, error) {
			code, _, err := getMetrics(url, "")
			return code, err
		}).Should(Equal(http.StatusUnauthorized))

		By("forbidding an authenticated service account without the metrics-reader role")
		code, body, err := getMetrics(url, noMetricsToken)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusForbidden), body)

		By("serving the metrics to a service account bound to the metrics-reader role")
		// The authorizer caches a deny for 30s: only ask once the API server's RBAC allows it.
		Eventually(func(g Gomega) {
			g.Expect(canGetMetrics(g, ctx, ns.Name, "prometheus")).To(BeTrue())
		}).Should(Succeed())
		// The reconcile metrics exist once the controller has started, which waits for the lease.
		Eventually(func(g Gomega) {
			code, body, err := getMetrics(url, prometheusToken)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(http.StatusOK), body)
			g.Expect(body).To(ContainSubstring(`controller_runtime_reconcile_total{controller="postgrescluster"`))
		}).Should(Succeed())
	})
})

// hasAcquiredLease tells whether the process logged that it became the leader.
func (m *managerProcess) hasAcquiredLease() bool {
	return strings.Contains(strings.ToLower(m.log()), acquiredLease)
}

// leaseHolder returns the leader election Lease's holderIdentity, empty when it has none.
func leaseHolder(g Gomega, ctx SpecContext) string {
	lease, err := clientset.CoordinationV1().Leases(leaseNamespace).Get(ctx, leaseName, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// serviceAccountToken creates a ServiceAccount and returns a bound token for it, as a
// Prometheus pod would have mounted.
func serviceAccountToken(ctx SpecContext, namespace, name string) string {
	GinkgoHelper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	_, err := clientset.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](3600),
	}}
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return token.Status.Token
}

// grantShippedMetricsReaderRole creates the ClusterRole from config/rbac/metrics_reader_role.yaml
// as written (kustomize would prefix its name in a deployment), so the spec proves the shipped
// role is enough, and binds the service account to it.
func grantShippedMetricsReaderRole(ctx SpecContext, namespace, serviceAccount string) {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "rbac", "metrics_reader_role.yaml"))
	Expect(err).NotTo(HaveOccurred())
	role := &rbacv1.ClusterRole{}
	Expect(yaml.UnmarshalStrict(data, role)).To(Succeed())
	role, err = clientset.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(clientset.RbacV1().ClusterRoles().Delete(ctx, role.Name, metav1.DeleteOptions{})).To(Succeed())
	})

	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + serviceAccount + "-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{
			Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: serviceAccount,
		}},
	}
	binding, err = clientset.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(clientset.RbacV1().ClusterRoleBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{})).To(Succeed())
	})
}

// canGetMetrics asks the API server the same SubjectAccessReview the metrics filter will.
func canGetMetrics(g Gomega, ctx SpecContext, namespace, serviceAccount string) bool {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{
			Path: "/metrics", Verb: "get",
		},
	}}
	review, err := clientset.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return review.Status.Allowed
}

// metricsClient trusts the self-signed certificate controller-runtime serves metrics with
// when no --metrics-cert-path is given.
var metricsClient = &http.Client{
	Timeout: 5 * time.Second,
	Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test server
	},
}

// getMetrics GETs url with token as bearer token (none when empty) and returns status and body.
func getMetrics(url, token string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
