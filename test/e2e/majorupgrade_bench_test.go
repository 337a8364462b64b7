//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// UpgradeBenchLabel marks the specs of `make bench-major-upgrade`, which `make test` leaves out:
// they load gigabytes.
const UpgradeBenchLabel = "upgrade-bench"

// upgradeBenchSizes are the database sizes the benchmark upgrades, in MiB (E2E_UPGRADE_BENCH_MIB).
func upgradeBenchSizes() []int {
	var sizes []int
	for _, field := range strings.Fields(os.Getenv("E2E_UPGRADE_BENCH_MIB")) {
		mib, err := strconv.Atoi(field)
		if err != nil || mib <= 0 {
			panic(fmt.Sprintf("E2E_UPGRADE_BENCH_MIB: %q is no size in MiB", field))
		}
		sizes = append(sizes, mib)
	}
	if len(sizes) == 0 {
		sizes = []int{1024, 10240}
	}
	return sizes
}

// upgradePreparationBudget is how long the move to the new image may take before the upgrade
// proper: the fault is the spec's change, and every pod rolls, the primary by a switchover.
const upgradePreparationBudget = 5 * time.Minute

// upgradeBenchRowsPerMiB: rows of the upgrade's index-heavy table (two md5s of text, three
// indexes) in a MiB of database, measured on PostgreSQL 15.
const upgradeBenchRowsPerMiB = 3000

// UpgradeFigures is what one upgrade of the benchmark measured (the "major upgrade" report entry,
// which hack/figures collects).
type UpgradeFigures struct {
	DatabaseMiB int64
	// LongestGap is the longest time without an acknowledged write (the write checker's).
	LongestGap time.Duration
	PgUpgrade  time.Duration
	// HABack runs from the point of no return to the first replica streaming on the new major:
	// with synchronous replication required, the end of the outage.
	HABack time.Duration
	// ArchivingBack runs from the point of no return to the new major's first archived segment.
	ArchivingBack time.Duration
	Replicas      []pgv1.MajorUpgradeReplica
}

var _ = Describe("The cost of a major upgrade by database size", Ordered, Label(UpgradeBenchLabel), func() {
	for _, mib := range upgradeBenchSizes() {
		It(fmt.Sprintf("upgrades a %d MiB database from 15 to 17", mib), func(ctx SpecContext) {
			benchMajorUpgrade(ctx, int64(mib))
		})
	}
})

func benchMajorUpgrade(ctx context.Context, mib int64) {
	cluster := synchronousCluster(ctx, fmt.Sprintf("upgrade-%d", mib), 3)
	cluster.Spec.PostgresVersion = 15
	cluster.Spec.Storage.Size = resource.MustParse(fmt.Sprintf("%dMi", mib*3/2+2048))
	cluster.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}
	cluster.Spec.PostgreSQL.Parameters = map[string]pgv1.ParameterValue{"max_wal_size": "1GB"}
	Expect(k8s.Create(ctx, cluster)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8s.Delete(ctx, cluster)).To(Succeed()) })
	waitForReady(ctx, cluster, 8*time.Minute)
	rows := newRowBatches(ctx, cluster)
	loaded := time.Now()
	rows.exec(ctx, cluster, `CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL, placed timestamptz NOT NULL, note text NOT NULL);
		CREATE INDEX orders_customer ON orders (customer, placed);
		CREATE INDEX orders_placed ON orders (placed);
		CREATE INDEX orders_note ON orders (note)`)
	total := mib * upgradeBenchRowsPerMiB
	for from := int64(1); from <= total; from += 1_000_000 {
		rows.exec(ctx, cluster, fmt.Sprintf(`INSERT INTO orders SELECT g, g %% 5000, now() - g * interval '1 second',
			md5(g::text) || md5((g + 1)::text) FROM generate_series(%d, %d) g`, from, min(from+999_999, total)))
	}
	databaseBytes, err := strconv.ParseInt(rows.query(ctx, cluster, "SELECT sum(pg_database_size(oid))::text FROM pg_database"), 10, 64)
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry(fmt.Sprintf("major upgrade bench: %d MiB loaded", mib), fmt.Sprintf("%d MiB in %s", databaseBytes>>20, time.Since(loaded).Round(time.Second)))
	// The repository comes after the load: the load's WAL archive alone outgrew the node's disk
	// in a first run (27 GB in the repository by 4.4 GiB loaded, beside three copies of the data).
	// archive_mode takes a restart: the pods roll before the upgrade is asked for.
	copyS3Secrets(ctx, cluster.Namespace)
	Expect(retryUpdate(ctx, cluster, func() { cluster.Spec.Backup = backupSpec() })).To(Succeed())
	Eventually(func(g Gomega) {
		current := getCluster(ctx, cluster)
		g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
		expectSettled(g, current)
		g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, pgv1.ConditionContinuousArchiving)).To(BeTrue())
	}).WithTimeout(15 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	waitForArchived(ctx, cluster, rows.switchWAL(ctx))

	checker := startWriteChecker(ctx, cluster)
	time.Sleep(2 * time.Second)
	checker.fault(upgradePreparationBudget + rtoMajorUpgrade)
	archived := firstArchivedOnMajor(ctx, cluster, 17)
	Expect(retryUpdate(ctx, cluster, func() { cluster.Spec.PostgresVersion = 17 })).To(Succeed())
	Eventually(func(g Gomega) {
		up := getCluster(ctx, cluster).Status.MajorUpgrade
		g.Expect(up).NotTo(BeNil())
		g.Expect(up.Step).NotTo(BeElementOf(pgv1.MajorUpgradeReverted, pgv1.MajorUpgradeFailed, pgv1.MajorUpgradeCheckFailed), "%+v", up)
		g.Expect(up.Step).To(Equal(pgv1.MajorUpgradeCompleted), "%+v", up)
	}).WithTimeout(30 * time.Minute).WithPolling(time.Second).Should(Succeed())
	report := checker.finish(ctx, fmt.Sprintf("major upgrade 15 to 17 of %d MiB", mib))
	up := getCluster(ctx, cluster).Status.MajorUpgrade
	figures := UpgradeFigures{DatabaseMiB: databaseBytes >> 20, LongestGap: report.LongestGap,
		PgUpgrade: time.Duration(up.PgUpgradeMillis) * time.Millisecond, Replicas: up.Replicas}
	for _, replica := range up.Replicas {
		if back := replica.RebuiltAt.Sub(up.PointOfNoReturnAt.Time); figures.HABack == 0 || back < figures.HABack {
			figures.HABack = back
		}
	}
	var at time.Time
	Eventually(archived).WithTimeout(5 * time.Minute).Should(Receive(&at))
	figures.ArchivingBack = at.Sub(up.PointOfNoReturnAt.Time)
	AddReportEntry(fmt.Sprintf("%d MiB: major upgrade", mib), figures)
	Expect(rows.query(ctx, cluster, "SELECT count(*)::text FROM orders")).To(Equal(strconv.FormatInt(total, 10)))
}

// firstArchivedOnMajor sends when cluster's primary, on major, first archived a WAL segment
// (pg_stat_archiver of the new major counts from its first start), polling every second.
func firstArchivedOnMajor(ctx context.Context, cluster *pgv1.PostgresCluster, major int) <-chan time.Time {
	archived := make(chan time.Time, 1)
	connInfo := rwConnInfo(ctx, cluster, "superuser", "postgres")
	go func() {
		defer GinkgoRecover()
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			var onMajor, count int
			func() {
				probeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				conn, err := pgx.Connect(probeCtx, connInfo)
				if err != nil {
					return
				}
				defer func() { _ = conn.Close(context.Background()) }()
				_ = conn.QueryRow(probeCtx, `SELECT current_setting('server_version_num')::int / 10000, archived_count
					FROM pg_stat_archiver`).Scan(&onMajor, &count)
			}()
			if onMajor == major && count > 0 {
				archived <- time.Now()
				return
			}
		}
	}()
	return archived
}
