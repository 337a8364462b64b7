package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/instance/postgres"
	"github.com/pgpilot/pgpilot-operator/test/pgtest"
)

// A new cluster sorts by code point with a provider no C library or ICU update changes (the
// builtin C.UTF-8 from 17 on, C before), reports its server version, and a database whose
// recorded collation version is not the library's any more is reported (here an ICU database
// whose record is made stale, as a move to another Debian release's ICU would).
func TestInitLocaleAndCollationVersionCheck(t *testing.T) {
	ctx := context.Background()
	major := pgtest.Major(t)
	inst := initialised(t)
	admin := startedAsSuperuser(t, inst)

	var provider, collate string
	if err := admin.QueryRow(ctx, `SELECT datlocprovider::text, datcollate FROM pg_database WHERE datname = 'postgres'`).
		Scan(&provider, &collate); err != nil {
		t.Fatal(err)
	}
	wantProvider, wantCollate := "c", "C"
	if major >= 17 {
		wantProvider, wantCollate = "b", "C.UTF-8"
	}
	if provider != wantProvider || collate != wantCollate {
		t.Errorf("PostgreSQL %d: provider %s, collate %s; want %s, %s", major, provider, collate, wantProvider, wantCollate)
	}
	// Code point order, not a language's: 'B' (U+0042) before 'a' (U+0061) before 'é' (U+00E9).
	var order string
	if err := admin.QueryRow(ctx, `SELECT string_agg(c, '' ORDER BY c) FROM unnest(ARRAY['é', 'a', 'B']) c`).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if order != "Baé" {
		t.Errorf("sort order %q, want code point order Baé", order)
	}

	status, err := postgres.QueryStatus(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("%d.", major); len(status.ServerVersion) <= len(want) || status.ServerVersion[:len(want)] != want {
		t.Errorf("ServerVersion %q, want %s<minor>", status.ServerVersion, want)
	}
	if len(status.CollationMismatches) != 0 {
		t.Fatalf("a new cluster reports collation mismatches: %+v", status.CollationMismatches)
	}

	for _, statement := range []string{
		`CREATE DATABASE linguistic TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en' LOCALE 'C'`,
		`UPDATE pg_database SET datcollversion = '0.1' WHERE datname = 'linguistic'`,
	} {
		if _, err := admin.Exec(ctx, statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
	status, err = postgres.QueryStatus(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(status.CollationMismatches) != 1 {
		t.Fatalf("collation mismatches %+v, want the linguistic database", status.CollationMismatches)
	}
	got := status.CollationMismatches[0]
	if got.Database != "linguistic" || got.Recorded != "0.1" || got.Actual == "" || got.Actual == "0.1" {
		t.Errorf("mismatch %+v", got)
	}
}

// An instance whose data directory is of another major than its binaries is refused before
// anything starts, naming both.
func TestCheckMajorRefusesAnotherMajorsData(t *testing.T) {
	ctx := context.Background()
	inst := initialised(t)
	if err := inst.CheckMajor(ctx); err != nil {
		t.Fatalf("its own data refused: %v", err)
	}
	other := pgtest.Major(t) - 1
	if err := os.WriteFile(filepath.Join(inst.DataDir, "PG_VERSION"), []byte(fmt.Sprintf("%d\n", other)), 0o600); err != nil {
		t.Fatal(err)
	}
	err := inst.CheckMajor(ctx)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the data directory is PostgreSQL %d but this image's server is PostgreSQL %d", other, pgtest.Major(t))) {
		t.Fatalf("CheckMajor = %v", err)
	}
}
