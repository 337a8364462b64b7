//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/controller"
)

// defaultMajor is the major of a cluster that names none, which every other spec runs.
const defaultMajor = controller.DefaultPostgresMajor

// The majors besides the default, each on a synchronous 3-instance cluster of pgpilot's own
// image of that major: a crash of the primary under the write checker, in the middle of a pass
// over managed Databases, a backup, and a point-in-time recovery into a new cluster of the same
// major with exactly the rows before.
// PostgreSQL 15's run on the major upgrade's cluster before it is upgraded (majorupgrade_test.go),
// which recovers a backup into 15 at its end: a cluster of its own cost a process some 190 s.
var _ = Describe("PostgreSQL versions", func() {
	for _, major := range []int32{18} {
		versionSpec(major)
	}
})

func versionSpec(major int32) {
	Describe(fmt.Sprintf("PostgreSQL %d", major), Ordered, SpecPriority(slowSpecs), func() {
		var (
			cluster *pgv1.PostgresCluster
			rows    *rowBatches
		)
		BeforeAll(func(ctx SpecContext) {
			cluster = synchronousCluster(ctx, fmt.Sprintf("pg%d", major), 3)
			cluster.Spec.PostgresVersion = major
			copyS3Secrets(ctx, cluster.Namespace)
			cluster.Spec.Backup = backupSpec()
			start := time.Now()
			Expect(k8s.Create(ctx, cluster)).To(Succeed())
			waitForReady(ctx, cluster, 8*time.Minute)
			AddReportEntry(fmt.Sprintf("PostgreSQL %d cluster: kubectl apply to Ready, 3 instances", major), time.Since(start).Round(time.Second).String())
			rows = newRowBatches(ctx, cluster)
		})
		AfterEach(dumpOnFailure)

		It("runs pgpilot's image of that major, by its real name, and says which version runs", func(ctx SpecContext) {
			expectPgpilotImage(ctx, cluster, major)
		})

		It("refuses spec.postgresVersion lowered", func(ctx SpecContext) {
			current := getCluster(ctx, cluster)
			current.Spec.PostgresVersion = 15 // lowered (15's cluster checks removal)
			err := k8s.Update(ctx, current)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("spec.postgresVersion cannot be lowered or removed"))
		})

		It("fails over a primary killed while applying Databases, losing no acknowledged write, and the new primary completes them", func(ctx SpecContext) {
			rows.insert(ctx, 1)
			takeBackup(ctx, cluster, "full", pgv1.BackupFull)
			rows.insert(ctx, 2)
			expectCatalogCompletedAfterAFailover(ctx, cluster, fmt.Sprintf("kill -9 of the primary's postmaster in a pass over Databases, PostgreSQL %d", major))
		})

		It("recovers from its backup to a time with exactly the rows before it", func(ctx SpecContext) {
			target := rows.markTime()
			rows.insert(ctx, 3)
			waitForArchived(ctx, cluster, rows.switchWAL(ctx))
			restored := recoverInto(ctx, cluster, "restored", target)
			Expect(rows.countsIn(ctx, restored)).To(Equal("1:100 2:100"))
			Expect(getCluster(ctx, restored).Status.PostgresVersion).To(HavePrefix(fmt.Sprintf("%d.", major)))
			Expect(k8s.Delete(ctx, restored)).To(Succeed())
		})
	})
}

// A third-party image (the local cluster's stand-in of docker.io/library/postgres:15: the server
// without pgBackRest) runs a cluster, and backups are reported unavailable rather than failing.
var _ = Describe("A third-party PostgreSQL image", func() {
	AfterEach(dumpOnFailure)

	It("runs the cluster, reports its version, and says backups are unavailable without pgBackRest", func(ctx SpecContext) {
		image := os.Getenv("E2E_THIRD_PARTY_POSTGRES_IMAGE")
		Expect(image).NotTo(BeEmpty(), "E2E_THIRD_PARTY_POSTGRES_IMAGE: run the suite through test/e2e/run.sh")
		cluster := loadSample(newNamespace(ctx, "e2e-third-party"))
		cluster.Name = "third-party"
		cluster.Spec.Instances = 1
		cluster.Spec.Storage.ReclaimPolicy = pgv1.PVCReclaimDelete
		cluster.Spec.PostgresVersion = 15
		cluster.Spec.Image = image
		cluster.Spec.EnableSuperuserAccess = nil // a new cluster's default: off
		copyS3Secrets(ctx, cluster.Namespace)
		cluster.Spec.Backup = backupSpec()
		Expect(k8s.Create(ctx, cluster)).To(Succeed())
		Eventually(func(g Gomega) {
			current := getCluster(ctx, cluster)
			g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, pgv1.ConditionReady)).To(BeTrue())
			g.Expect(current.Status.PostgresVersion).To(HavePrefix("15."))
			archiving := meta.FindStatusCondition(current.Status.Conditions, pgv1.ConditionContinuousArchiving)
			g.Expect(archiving).NotTo(BeNil())
			g.Expect(archiving.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(archiving.Reason).To(Equal("BackupUnavailable"), archiving.Message)
		}).WithTimeout(5 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		for _, pod := range clusterPods(ctx, cluster) {
			Expect(pod.Spec.Containers[0].Image).To(Equal(image))
		}

		By("refusing the superuser's password from another pod, as a new cluster does by default")
		logs, ok := psql(ctx, cluster, "superuser-from-network", cluster.Name+"-rw", cluster.Name+"-superuser", "postgres", "SELECT 1")
		Expect(ok).To(BeFalse(), "the superuser logged in over the network:\n%s", logs)
		Expect(logs).To(ContainSubstring("pg_hba.conf rejects connection"))
		Expect(logs).To(ContainSubstring(`user "postgres"`))
	})
})

// expectPgpilotImage checks that every pod of cluster runs pgpilot's image of major by its real
// name (the one the CSV lists), and that the status and every instance say which version runs.
func expectPgpilotImage(ctx context.Context, cluster *pgv1.PostgresCluster, major int32) {
	want := fmt.Sprintf("ghcr.io/pgpilot/postgresql:%d", major)
	for _, pod := range clusterPods(ctx, cluster) {
		Expect(pod.Spec.Containers[0].Image).To(Equal(want), "pod %s", pod.Name)
	}
	Eventually(func(g Gomega) {
		current := getCluster(ctx, cluster)
		g.Expect(current.Status.PostgresMajor).To(Equal(major))
		g.Expect(current.Status.PostgresVersion).To(HavePrefix(fmt.Sprintf("%d.", major)))
		for _, st := range current.Status.InstancesStatus {
			g.Expect(st.PostgresVersion).To(Equal(current.Status.PostgresVersion), "instance %s", st.Name)
		}
	}).WithTimeout(operatorReacts).Should(Succeed())
}
