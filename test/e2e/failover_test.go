//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// Failover, fencing and rolling updates, on a cluster of their own (2 instances, synchronous,
// dataDurability required) so that they run beside the replication specs.
var _ = Describe("Failover", Ordered, SpecPriority(slowestSpecs), func() {
	var cluster *pgv1.PostgresCluster

	BeforeAll(func(ctx SpecContext) {
		cluster = synchronousCluster(ctx, "failover", 2)
		start := time.Now()
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 8*time.Minute)
		AddReportEntry("failover cluster: kubectl apply to Ready, 2 instances", time.Since(start).Round(time.Second).String())
	})
	AfterEach(dumpOnFailure)

	failoverSpecs(&cluster)
	partitionSpec(&cluster)
	apiServerCutSpec(&cluster)
	imageRollSpec(&cluster)
})

// failoverSpecs inject faults into the primary of the Failover cluster (synchronous,
// dataDurability required), each under a write checker through -rw: the cluster must elect a
// new primary, the old one must come back as a standby, and every acknowledged write must be on
// the new primary.
func failoverSpecs(cluster **pgv1.PostgresCluster) {
	It("fails over when the primary's postmaster is killed, and the old primary rejoins", func(ctx SpecContext) {
		underFault(ctx, *cluster, "kill -9 of the primary's postmaster", rtoCrash, func(old *corev1.Pod) {
			killPostmaster(old)
		})
	})
	It("fails over when the operator dies with the primary (both killed), once a new operator leads", func(ctx SpecContext) {
		underFault(ctx, *cluster, "operator and primary's postmaster killed together", rtoOperatorAndPrimary, func(old *corev1.Pod) {
			killOperator()
			killPostmaster(old)
		}, stopsOperator)
	})
	It("fails over when the primary's pod is deleted, and the old primary rejoins", func(ctx SpecContext) {
		underFault(ctx, *cluster, "primary pod deleted", rtoCrash, func(old *corev1.Pod) {
			Expect(k8s.Delete(ctx, old)).To(Succeed())
		})
	})
	It("fails over when every process of the primary's server freezes while its agent lives, and the old primary rejoins", func(ctx SpecContext) {
		underFault(ctx, *cluster, "primary's server frozen (SIGSTOP)", rtoFrozen, freezePostgres)
	})
}

// underFault runs fault on the primary's pod while a write checker writes, waits for a new
// primary and every instance streaming again, and reports the figures; writes must resume within
// budget.
func underFault(ctx context.Context, cluster *pgv1.PostgresCluster, name string, budget time.Duration, fault func(*corev1.Pod),
	options ...func(*writeChecker)) {
	current := &pgv1.PostgresCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
	old := &corev1.Pod{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: current.Status.CurrentPrimary}, old)).To(Succeed())
	checker := startWriteChecker(ctx, cluster)
	for _, option := range options {
		option(checker)
	}
	time.Sleep(2 * time.Second) // writes acknowledged before the fault, too
	start := time.Now()
	checker.fault(budget)
	fault(old)
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		g.Expect(current.Status.CurrentPrimary).NotTo(Equal(old.Name))
		expectSettled(g, current)
	}).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
	AddReportEntry(name+": fault to Ready with "+old.Name+" streaming from "+current.Status.CurrentPrimary,
		time.Since(start).Round(100*time.Millisecond).String())
	checker.finish(ctx, name)
	expectReplication(ctx, cluster, current.Spec.Instances)
	Expect(current.Status.Timeline).To(BeNumerically(">", 1))
	Expect(clusterEventReasons(ctx, cluster, start)).To(ContainElements("FailoverStarted", "Fenced", "Promoted", "FailoverCompleted"))
}

// expectSettled: Ready, and every instance's agent reports a role (the status of the reconcile
// that replaced a pod was decided on what it saw before).
func expectSettled(g Gomega, c *pgv1.PostgresCluster) {
	g.Expect(c.Status.Phase).To(Equal(pgv1.PhaseReady))
	g.Expect(c.Status.InstancesStatus).To(HaveLen(int(c.Spec.Instances)))
	for _, st := range c.Status.InstancesStatus {
		g.Expect(st.Role).NotTo(BeEmpty(), "instance %s: %s", st.Name, st.Error)
	}
}

// clusterEventReasons are the reasons of the Events about cluster since since.
func clusterEventReasons(ctx context.Context, cluster *pgv1.PostgresCluster, since time.Time) []string {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list, client.InNamespace(cluster.Namespace))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == cluster.Name && !e.EventTime.Time.Before(since.Add(-time.Second)) {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// killPostmaster sends SIGKILL to the postmaster of pod.
func killPostmaster(pod *corev1.Pod) {
	pid, _ := findPostmaster(pod)
	By(fmt.Sprintf("SIGKILL to the postmaster of %s (pid %d)", pod.Name, pid))
	Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
}

// findPostmaster finds the postmaster of pod on this node (the suite shares the node's PID
// view) by the environment its agent gave it, and returns it with its parent, the agent.
func findPostmaster(pod *corev1.Pod) (postmaster, agent int) {
	want := [][]byte{[]byte("PGPILOT_POD_NAME=" + pod.Name + "\x00"), []byte("PGPILOT_NAMESPACE=" + pod.Namespace + "\x00")}
	procs, err := filepath.Glob("/proc/[0-9]*")
	Expect(err).NotTo(HaveOccurred())
	for _, proc := range procs {
		if commandOf(proc) != "postgres" {
			continue
		}
		environ, _ := os.ReadFile(filepath.Join(proc, "environ"))
		if !bytes.Contains(environ, want[0]) || !bytes.Contains(environ, want[1]) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(proc, "stat"))
		parent := string(bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+1:])[1])
		if commandOf("/proc/"+parent) == "postgres" {
			continue // a backend: the postmaster's parent is the agent
		}
		postmaster, _ = strconv.Atoi(filepath.Base(proc))
		agent, _ = strconv.Atoi(parent)
		return postmaster, agent
	}
	Fail("no postmaster found for " + pod.Name)
	return 0, 0
}

// killOperator sends SIGKILL to the operator's manager process: its container restarts, and the
// new process waits for the old one's leader-election Lease to expire.
func killOperator() {
	procs, err := filepath.Glob("/proc/[0-9]*")
	Expect(err).NotTo(HaveOccurred())
	for _, proc := range procs {
		if commandOf(proc) == "manager" {
			pid, _ := strconv.Atoi(filepath.Base(proc))
			By(fmt.Sprintf("SIGKILL to the operator (pid %d)", pid))
			Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
			return
		}
	}
	Fail("no operator process found")
}

func commandOf(proc string) string {
	cmdline, _ := os.ReadFile(filepath.Join(proc, "cmdline"))
	return filepath.Base(string(bytes.SplitN(cmdline, []byte{0}, 2)[0]))
}

// imageRollSpec changes the PostgreSQL image (the same image under a second tag) under a write
// checker, then back with primaryUpdateMethod restart: pgpilot replaces the replica first, then
// moves the primary by a switchover, or replaces its pod in place; never more than one instance
// at a time.
func imageRollSpec(cluster **pgv1.PostgresCluster) {
	It("rolls a PostgreSQL image change replica first, then by a switchover, losing no acknowledged write", func(ctx SpecContext) {
		image := os.Getenv("E2E_POSTGRES_SECOND_TAG")
		Expect(image).NotTo(BeEmpty(), "E2E_POSTGRES_SECOND_TAG: run the suite through test/e2e/run.sh")
		current, oldPrimary, reasons := rollUnderWrites(ctx, *cluster, "image roll", image, pgv1.PrimaryUpdateSwitchover)
		Expect(current.Status.CurrentPrimary).NotTo(Equal(oldPrimary), "the primary was not moved by a switchover")
		Expect(reasons).To(ContainElements("InstanceUpdating", "SwitchoverStarted", "SwitchoverCompleted"))
		Expect(reasons).NotTo(ContainElement("FailoverStarted"), "the primary's replacement caused a failover")
	})
	It("replaces the primary's pod in place with primaryUpdateMethod restart, keeping the primary", func(ctx SpecContext) {
		image := os.Getenv("E2E_POSTGRES_IMAGE") // back from the second tag the spec above set
		Expect(image).NotTo(BeEmpty(), "E2E_POSTGRES_IMAGE: run the suite through test/e2e/run.sh")
		current, oldPrimary, reasons := rollUnderWrites(ctx, *cluster, "in-place roll", image, pgv1.PrimaryUpdateRestart)
		Expect(current.Status.CurrentPrimary).To(Equal(oldPrimary), "the primary moved")
		Expect(reasons).To(ContainElements("InstanceUpdating", "PrimaryRestarted"))
		Expect(reasons).NotTo(ContainElement("FailoverStarted"))
		Expect(reasons).NotTo(ContainElement("SwitchoverStarted"))
	})
}

// rollUnderWrites changes the image and the primary update method under a write checker,
// waits until every instance runs the image and the cluster settled, and returns the cluster,
// the primary before, and the Events' reasons since the change.
func rollUnderWrites(ctx context.Context, c *pgv1.PostgresCluster, name, image string,
	method pgv1.PrimaryUpdateMethod) (*pgv1.PostgresCluster, string, []string) {
	current := &pgv1.PostgresCluster{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
	oldPrimary := current.Status.CurrentPrimary
	checker := startWriteChecker(ctx, c)
	time.Sleep(2 * time.Second)
	start := time.Now()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		current.Spec.Image, current.Spec.PrimaryUpdateMethod = image, method
		return k8s.Update(ctx, current)
	})).To(Succeed())
	Eventually(func(g Gomega) {
		for _, pod := range clusterPods(ctx, c) {
			g.Expect(pod.Spec.Containers[0].Image).To(Equal(image), "pod %s", pod.Name)
		}
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		expectSettled(g, current)
	}).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
	AddReportEntry(name+": spec change to every instance replaced and Ready", time.Since(start).Round(100*time.Millisecond).String())
	checker.finish(ctx, name)
	expectReplication(ctx, c, current.Spec.Instances)
	return current, oldPrimary, clusterEventReasons(ctx, c, start)
}
