//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
)

// writeChecker keeps inserting numbered rows through the cluster's -rw Service, as the
// application user, and records each insert the server acknowledged. Afterwards every
// acknowledged row must be on the primary, read from the server that says it is one (not in
// recovery) and that the primary Lease names; a row whose acknowledgement was lost may or may
// not be there, and none can be there twice (the id is the key). Writes must have resumed by
// the end, and, after a fault marked with fault, within that scenario's RTO budget.
type writeChecker struct {
	cluster  *pgv1.PostgresCluster
	connInfo string
	// table is the checker's own, so that runs on one cluster do not collide.
	table string
	stop  chan struct{}
	done  chan struct{}

	mu         sync.Mutex
	acked      []int64
	failed     int
	lastAck    time.Time
	longestGap time.Duration
	// faultAt and budget: a fault was injected then, and writes must be acknowledged again
	// within budget. resumedAt ends the longest gap between acknowledgements since then (the
	// outage the fault caused: the first acknowledgement after the fault itself may come before
	// the fault takes effect), outage is that gap.
	faultAt, resumedAt time.Time
	outage             time.Duration
	budget             time.Duration
	// lossMeasured: asynchronous replication may lose acknowledged writes on a crash; the
	// checker counts them for the report instead of failing the spec.
	lossMeasured bool
	// stopsOperator: the fault kills the operator too (faultWindow).
	stopsOperator bool
	releaseFault  func()
}

// stopsOperator is the option of a scenario that kills the operator: no other fault may be in
// its window (faultWindow).
func stopsOperator(w *writeChecker) { w.stopsOperator = true }

// measuresLoss is the option of a scenario whose acknowledged writes may be lost (a crash with
// asynchronous replication): the report says how many.
func measuresLoss(w *writeChecker) { w.lossMeasured = true }

func startWriteChecker(ctx context.Context, cluster *pgv1.PostgresCluster) *writeChecker {
	w := &writeChecker{
		cluster:  cluster,
		connInfo: rwConnInfo(ctx, cluster, "app", "app"),
		table:    fmt.Sprintf("write_checker_%d", time.Now().UnixNano()),
		stop:     make(chan struct{}), done: make(chan struct{}),
	}
	Eventually(func() error {
		conn, err := w.connect(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+w.table+" (id bigint PRIMARY KEY)")
		return err
	}).WithTimeout(time.Minute).Should(Succeed())
	go w.run(ctx)
	return w
}

func (w *writeChecker) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return pgx.Connect(ctx, w.connInfo)
}

func (w *writeChecker) run(ctx context.Context) {
	defer close(w.done)
	var conn *pgx.Conn
	for id := int64(1); ; id++ {
		select {
		case <-w.stop:
			if conn != nil {
				_ = conn.Close(ctx)
			}
			return
		default:
		}
		err := w.insert(ctx, &conn, id)
		w.mu.Lock()
		if err == nil {
			now := time.Now()
			if !w.lastAck.IsZero() {
				w.longestGap = max(w.longestGap, now.Sub(w.lastAck))
			}
			if !w.faultAt.IsZero() {
				since := w.lastAck
				if since.Before(w.faultAt) {
					since = w.faultAt
				}
				if gap := now.Sub(since); w.resumedAt.IsZero() || gap > w.outage {
					w.resumedAt, w.outage = now, gap
				}
			}
			w.acked, w.lastAck = append(w.acked, id), now
		} else {
			w.failed++
		}
		w.mu.Unlock()
		if err != nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (w *writeChecker) insert(ctx context.Context, conn **pgx.Conn, id int64) error {
	if *conn == nil {
		c, err := w.connect(ctx)
		if err != nil {
			return err
		}
		*conn = c
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := (*conn).Exec(ctx, "INSERT INTO "+w.table+" VALUES ($1)", id); err != nil {
		_ = (*conn).Close(context.Background())
		*conn = nil
		return err
	}
	return nil
}

// fault marks the moment a fault is injected: writes must be acknowledged again, after the
// outage it causes, within budget of it (the scenario's RTO, a correctness budget generous enough
// for CI's load).
func (w *writeChecker) fault(budget time.Duration) {
	w.releaseFault = faultWindow(w.stopsOperator)
	DeferCleanup(w.releaseFault) // a spec that fails before finish
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faultAt, w.resumedAt, w.outage, w.budget = time.Now(), time.Time{}, 0, budget
}

// faultBegan moves the fault's mark to the moment the system recorded it began, when that is
// later: a major upgrade marked when it was asked first runs its checks, with writes going on.
// The budget counts from that moment; the longest gap is the same either way.
func (w *writeChecker) faultBegan(at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if at.After(w.faultAt) {
		w.faultAt = at
	}
}

// writeReport is what the checker saw.
type writeReport struct {
	Acknowledged, Failed, Lost int
	LongestGap                 time.Duration
	// TrailingGap is from the last acknowledged write to the checker's stop; RTO from the
	// marked fault to the first acknowledged write after it, Budget what it may be (both zero
	// without a fault).
	TrailingGap, RTO, Budget time.Duration
}

func (r writeReport) String() string {
	s := fmt.Sprintf("%d writes acknowledged, %d failed, %d acknowledged but lost; longest time without an acknowledged write %s, at the end %s",
		r.Acknowledged, r.Failed, r.Lost, r.LongestGap.Round(100*time.Millisecond), r.TrailingGap.Round(100*time.Millisecond))
	if r.RTO > 0 {
		s += fmt.Sprintf("; writes resumed %s after the fault", r.RTO.Round(100*time.Millisecond))
	}
	return s
}

// rwConnInfo reaches cluster's primary through the ClusterIP of its -rw Service, as the login
// of its basic-auth Secret <cluster>-<login>, into database.
func rwConnInfo(ctx context.Context, cluster *pgv1.PostgresCluster, login, database string) string {
	svc := &corev1.Service{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-rw"}, svc)).To(Succeed())
	return connInfoAt(ctx, cluster, svc.Spec.ClusterIP, login, database)
}

// instanceConnInfo reaches one instance by its pod's IP.
func instanceConnInfo(ctx context.Context, cluster *pgv1.PostgresCluster, instance, login, database string) string {
	pod := &corev1.Pod{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: instance}, pod)).To(Succeed())
	return connInfoAt(ctx, cluster, pod.Status.PodIP, login, database)
}

func connInfoAt(ctx context.Context, cluster *pgv1.PostgresCluster, host, login, database string) string {
	secret := &corev1.Secret{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: cluster.Name + "-" + login}, secret)).To(Succeed())
	return postgres.ConnInfo("host", host, "port", "5432", "dbname", database,
		"user", string(secret.Data[corev1.BasicAuthUsernameKey]), "password", string(secret.Data[corev1.BasicAuthPasswordKey]),
		"connect_timeout", "2")
}

// stopAndVerify stops writing and counts the acknowledged rows missing from the primary.
func (w *writeChecker) stopAndVerify(ctx context.Context) writeReport {
	stoppedAt := time.Now()
	close(w.stop)
	<-w.done
	present := map[int64]bool{}
	Eventually(func() error {
		conn, err := w.connect(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		if err := w.isLeasedPrimary(ctx, conn); err != nil {
			return err
		}
		rows, err := conn.Query(ctx, "SELECT id FROM "+w.table)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		for _, id := range ids {
			present[id] = true
		}
		return err
	}).WithTimeout(time.Minute).Should(Succeed())
	report := writeReport{Acknowledged: len(w.acked), Failed: w.failed, LongestGap: w.longestGap}
	if !w.lastAck.IsZero() {
		report.TrailingGap = stoppedAt.Sub(w.lastAck)
		report.LongestGap = max(report.LongestGap, report.TrailingGap)
	}
	if !w.resumedAt.IsZero() {
		report.RTO = w.resumedAt.Sub(w.faultAt)
	}
	report.Budget = w.budget
	for _, id := range w.acked {
		if !present[id] {
			report.Lost++
		}
	}
	return report
}

// isLeasedPrimary: the server conn reached is not in recovery and is the instance the primary
// Lease names, so the rows counted are the primary's, not a stale copy's.
func (w *writeChecker) isLeasedPrimary(ctx context.Context, conn *pgx.Conn) error {
	var inRecovery bool
	var address string
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), host(inet_server_addr())").Scan(&inRecovery, &address); err != nil {
		return err
	}
	if inRecovery {
		return fmt.Errorf("-rw reached a server in recovery (%s)", address)
	}
	holder, err := primaryLeaseHolder(ctx, w.cluster)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: w.cluster.Namespace, Name: holder}, pod); err != nil {
		return err
	}
	if pod.Status.PodIP != address {
		return fmt.Errorf("-rw reached %s, but the primary Lease names %s at %s", address, holder, pod.Status.PodIP)
	}
	return nil
}

// finish lets the checker write two seconds more, stops it, reports under name, and fails when
// an acknowledged write is missing, when no write was acknowledged in those two seconds (the
// cluster must take writes again by the end), or when writes resumed later than the marked
// fault's budget.
func (w *writeChecker) finish(ctx context.Context, name string) writeReport {
	const settle = 2 * time.Second
	finishing := time.Now()
	time.Sleep(settle)
	report := w.stopAndVerify(ctx)
	if w.releaseFault != nil {
		w.releaseFault()
	}
	// The entry's JSON is what hack/figures collects into the results file ("<name>: write checker").
	AddReportEntry(name+": write checker", report)
	if !w.lossMeasured {
		Expect(report.Lost).To(BeZero(), "acknowledged writes lost: %s", report)
	}
	Expect(w.lastAck).To(BeTemporally(">", finishing), "no write acknowledged in the last %s: %s", settle, report)
	if !w.faultAt.IsZero() {
		Expect(w.resumedAt).NotTo(BeZero(), "no write acknowledged after the fault: %s", report)
		Expect(report.RTO).To(BeNumerically("<=", w.budget), "writes resumed %s after the fault, over its budget of %s: %s",
			report.RTO.Round(100*time.Millisecond), w.budget, report)
	}
	return report
}
