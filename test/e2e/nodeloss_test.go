//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// workerLabel marks the local cluster's second node (`localcluster worker add`); its taint of
// the same key keeps every other pod off it.
const workerLabel = "pgpilot.test/worker"

// Node loss: the primary's node loses power. Its pod stays in the API (nothing can confirm it
// stopped), so nothing is deleted or rescheduled; pgpilot must still promote a replica on the
// other node, and the old primary must rejoin when the node boots again.
var _ = Describe("Node loss", Ordered, SpecPriority(slowSpecs), func() {
	var cluster *pgv1.PostgresCluster
	var worker, node string

	BeforeAll(func(ctx SpecContext) {
		worker, node = clusterNodes(ctx)
		cluster = synchronousCluster(ctx, "nodeloss", 3)
		// Two instances on the control plane's node and one on the worker, without cordoning
		// a node under the specs that run beside this one: the spread allows at most one more
		// instance on a node than on the other, and the first and third prefer the control
		// plane's node. The worker's taint keeps every other pod off it.
		cluster.Spec.Scheduling.Tolerations = []corev1.Toleration{{Key: workerLabel, Operator: corev1.TolerationOpExists}}
		cluster.Spec.Scheduling.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"postgres.pgpilot.io/cluster": cluster.Name}},
		}}
		cluster.Spec.Scheduling.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: workerLabel, Operator: corev1.NodeSelectorOpDoesNotExist}}}}},
		}}

		By("two instances on the control plane's node, one on the worker, which becomes the primary")
		start := time.Now()
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 6*time.Minute)
		onWorker := ""
		for i := range 3 {
			if name := fmt.Sprintf("%s-%d", cluster.Name, i); podNode(ctx, cluster, name) == worker {
				Expect(onWorker).To(BeEmpty(), "two instances on the worker")
				onWorker = name
			}
		}
		Expect(onWorker).NotTo(BeEmpty(), "no instance on the worker")
		switchoverTo(ctx, cluster, onWorker)
		AddReportEntry("node loss: 3 instances, the primary alone on the worker, after", time.Since(start).Round(time.Second).String())
	})
	AfterEach(dumpOnFailure)

	It("promotes a replica on another node when the primary's node loses power, and the old primary rejoins when it boots", func(ctx SpecContext) {
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		old := current.Status.CurrentPrimary
		Expect(podNode(ctx, cluster, old)).To(Equal(worker))

		checker := startWriteChecker(ctx, cluster)
		time.Sleep(2 * time.Second)
		start := time.Now()
		checker.fault(rtoLease)
		runWorker("stop")
		DeferCleanup(runWorker, "start")
		var grantedAfter time.Duration
		nodeReadyAtGrant := false
		Eventually(func(g Gomega) {
			if holder, err := primaryLeaseHolder(ctx, cluster); grantedAfter == 0 && err == nil && holder != old {
				grantedAfter = time.Since(start)
				nodeReadyAtGrant = nodeReady(ctx, worker)
			}
			g.Expect(grantedAfter).NotTo(BeZero(), "the primary lease was not granted elsewhere")
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			g.Expect(current.Status.CurrentPrimary).NotTo(Equal(old))
		}).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		AddReportEntry("node loss: the primary lease was granted to another instance after", grantedAfter.Round(100*time.Millisecond).String())
		AddReportEntry("node loss: a new primary after", time.Since(start).Round(100*time.Millisecond).String())
		// The kubelet of a lost node cannot report its pods unready; the node controller marks
		// the node only after its grace period. The failover must not wait for that.
		Expect(nodeReadyAtGrant).To(BeTrue(), "the failover waited for the node controller to mark %s NotReady", worker)
		Expect(podNode(ctx, cluster, current.Status.CurrentPrimary)).To(Equal(node))
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: old}, pod)).To(Succeed(),
			"the lost node's pod must still exist: the failover may not wait for its deletion")

		time.Sleep(3 * time.Second) // writes on the new primary while the node is still down
		powerOn := time.Now()
		runWorker("start")
		Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			expectSettled(g, current)
		}).WithTimeout(4 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("node loss: power on to Ready with "+old+" streaming", time.Since(powerOn).Round(100*time.Millisecond).String())
		checker.finish(ctx, "node loss")
		expectReplication(ctx, cluster, 3)
		Expect(clusterEventReasons(ctx, cluster, start)).To(ContainElements("FailoverStarted", "Fenced", "Promoted", "FailoverCompleted", "Rejoined"))
		// After the power cut its postmaster.pid names a PID of the new container: the rewind
		// must not fail on it and fall back to copying the whole database.
		Expect(rejoinNotes(ctx, cluster, start)).To(ContainElement(ContainSubstring(old + " rejoined as a standby by rewind")))
	})
})

// rejoinNotes are the messages of the Rejoined Events about c since since.
func rejoinNotes(ctx context.Context, c *pgv1.PostgresCluster, since time.Time) []string {
	list := &eventsv1.EventList{}
	Expect(k8s.List(ctx, list, client.InNamespace(c.Namespace))).To(Succeed())
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Name == c.Name && e.Reason == "Rejoined" && !e.EventTime.Time.Before(since.Add(-time.Second)) {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// clusterNodes returns the local cluster's worker and its other node.
func clusterNodes(ctx context.Context) (worker, node string) {
	nodes := &corev1.NodeList{}
	Expect(k8s.List(ctx, nodes)).To(Succeed())
	for _, n := range nodes.Items {
		if n.Labels[workerLabel] == "true" {
			worker = n.Name
		} else {
			node = n.Name
		}
	}
	Expect(worker).NotTo(BeEmpty(), "no node labelled %s: run the suite through test/e2e/run.sh, which adds the worker", workerLabel)
	Expect(node).NotTo(BeEmpty())
	return worker, node
}

func nodeReady(ctx context.Context, name string) bool {
	n := &corev1.Node{}
	Expect(k8s.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podNode(ctx context.Context, c *pgv1.PostgresCluster, pod string) string {
	p := &corev1.Pod{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: pod}, p)).To(Succeed())
	return p.Spec.NodeName
}

// runWorker powers the local cluster's worker off (stop: every process killed at once) or on.
func runWorker(command string) { runLocalcluster("worker", command) }

// runLocalcluster runs a command of the local cluster's tool (test/e2e/run.sh names it).
func runLocalcluster(args ...string) {
	localcluster := os.Getenv("E2E_LOCALCLUSTER")
	Expect(localcluster).NotTo(BeEmpty(), "E2E_LOCALCLUSTER: run the suite through test/e2e/run.sh")
	By("localcluster " + strings.Join(args, " "))
	out, err := exec.Command(localcluster, args...).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "localcluster %s: %s", strings.Join(args, " "), out)
}

// switchoverTo asks for a switchover to target with the annotation and waits until target is
// the primary and the cluster settled.
func switchoverTo(ctx context.Context, c *pgv1.PostgresCluster, target string) {
	current := &pgv1.PostgresCluster{}
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		if current.Status.CurrentPrimary == target {
			return nil
		}
		current.Annotations = map[string]string{pgv1.SwitchoverAnnotation: target}
		return k8s.Update(ctx, current)
	})).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(c), current)).To(Succeed())
		g.Expect(current.Status.CurrentPrimary).To(Equal(target))
		expectSettled(g, current)
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
}
