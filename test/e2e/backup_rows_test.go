//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/gomega"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// rowBatchSize rows make one batch.
const rowBatchSize = 100

// rowBatches writes numbered batches of rows into a cluster through its -rw Service, as the
// superuser, so that a recovered cluster can be checked for exactly the batches committed
// before its target.
type rowBatches struct {
	cluster *pgv1.PostgresCluster
}

func newRowBatches(ctx context.Context, cluster *pgv1.PostgresCluster) *rowBatches {
	r := &rowBatches{cluster: cluster}
	r.exec(ctx, cluster, "CREATE TABLE IF NOT EXISTS pitr_rows (batch int NOT NULL, n int NOT NULL, PRIMARY KEY (batch, n))")
	return r
}

// insert commits batch in one transaction.
func (r *rowBatches) insert(ctx context.Context, batch int) {
	r.exec(ctx, r.cluster, fmt.Sprintf("INSERT INTO pitr_rows SELECT %d, g FROM generate_series(1, %d) g", batch, rowBatchSize))
}

// markTime returns a recovery target (whole seconds, as a user would write it) after every
// commit so far and before any commit after it returns.
func (r *rowBatches) markTime() time.Time {
	time.Sleep(1100 * time.Millisecond)
	target := time.Now().Truncate(time.Second)
	time.Sleep(time.Until(target.Add(1100 * time.Millisecond)))
	return target
}

// switchWAL closes the current WAL segment, so it is archived now, and returns its name.
func (r *rowBatches) switchWAL(ctx context.Context) string {
	return r.query(ctx, r.cluster, "SELECT pg_walfile_name(pg_switch_wal())")
}

// countsIn is "batch:rows" for each batch in cluster, in order.
func (r *rowBatches) countsIn(ctx context.Context, cluster *pgv1.PostgresCluster) string {
	return r.query(ctx, cluster, "SELECT string_agg(batch || ':' || n, ' ' ORDER BY batch) FROM "+
		"(SELECT batch, count(*) AS n FROM pitr_rows GROUP BY batch) AS counts")
}

func (r *rowBatches) exec(ctx context.Context, cluster *pgv1.PostgresCluster, statement string) {
	conn := connectSuperuser(ctx, cluster)
	defer func() { _ = conn.Close(context.Background()) }()
	_, err := conn.Exec(ctx, statement)
	Expect(err).NotTo(HaveOccurred(), statement)
}

// query runs statement on cluster's primary and returns its one text value.
func (r *rowBatches) query(ctx context.Context, cluster *pgv1.PostgresCluster, statement string) string {
	return superuserQuery(ctx, cluster, "postgres", statement)
}

// superuserQuery runs query, as the superuser, in database on cluster's primary, and returns its
// one text value.
func superuserQuery(ctx context.Context, cluster *pgv1.PostgresCluster, database, query string) string {
	conn := connectSuperuserTo(ctx, cluster, database)
	defer func() { _ = conn.Close(context.Background()) }()
	var value string
	Expect(conn.QueryRow(ctx, query).Scan(&value)).To(Succeed(), query)
	return value
}

// connectSuperuser connects to the postgres database of cluster's primary (connectSuperuserTo).
func connectSuperuser(ctx context.Context, cluster *pgv1.PostgresCluster) *pgx.Conn {
	return connectSuperuserTo(ctx, cluster, "postgres")
}

// connectSuperuserTo connects to database on cluster's primary through its -rw Service as the
// superuser, retrying while the Service has no ready endpoint yet.
func connectSuperuserTo(ctx context.Context, cluster *pgv1.PostgresCluster, database string) *pgx.Conn {
	connInfo := rwConnInfo(ctx, cluster, "superuser", database)
	var conn *pgx.Conn
	Eventually(func(ctx context.Context) (err error) {
		conn, err = pgx.Connect(ctx, connInfo)
		return err
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
	return conn
}
