//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgbuilder "github.com/pgpilot/pgpilot-operator/internal/builder"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// The upgrade users of a highly available cluster go through: 0.2.0 from the catalog runs three
// instances with synchronous commits required, and the approved upgrade to this version, whose
// pod template differs (the certificates), replaces the instances one at a time in the HA order
// — the replicas, a switchover, the old primary — under a write checker.
var _ = Describe("OLM upgrade of a highly available cluster", Ordered, Label(olmLabel), func() {
	var ns string
	var cluster *pgv1.PostgresCluster
	var before *pgv1.PostgresCluster // the cluster's status under 0.2.0, just before the upgrade

	BeforeAll(func(ctx SpecContext) {
		ns = newOLMNamespace(ctx, "e2e-olm-ha")
	})
	AfterEach(dumpOLMOnFailure)
	AfterEach(dumpOnFailure)

	It("installs "+previousRelease+" and runs three synchronous instances under it", func(ctx SpecContext) {
		start := time.Now()
		subscribe(ctx, ns, []string{ns}, csvName(previousRelease), operatorsv1alpha1.ApprovalManual)
		approveInstallPlan(ctx, ns, csvName(previousRelease))
		waitForCSV(ctx, ns, csvName(previousRelease))
		cluster = smallCluster(ns, "ha")
		cluster.Spec.Instances = 3
		cluster.Spec.PostgreSQL.Synchronous = &pgv1.SynchronousSpec{Method: pgv1.SynchronousAny, Number: 1,
			DataDurability: pgv1.DurabilityRequired}
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(func(g Gomega) {
			before = &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), before)).To(Succeed())
			expectSettled(g, before)
			g.Expect(before.Status.OperatorVersion).To(Equal(previousRelease))
		}).WithTimeout(8 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("OLM install of "+previousRelease+" and a 3-instance cluster Ready under it", time.Since(start).Round(time.Second).String())
		for _, pod := range clusterPods(ctx, cluster) {
			Expect(servesTLS(pod)).To(BeFalse(), "%s's pod has certificates under %s", pod.Name, previousRelease)
		}
		expectReplication(ctx, cluster, 3)
	})

	It("upgrades to "+pgversion.Version+" replacing one instance at a time, the primary last after a switchover, "+
		"losing no acknowledged write", func(ctx SpecContext) {
		roll := newRollWatch(ctx, cluster)
		checker := startWriteChecker(ctx, cluster)
		time.Sleep(2 * time.Second) // writes acknowledged before the upgrade, too
		start := time.Now()
		plan := approveInstallPlan(ctx, ns, csvName(pgversion.Version))
		Eventually(func(g Gomega) {
			o := observeUpgrade(ctx, ns, previousRelease, cluster)
			roll.observe(ctx, cluster, o, time.Since(start))
			g.Expect(o.newCSV).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded))
			g.Expect(o.oldCSVGone).To(BeTrue(), "CSV %s still exists", csvName(previousRelease))
			g.Expect(o.operatorVersion).To(Equal(pgversion.Version))
			g.Expect(roll.replaced).To(HaveLen(3), "instances replaced so far: %v", roll.replaced)
			current := &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			expectSettled(g, current)
			for _, pod := range clusterPods(ctx, cluster) {
				g.Expect(servesTLS(pod) && podReady(&pod)).To(BeTrue(), "pod %s", pod.Name)
			}
		}).WithTimeout(10 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("OLM upgrade "+previousRelease+" → "+pgversion.Version+" of 3 instances: approval to every instance replaced and Ready",
			time.Since(start).Round(time.Second).String())
		AddReportEntry("What OLM and the cluster showed during the upgrade (InstallPlan "+plan+")", roll.String())
		report := checker.finish(ctx, "OLM upgrade of 3 instances")
		AddReportEntry("OLM upgrade of 3 instances: failed writes (the switchover's interruption)", fmt.Sprint(report.Failed))

		oldPrimary := before.Status.CurrentPrimary
		Expect(roll.replaced[2]).To(Equal(oldPrimary), "the primary %s was not replaced last: %v\n%s", oldPrimary, roll.replaced, roll)
		Expect(roll.mostDown).To(Equal(1), "instances down at once, at most:\n%s", roll)
		Expect(roll.sawUpgrading).To(BeTrue(), "the status never said Upgrading:\n%s", roll)
		Expect(roll.phases).To(HaveEach(BeElementOf(pgv1.PhaseReady, pgv1.PhaseUpgrading, pgv1.PhaseSwitchingOver)),
			"the phase said something else than the upgrade:\n%s", roll)
		Expect(roll.sawOldAgent).To(BeTrue(), "the status never named a %s agent:\n%s", previousRelease, roll)
		current := &pgv1.PostgresCluster{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
		for _, st := range current.Status.InstancesStatus {
			Expect(st.AgentVersion).To(Equal(pgversion.Version), "instance %s", st.Name)
		}
		Expect(current.Status.CurrentPrimary).NotTo(Equal(oldPrimary), "the primary was not moved by a switchover")
		reasons := clusterEventReasons(ctx, cluster, start)
		Expect(reasons).To(ContainElements("InstanceUpdating", "SwitchoverStarted", "SwitchoverCompleted"))
		Expect(reasons).NotTo(ContainElement("FailoverStarted"), "the upgrade caused a failover")
		Expect(reasons).NotTo(ContainElement("SwitchoverRetargeted"), "the switchover's target missed the end of the old primary's WAL")
		Expect(slices.DeleteFunc(slices.Clone(reasons), func(r string) bool { return r != "InstanceUpdating" })).To(HaveLen(3))
		expectReplication(ctx, cluster, 3)
	})

	It("then requires TLS: replication by certificate, plaintext clients refused", func(ctx SpecContext) {
		superuser := rwConnInfo(ctx, cluster, "superuser", "postgres")
		Eventually(func() (string, error) {
			return queryOne(ctx, superuser+" sslmode=require",
				"SELECT count(*) FILTER (WHERE s.ssl) || '/' || count(*) FROM pg_stat_replication r JOIN pg_stat_ssl s USING (pid)")
		}).WithTimeout(2 * time.Minute).Should(Equal("2/2"))
		// Required from the ConfigMap's policy, which the pods get at once (pgpilot touches them).
		Eventually(func() error {
			_, err := queryOne(ctx, superuser+" sslmode=disable", "SELECT 1")
			return err
		}).WithTimeout(30 * time.Second).Should(MatchError(ContainSubstring("no encryption")))
	})

	It("restarts nothing when the operator restarts with the same pod template", func(ctx SpecContext) {
		uids := map[string]string{}
		for _, pod := range clusterPods(ctx, cluster) {
			uids[pod.Name] = string(pod.UID)
		}
		var operators corev1.PodList
		Expect(k8s.List(ctx, &operators, client.InNamespace(ns), client.MatchingLabels{"control-plane": "controller-manager"})).To(Succeed())
		Expect(operators.Items).To(HaveLen(1))
		Expect(k8s.Delete(ctx, &operators.Items[0])).To(Succeed())
		// Longer than the new operator's start and its 30 s re-check of a running cluster.
		Consistently(func(g Gomega) {
			for _, pod := range clusterPods(ctx, cluster) {
				g.Expect(string(pod.UID)).To(Equal(uids[pod.Name]), "pod %s was replaced", pod.Name)
				for _, st := range pod.Status.ContainerStatuses {
					g.Expect(st.RestartCount).To(BeZero(), "container %s of %s restarted", st.Name, pod.Name)
				}
			}
			current := &pgv1.PostgresCluster{}
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current)).To(Succeed())
			g.Expect(current.Status.Phase).To(Equal(pgv1.PhaseReady))
		}).WithTimeout(45 * time.Second).WithPolling(2 * time.Second).Should(Succeed())
		expectOperatorAvailable(ctx, ns)
	})
})

// servesTLS: the pod's template is one with certificates (0.3.0 on).
func servesTLS(pod corev1.Pod) bool {
	for _, c := range pod.Spec.Containers {
		if c.Name == pgbuilder.PostgresContainerName {
			return agentapi.ServesTLS(func(name string) (string, bool) {
				i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name })
				if i < 0 {
					return "", false
				}
				return c.Env[i].Value, true
			})
		}
	}
	return false
}

// queryOne runs a query returning one text value on a new connection.
func queryOne(ctx context.Context, connInfo, query string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connInfo)
	if err != nil {
		return "", err
	}
	defer func() { _ = conn.Close(ctx) }()
	var value string
	err = conn.QueryRow(ctx, query).Scan(&value)
	return value, err
}

// rollWatch follows the instance pods through an upgrade: which were replaced, in what order,
// how many were down (missing, terminating or not ready) at once, and what the status said.
type rollWatch struct {
	uids         map[string]string
	replaced     []string
	mostDown     int
	phases       []pgv1.Phase
	sawUpgrading bool
	// sawOldAgent: the new operator's status named an instance's agent of the earlier release.
	sawOldAgent bool
	timeline    []string
	lastLine    string
}

// newRollWatch starts from the pods cluster has now.
func newRollWatch(ctx context.Context, cluster *pgv1.PostgresCluster) *rollWatch {
	w := &rollWatch{uids: map[string]string{}}
	for _, pod := range clusterPods(ctx, cluster) {
		w.uids[pod.Name] = string(pod.UID)
	}
	return w
}

func (w *rollWatch) observe(ctx context.Context, cluster *pgv1.PostgresCluster, o upgradeObservation, at time.Duration) {
	pods := map[string]corev1.Pod{}
	for _, pod := range clusterPods(ctx, cluster) {
		pods[pod.Name] = pod
	}
	down := 0
	var states []string
	for i := range cluster.Spec.Instances {
		name := fmt.Sprintf("%s-%d", cluster.Name, i)
		pod, ok := pods[name]
		state := "missing"
		switch {
		case !ok:
		case pod.DeletionTimestamp != nil:
			state = "terminating"
		case podReady(&pod):
			state = "ready"
		default:
			state = "starting"
		}
		if state != "ready" {
			down++
		}
		if ok {
			uid := string(pod.UID)
			if known, seen := w.uids[name]; seen && known != uid {
				w.replaced = append(w.replaced, name)
			}
			w.uids[name] = uid
			if servesTLS(pod) {
				state += "+tls"
			}
			if pod.Labels[pgbuilder.RoleLabel] == pgbuilder.RolePrimary {
				state += "(primary)"
			}
		}
		states = append(states, name+"="+state)
	}
	w.mostDown = max(w.mostDown, down)
	w.sawUpgrading = w.sawUpgrading || o.phase == pgv1.PhaseUpgrading
	if o.phase != "" && !slices.Contains(w.phases, o.phase) {
		w.phases = append(w.phases, o.phase)
	}
	var agents []string
	current := &pgv1.PostgresCluster{}
	if k8s.Get(ctx, client.ObjectKeyFromObject(cluster), current) == nil {
		for _, st := range current.Status.InstancesStatus {
			agents = append(agents, st.AgentVersion)
			w.sawOldAgent = w.sawOldAgent || (o.operatorVersion == pgversion.Version && st.AgentVersion == previousRelease)
		}
	}
	line := fmt.Sprintf("csv %s=%s | phase=%s Ready=%s/%s operatorVersion=%q agents=%v | %s",
		pgversion.Version, o.newCSV, o.phase, o.ready, o.readyReason, o.operatorVersion, agents, strings.Join(states, " "))
	if line != w.lastLine {
		w.timeline = append(w.timeline, fmt.Sprintf("%5.1fs %s", at.Seconds(), line))
		w.lastLine = line
	}
}

func (w *rollWatch) String() string { return strings.Join(w.timeline, "\n") }
