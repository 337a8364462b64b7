package controller

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	"github.com/pgpilot/pgpilot-operator/internal/instance/agent"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// failoverBudget is how long a failover of a 2-instance cluster with real agents may take in
// these specs, from the fault to the new primary in the status: its steps take seconds (a
// frozen primary is noticed after agentapi.UnresponsiveAfter); the rest is room for a loaded CI
// machine. A failover held up by the children's lane never completes.
const failoverBudget = 45 * time.Second

// onHostServers makes a cluster of the major of the server binaries its real agents run (the
// host's, or an image's under hack/test-in-image.sh): another would be reported Degraded.
func onHostServers(c *pgv1.PostgresCluster) {
	c.Spec.PostgresVersion = int32(pgtest.Major(GinkgoT()))
}

// runAgentFor starts pod's agent and PostgreSQL for cluster, then marks the pod ready once the
// agent's readiness endpoint answers, as the kubelet's probe would. primaryPort 0 is the
// instance's own port (an initial primary).
func runAgentFor(cluster *pgv1.PostgresCluster, pod string, primaryPort int, initialPrimary string, leases agent.LeaseStore) *pgtest.RunningAgent {
	inst := pgtest.NewInstance(GinkgoT(), pod)
	if primaryPort == 0 {
		primaryPort = inst.Port
	}
	a := pgtest.StartAgent(GinkgoT(), agentConfig(cluster, pod, initialPrimary, primaryPort, inst), inst, leases)
	agentAddresses.set(cluster.Namespace, pod, a.Address())
	Eventually(func() error { return readyz(a) }, 90*time.Second).Should(Succeed())
	markPodReady(cluster.Namespace, pod)
	return a
}

// rwService plays cluster's -rw Service: a proxy whose one endpoint is the pod labelled
// primary, if any, at the port route gave for it. It stops with the spec.
func rwService(cluster *pgv1.PostgresCluster) (rw *pgtest.ServiceProxy, route func(pod string, port int)) {
	rw = pgtest.NewServiceProxy(GinkgoT())
	var mu sync.Mutex
	ports := map[string]int{}
	done := make(chan struct{})
	DeferCleanup(func() { close(done) })
	go func() {
		defer GinkgoRecover()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pods := &corev1.PodList{}
			if k8sClient.List(ctx, pods, client.InNamespace(cluster.Namespace),
				client.MatchingLabels(pgbuilder.RoleSelector(cluster, pgbuilder.RolePrimary))) != nil {
				continue
			}
			mu.Lock()
			target := 0
			if len(pods.Items) == 1 {
				target = ports[pods.Items[0].Name]
			}
			mu.Unlock()
			rw.SetTarget(target)
		}
	}()
	return rw, func(pod string, port int) {
		mu.Lock()
		defer mu.Unlock()
		ports[pod] = port
	}
}

// countRows counts table t through port as the application user, with password.
func countRows(password string, port int) (int, error) {
	conn, err := postgres.Connect(ctx, port, "app", password, "app")
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(ctx) }()
	var rows int
	return rows, conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&rows)
}

// killPostmaster is a crash of the primary's server: SIGKILL to its postmaster.
func killPostmaster(_ *pgv1.PostgresCluster, a *pgtest.RunningAgent) {
	pidFile, err := os.ReadFile(filepath.Join(a.Instance.DataDir, "postmaster.pid"))
	Expect(err).NotTo(HaveOccurred())
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	Expect(err).NotTo(HaveOccurred())
	Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
}

// freezeServer stops every process of the primary's server while its agent lives on, as a hung
// disk would; the pod stays ready (the kubelet's probe would fail too, but the agent's report
// alone must be enough).
func freezeServer(cluster *pgv1.PostgresCluster, a *pgtest.RunningAgent) {
	pgtest.Freeze(GinkgoT(), pgtest.ServerProcesses(GinkgoT(), a.Instance, clusterCredentials(cluster).SuperuserPassword))
}

// Lanes: what stops the children's lane must never stop a failover (the measured
// outages: a typo in the switchover annotation, a rejected spec, each held a dead primary for
// minutes).
var _ = Describe("Failover with real agents", func() {
	DescribeTable("is not held up by a stopped children's lane, nor by a frozen primary",
		func(problem func(*pgv1.PostgresCluster), reason string, fault func(*pgv1.PostgresCluster, *pgtest.RunningAgent)) {
			cluster := createCluster(newCluster(newNamespace(), onHostServers, func(c *pgv1.PostgresCluster) { c.Spec.Instances = 2 }))
			rw, route := rwService(cluster)
			primary := runAgentFor(cluster, "db-0", rw.Port, "db-0", clusterLeases(cluster))
			route("db-0", primary.Instance.Port)
			standby := runAgentFor(cluster, "db-1", rw.Port, "db-0", clusterLeases(cluster))
			route("db-1", standby.Instance.Port)
			Eventually(func(g Gomega) {
				g.Expect(fetch(cluster).Status.Phase).To(Equal(pgv1.PhaseReady))
			}, 60*time.Second).Should(Succeed())

			// The password as the instances have it: a spec may take it out of its Secret.
			password := clusterCredentials(cluster).AppPassword
			app := pgtest.Connect(GinkgoT(), primary.Instance, "app", password, "app")
			for i := range 100 {
				_, err := app.Exec(ctx, fmt.Sprintf("CREATE TABLE IF NOT EXISTS t (v int); INSERT INTO t VALUES (%d)", i))
				Expect(err).NotTo(HaveOccurred())
			}
			_ = app.Close(ctx)
			// Asynchronous replication: the rows are on the standby before the fault, so a
			// promoted standby must have them all.
			Eventually(countRows).WithArguments(password, standby.Instance.Port).Should(Equal(100))

			if problem != nil {
				problem(cluster)
				Eventually(degradedReason).WithArguments(cluster).Should(Equal(reason))
			}
			fault(cluster, primary)
			faultAt := time.Now()
			Eventually(func(g Gomega) {
				got := fetch(cluster)
				g.Expect(got.Status.CurrentPrimary).To(Equal("db-1"))
				g.Expect(got.Status.TargetPrimary).To(BeEmpty())
			}, failoverBudget).Should(Succeed(), "no failover within %s", failoverBudget)
			AddReportEntry("failover with "+cmp.Or(reason, "no other problem"), time.Since(faultAt).Round(100*time.Millisecond).String())
			Expect(eventReasons(cluster)).To(ContainElements("FailoverStarted", "Promoted", "FailoverCompleted"))
			Eventually(countRows).WithArguments(password, rw.Port).Should(Equal(100), "every row through -rw, on the new primary")
			if problem != nil {
				Expect(degradedReason(cluster)).To(Equal(reason), "the children's trouble is still reported")
			}
		},
		Entry("a switchover annotation naming no instance, then the primary's postmaster killed",
			func(c *pgv1.PostgresCluster) {
				updateCluster(c, func(c *pgv1.PostgresCluster) {
					c.Annotations = map[string]string{pgv1.SwitchoverAnnotation: "nonsense"}
				})
			}, "SwitchoverTargetUnknown", killPostmaster),
		Entry("a spec whose StatefulSet the API server rejects, then the primary's postmaster killed",
			func(c *pgv1.PostgresCluster) {
				updateCluster(c, func(c *pgv1.PostgresCluster) {
					c.Spec.Resources = corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
						Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					}
				})
			}, reasonChildRejected, killPostmaster),
		Entry("an application Secret without its password, then the primary's postmaster killed",
			func(c *pgv1.PostgresCluster) {
				Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
					secret := &corev1.Secret{}
					if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: pgbuilder.AppSecretName(c)}, secret); err != nil {
						return err
					}
					delete(secret.Data, corev1.BasicAuthPasswordKey)
					return k8sClient.Update(ctx, secret)
				})).To(Succeed())
			}, "CredentialsInvalid", killPostmaster),
		Entry("nothing else, but every process of the primary's server frozen", nil, "", freezeServer),
	)
})

var _ = Describe("A primary frozen for less than spec.failoverDelay", func() {
	It("is waited for, not failed over, and takes writes again when it thaws", func() {
		cluster := createCluster(newCluster(newNamespace(), onHostServers, func(c *pgv1.PostgresCluster) {
			c.Spec.Instances = 2
			c.Spec.FailoverDelay = &metav1.Duration{Duration: 30 * time.Second}
		}))
		primary := runAgentFor(cluster, "db-0", 0, "db-0", clusterLeases(cluster))
		runAgentFor(cluster, "db-1", primary.Instance.Port, "db-0", clusterLeases(cluster))
		Eventually(func(g Gomega) {
			g.Expect(fetch(cluster).Status.Phase).To(Equal(pgv1.PhaseReady))
		}, 60*time.Second).Should(Succeed())
		password := clusterCredentials(cluster).SuperuserPassword

		thaw := pgtest.Freeze(GinkgoT(), pgtest.ServerProcesses(GinkgoT(), primary.Instance, password))
		Eventually(func(g Gomega) {
			progressing := condition(fetch(cluster), pgv1.ConditionProgressing)
			g.Expect(progressing).NotTo(BeNil())
			g.Expect(progressing.Reason).To(Equal("PrimaryFailing"))
			g.Expect(progressing.Message).To(ContainSubstring("frozen"))
		}, 20*time.Second).Should(Succeed(), "the freeze is noticed and the failover delayed")
		time.Sleep(5 * time.Second) // frozen for about 12 s in all, well under the delay
		thaw()
		Eventually(func(g Gomega) {
			got := fetch(cluster)
			g.Expect(got.Status.Phase).To(Equal(pgv1.PhaseReady))
			g.Expect(got.Status.CurrentPrimary).To(Equal("db-0"))
		}, 30*time.Second).Should(Succeed())
		Consistently(func() []string { return eventReasons(cluster) }, 35*time.Second, time.Second).
			ShouldNot(ContainElement("FailoverStarted"), "a pause shorter than failoverDelay must not fail over")
		conn := pgtest.Connect(GinkgoT(), primary.Instance, agentapi.Superuser, password, "postgres")
		_, err := conn.Exec(ctx, "CREATE TABLE after_thaw (v int); INSERT INTO after_thaw VALUES (1)")
		Expect(err).NotTo(HaveOccurred(), "the thawed primary takes writes")
	})
})
