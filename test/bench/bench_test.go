package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestBudgetsReduced is the benchmark's count budgets at CI size, part of `make test`: a change
// that adds a needless write, an uncached read or a cluster-wide cache fails here.
func TestBudgetsReduced(t *testing.T) {
	limits, err := loadBudgets("budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := config{Clusters: 20, Idle: 40 * time.Second, Unrelated: 1000, RepoRoot: "../.."}
	r, err := run(ctx, cfg, func(msg string) { t.Log(msg) })
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	r.print(&table)
	t.Log(table.String())
	for _, v := range limits.violations(r) {
		t.Error("budget exceeded:", v)
	}
}
