//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	pgversion "github.com/pgpilot/pgpilot-operator/internal/version"
)

// From the catalog, the OperatorHub way: a Subscription installs 0.1.0 (a real earlier build,
// from tag v0.1.0 in hack/releases, whose instances run PostgreSQL directly), a database gets
// rows, and the approved upgrade goes straight to this clone's version by its skipRange (0.2.0 is
// never installed), which takes the cluster over with the rows intact.
var _ = Describe("OLM install and upgrade from the catalog", Ordered, Label(olmLabel), func() {
	const previous = releaseWithoutAgent
	var ns string
	var cluster *pgv1.PostgresCluster
	jobs := 0
	// sqlAs runs an idempotent statement through <name>-rw, retried until psql gets through: a
	// Service follows a restarted primary a moment after the cluster says Ready, as clients
	// that reconnect see it.
	sqlAs := func(ctx context.Context, secret, database, statement string) string {
		var logs string
		Eventually(func() bool {
			jobs++
			var ok bool
			logs, ok = psql(ctx, cluster, fmt.Sprintf("psql-%d", jobs), cluster.Name+"-rw", secret, database, statement)
			return ok
		}).WithTimeout(2*time.Minute).WithPolling(2*time.Second).Should(BeTrue(), func() string { return "psql failed:\n" + logs })
		return logs
	}
	sql := func(ctx context.Context, statement string) string {
		return sqlAs(ctx, cluster.Name+"-superuser", "postgres", statement)
	}

	BeforeAll(func(ctx SpecContext) {
		ns = newOLMNamespace(ctx, "e2e-olm-upgrade")
	})
	AfterEach(dumpOLMOnFailure)

	It("installs "+previous+" with a Subscription and a manually approved InstallPlan", func(ctx SpecContext) {
		start := time.Now()
		subscribe(ctx, ns, []string{ns}, csvName(previous), operatorsv1alpha1.ApprovalManual)
		plan := approveInstallPlan(ctx, ns, csvName(previous))
		csv := waitForCSV(ctx, ns, csvName(previous))
		expectOperatorAvailable(ctx, ns)
		AddReportEntry("OLM install of "+previous+": Subscription to CSV Succeeded", time.Since(start).Round(time.Second).String())
		AddReportEntry("OLM after the install", fmt.Sprintf("CSV %s %s (%s); InstallPlan %s\n%s",
			csv.Name, csv.Status.Phase, csv.Status.Reason, plan, installPlanSummary(ctx, ns)))
		Expect(csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0].Image).
			To(Equal("ghcr.io/pgpilot/pgpilot-operator:v" + previous))
	})

	It("runs a PostgresCluster under "+previous+" and keeps rows in it", func(ctx SpecContext) {
		cluster = smallCluster(ns, "keep")
		start := time.Now()
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		waitForReady(ctx, cluster, 5*time.Minute)
		AddReportEntry("PostgresCluster Ready under "+previous, time.Since(start).Round(time.Second).String())
		sql(ctx, "CREATE TABLE IF NOT EXISTS kept (n int PRIMARY KEY, note text); "+
			"INSERT INTO kept SELECT n, 'row ' || n FROM generate_series(1, 1000) n ON CONFLICT DO NOTHING")
		Expect(sql(ctx, "SELECT count(*) || ' rows, sum ' || sum(n) FROM kept")).To(ContainSubstring("1000 rows, sum 500500"))
	})

	It("upgrades to "+pgversion.Version+" in one step: the new operator takes the cluster over with one restart and truthful conditions", func(ctx SpecContext) {
		pod := &corev1.Pod{}
		Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Name + "-0"}, pod)).To(Succeed())
		podUIDs := []types.UID{pod.UID}

		start := time.Now()
		plan := approveInstallPlan(ctx, ns, csvName(pgversion.Version))
		var timeline []string
		var lastLine string
		var staleReadySince time.Time
		sawNotReady := false
		Eventually(func(g Gomega) {
			o := observeUpgrade(ctx, ns, previous, cluster)
			if line := o.String(); line != lastLine {
				timeline = append(timeline, fmt.Sprintf("%5.1fs %s", time.Since(start).Seconds(), line))
				lastLine = line
			}
			if o.podUID != "" && o.podUID != podUIDs[len(podUIDs)-1] {
				podUIDs = append(podUIDs, o.podUID)
			}
			// Truthful: Ready=True is never claimed for long while the instance is not ready
			// (status follows the pod within a reconcile).
			if o.ready == metav1.ConditionTrue && !o.podReady {
				if staleReadySince.IsZero() {
					staleReadySince = time.Now()
				}
				Expect(time.Since(staleReadySince)).To(BeNumerically("<", 15*time.Second),
					"Ready=True while the instance is not ready:\n%s", strings.Join(timeline, "\n"))
			} else {
				staleReadySince = time.Time{}
			}
			sawNotReady = sawNotReady || o.ready != metav1.ConditionTrue
			g.Expect(o.newCSV).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded))
			g.Expect(o.oldCSVGone).To(BeTrue(), "CSV %s still exists", csvName(previous))
			g.Expect(o.operatorVersion).To(Equal(pgversion.Version))
			g.Expect(o.phase).To(Equal(pgv1.PhaseReady))
			g.Expect(o.podReady).To(BeTrue())
		}).WithTimeout(6 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("OLM upgrade to "+pgversion.Version+": approval to cluster Ready under the new operator", time.Since(start).Round(time.Second).String())
		AddReportEntry("What OLM and the cluster showed during the upgrade (InstallPlan "+plan+")", strings.Join(timeline, "\n")+"\n"+installPlanSummary(ctx, ns))

		Expect(installPlanCSVs(ctx, ns)).NotTo(ContainElement(csvName(previousRelease)),
			"OLM went through %s instead of skipping it", previousRelease)
		Expect(sawNotReady).To(BeTrue(), "the instance restarted into the agent, but Ready never said so:\n%s", strings.Join(timeline, "\n"))
		Expect(podUIDs).To(HaveLen(2), "PostgreSQL's pod was replaced %d times (once is needed: %s moves it under the instance agent)",
			len(podUIDs)-1, pgversion.Version)
		expectOperatorAvailable(ctx, ns)
	})

	It("keeps every row, and serves the application user the new version creates", func(ctx SpecContext) {
		Expect(sql(ctx, "SELECT count(*) || ' rows, sum ' || sum(n) FROM kept")).To(ContainSubstring("1000 rows, sum 500500"))
		Expect(sqlAs(ctx, cluster.Name+"-app", "app", "SELECT 'app user ' || current_user")).To(ContainSubstring("app user app"))
	})
})

// upgradeObservation is one look at the upgrade: OLM's CSVs, the cluster's status, its pod.
type upgradeObservation struct {
	from            string
	oldCSV, newCSV  operatorsv1alpha1.ClusterServiceVersionPhase
	oldCSVGone      bool
	operatorVersion string
	phase           pgv1.Phase
	ready           metav1.ConditionStatus
	readyReason     string
	podUID          types.UID
	podReady        bool
}

func observeUpgrade(ctx context.Context, ns, from string, cluster *pgv1.PostgresCluster) upgradeObservation {
	o := upgradeObservation{from: from}
	csv := &operatorsv1alpha1.ClusterServiceVersion{}
	err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: csvName(from)}, csv)
	o.oldCSVGone = apierrors.IsNotFound(err)
	if err == nil {
		o.oldCSV = csv.Status.Phase
	}
	if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: csvName(pgversion.Version)}, csv) == nil {
		o.newCSV = csv.Status.Phase
	}
	c := &pgv1.PostgresCluster{}
	if k8s.Get(ctx, client.ObjectKeyFromObject(cluster), c) == nil {
		o.operatorVersion, o.phase = c.Status.OperatorVersion, c.Status.Phase
		if ready := meta.FindStatusCondition(c.Status.Conditions, pgv1.ConditionReady); ready != nil {
			o.ready, o.readyReason = ready.Status, ready.Reason
		}
	}
	pod := &corev1.Pod{}
	if k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cluster.Name + "-0"}, pod) == nil {
		o.podUID, o.podReady = pod.UID, podReady(pod) && pod.DeletionTimestamp == nil
	}
	return o
}

func (o upgradeObservation) String() string {
	old := string(o.oldCSV)
	if o.oldCSVGone {
		old = "gone"
	}
	uid := string(o.podUID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return fmt.Sprintf("csv %s=%s %s=%s | cluster phase=%s Ready=%s/%s operatorVersion=%q | pod %s ready=%t",
		o.from, old, pgversion.Version, o.newCSV, o.phase, o.ready, o.readyReason, o.operatorVersion, uid, o.podReady)
}
