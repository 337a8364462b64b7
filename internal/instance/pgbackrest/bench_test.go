package pgbackrest_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	"github.com/pgpilot/pgpilot-operator/internal/instance/pgbackrest"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

var benchMiB = flag.Int("backup-bench-mib", 1024, "size of BenchmarkBackupAndRestore's database, MiB")

// BenchmarkBackupAndRestore measures pgBackRest as pgpilot runs it (lz4, two processes, an S3
// repository over TLS), on real PostgreSQL and S3 server processes: a full backup and a restore
// of a database of -backup-bench-mib MiB, a point-in-time recovery from restore to promotion,
// and the archive lag of WAL segments under a steady write load. `make bench` runs it once
// (-benchtime 1x); the figures go to docs/benchmarks.md.
func BenchmarkBackupAndRestore(b *testing.B) {
	for b.Loop() {
		benchmarkBackupAndRestore(b)
	}
}

func benchmarkBackupAndRestore(b *testing.B) {
	ctx := context.Background()
	quiet := newQuietTB(b)
	s3 := pgtest.StartS3(quiet)
	source, runner, conn := startArchiving(quiet, s3, "bench")
	size := fillDatabase(b, conn, int64(*benchMiB)<<20)
	start := time.Now()
	waitForArchived(b, conn, switchWAL(b, conn), 15*time.Minute)
	b.Logf("loaded %d MiB; the archive caught up %s after the load", size>>20, time.Since(start).Round(time.Second))

	start = time.Now()
	if err := runner.Backup(ctx, pgbackrest.Full); err != nil {
		b.Fatal(err)
	}
	backupTime := time.Since(start)
	info, err := runner.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	full := info.Backups[len(info.Backups)-1]
	b.ReportMetric(mbPerSecond(full.Info.Size, backupTime), "backup-MB/s")
	b.ReportMetric(float64(full.Info.Repository.Size)/float64(full.Info.Size), "repo/db-size")

	batches := pgtest.Batches{T: b, Conn: conn}
	batches.Create()
	target := batches.InsertAroundTarget(1)
	waitForArchived(b, conn, switchWAL(b, conn), time.Minute)
	measureArchiveLag(b, conn, pgtest.Connect(quiet, source, agentapi.Superuser, superuserPassword, "postgres"), 20)
	_ = conn.Close(ctx)
	if err := source.Stop(10 * time.Second); err != nil {
		b.Fatal(err)
	}

	restored := pgtest.NewInstance(quiet, "bench-restored")
	restoreRunner := configure(quiet, s3, restored)
	start = time.Now()
	if err := restoreRunner.Restore(ctx, pgbackrest.Target{Type: "time", Value: pgbackrest.TimeTarget(target)}); err != nil {
		b.Fatal(err)
	}
	restoreTime := time.Since(start)
	if err := restored.Start(); err != nil {
		b.Fatal(err)
	}
	conn = pgtest.Connect(b, restored, agentapi.Superuser, superuserPassword, "postgres")
	waitForPromotion(b, conn)
	pitrTime := time.Since(start)
	var rows int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM batches").Scan(&rows); err != nil || rows != 100 {
		b.Fatalf("restored to the target: %d rows of the batches (want batch 1's 100): %v", rows, err)
	}
	b.ReportMetric(mbPerSecond(full.Info.Size, restoreTime), "restore-MB/s")
	b.ReportMetric(pitrTime.Seconds(), "pitr-s")
	b.Logf("full backup of %d MiB in %s (%d MiB in the repository); restore in %s; PITR (restore, replay, promotion) in %s",
		full.Info.Size>>20, backupTime.Round(100*time.Millisecond), full.Info.Repository.Size>>20,
		restoreTime.Round(100*time.Millisecond), pitrTime.Round(100*time.Millisecond))
}

// fillDatabase writes rows of hex text (about half of it compressible) until the database
// holds at least bytes, and returns its size.
func fillDatabase(b *testing.B, conn *pgx.Conn, bytes int64) int64 {
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE TABLE bulk (id bigint, payload text)"); err != nil {
		b.Fatal(err)
	}
	const chunk = 500_000
	for first := int64(1); ; first += chunk {
		var size int64
		if err := conn.QueryRow(ctx, "SELECT pg_database_size(current_database())").Scan(&size); err != nil {
			b.Fatal(err)
		}
		if size >= bytes {
			return size
		}
		if _, err := conn.Exec(ctx, `INSERT INTO bulk SELECT g, md5(g::text) || md5((g + 1)::text) || md5((g + 2)::text) || md5((g + 3)::text)
			FROM generate_series($1::bigint, $2::bigint) g`, first, first+chunk-1); err != nil {
			b.Fatal(err)
		}
	}
}

// measureArchiveLag writes rows continuously through writer and, segments times, closes the current WAL
// segment and times how long it takes to be in the repository (archive_command returned: the
// segment was pushed). It reports the median and the longest.
func measureArchiveLag(b *testing.B, conn, writer *pgx.Conn, segments int) {
	stop := make(chan struct{})
	done := make(chan error)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				done <- writer.Close(context.Background())
				return
			default:
			}
			if _, err := writer.Exec(context.Background(), "INSERT INTO bulk SELECT g, md5(g::text) FROM generate_series(1, 2000) g"); err != nil {
				done <- err
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var lags []time.Duration
	for range segments {
		time.Sleep(500 * time.Millisecond)
		segment := switchWAL(b, conn)
		closed := time.Now()
		waitForArchived(b, conn, segment, time.Minute)
		lags = append(lags, time.Since(closed))
	}
	close(stop)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(lags)
	b.ReportMetric(lags[len(lags)/2].Seconds(), "archive-lag-median-s")
	b.ReportMetric(lags[len(lags)-1].Seconds(), "archive-lag-max-s")
}

func mbPerSecond(bytes int64, d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }

// quietTB keeps the servers' and pgBackRest's logs (a benchmark prints every Logf) and prints
// their last lines only when the benchmark fails.
type quietTB struct {
	testing.TB
	mu    sync.Mutex
	lines []string
}

func newQuietTB(b *testing.B) *quietTB {
	q := &quietTB{TB: b}
	b.Cleanup(func() {
		if b.Failed() {
			q.mu.Lock()
			defer q.mu.Unlock()
			b.Log(strings.Join(q.lines, "\n"))
		}
	})
	return q
}

func (q *quietTB) Logf(format string, args ...any) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lines = append(q.lines, fmt.Sprintf(format, args...))
	if len(q.lines) > 200 {
		q.lines = q.lines[len(q.lines)-200:]
	}
}
