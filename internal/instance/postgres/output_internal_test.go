package postgres

import (
	"context"
	"io"
	"testing"
	"time"
)

// A cancelled binary returns even when a child it forked holds its output open, as
// pg_basebackup's WAL streamer does: an agent stopped during a clone would hang otherwise.
func TestCancelledOutputReturnsDespiteAForkedChild(t *testing.T) {
	i := &Instance{BinDir: "/bin", Output: io.Discard}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := i.output(ctx, "sh", "-c", "sleep 60 & wait")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled command reported success")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("output still waits 20 s after its context was cancelled")
	}
}
