package pgtest

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Batches are rows written in numbered batches of 100 (table batches), for tests that restore
// to a point between two of them and count what came back.
type Batches struct {
	T    TB
	Conn *pgx.Conn
}

// Create makes the table.
func (b Batches) Create() { b.Exec("CREATE TABLE batches (id int PRIMARY KEY, batch int NOT NULL)") }

// Insert writes batch n (rows (n-1)*100+1 to n*100).
func (b Batches) Insert(n int) {
	b.T.Helper()
	b.Exec(fmt.Sprintf("INSERT INTO batches SELECT g, %d FROM generate_series(%d, %d) g", n, (n-1)*100+1, n*100))
}

// InsertAroundTarget writes batch n, takes the server's time as a recovery target, and writes
// batch n+1 after it. pgBackRest keeps backup times in whole seconds and restores from a backup
// that stopped before the target: each step is in a later second than the one before.
func (b Batches) InsertAroundTarget(n int) time.Time {
	b.T.Helper()
	time.Sleep(1100 * time.Millisecond)
	b.Insert(n)
	var target time.Time
	if err := b.Conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&target); err != nil {
		b.T.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	b.Insert(n + 1)
	return target
}

// Exec runs sql or fails the test.
func (b Batches) Exec(sql string) {
	b.T.Helper()
	if _, err := b.Conn.Exec(context.Background(), sql); err != nil {
		b.T.Fatalf("%s: %v", sql, err)
	}
}
