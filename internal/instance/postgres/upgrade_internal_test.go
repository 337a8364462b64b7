package postgres

import (
	"strings"
	"testing"

	"github.com/pgpilot/pgpilot-operator/internal/ha"
)

func TestSpaceProblem(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mode         UpgradeMode
		needed, free int64
		want         string
	}{
		{name: "room to spare", mode: UpgradeLink, needed: 300 << 20, free: 10 << 30},
		{name: "exactly enough", mode: UpgradeCopy, needed: 5 << 30, free: 5 << 30},
		{name: "a copy that does not fit", mode: UpgradeCopy, needed: 5 << 30, free: 4 << 30,
			want: "not enough free space for a copy upgrade: it writes about 5120 MiB, the data volume has 4096 MiB free"},
		{name: "a link that does not fit", mode: UpgradeLink, needed: 300 << 20, free: 100 << 20,
			want: "not enough free space for a link upgrade: it writes about 300 MiB, the data volume has 100 MiB free"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := spaceProblem(tc.mode, tc.needed, tc.free); got != tc.want {
				t.Fatalf("spaceProblem() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckProblemsFoldsInTheListsPgUpgradeWrote(t *testing.T) {
	out := []byte(`Checking for reg* data types in user tables                   fatal
Checking for prepared transactions                            ok
`)
	got := checkProblems(out, map[string]string{"tables_using_reg.txt": "In database: app\n  public.t.f\n"})
	want := "Checking for reg* data types in user tables|tables_using_reg: In database: app public.t.f"
	if strings.Join(got, "|") != want {
		t.Fatalf("checkProblems() = %q, want %q", got, want)
	}
}

func TestDataRecordsNamesWhatMayChangeARelation(t *testing.T) {
	stats := `Type                                           N      (%)          Record size      (%)             FPI size      (%)        Combined size      (%)
----                                           -      ---          -----------      ---             --------      ---        -------------      ---
XLOG/CHECKPOINT_SHUTDOWN                       1 ( 33.33)                  114 ( 36.42)                    0 (  0.00)                  114 ( 36.42)
XLOG/END_OF_RECOVERY                           1 ( 33.33)                   34 ( 10.86)                    0 (  0.00)                   34 ( 10.86)
XLOG/FPI                                       0 (  0.00)                    0 (  0.00)                    0 (  0.00)                    0 (  0.00)
Standby/RUNNING_XACTS                          1 ( 33.33)                   50 ( 15.97)                    0 (  0.00)                   50 ( 15.97)
`
	if got := dataRecords([]byte(stats)); len(got) != 0 {
		t.Fatalf("dataRecords(checkpoints, end of recovery, snapshot) = %q, want none", got)
	}
	changed := stats + `Heap/HOT_UPDATE                                1 ( 20.00)                   80 ( 12.00)                    0 (  0.00)                   80 ( 12.00)
Transaction/COMMIT                             1 ( 20.00)                   34 (  5.00)                    0 (  0.00)                   34 (  5.00)
                                        --------                      --------                      --------                      --------
Total                                          5                           312 [100.00%]                   0 [0.00%]                   312 [100%]
`
	if got := strings.Join(dataRecords([]byte(changed)), " "); got != "Heap/HOT_UPDATE Transaction/COMMIT" {
		t.Fatalf("dataRecords(an update) = %q, want the update and its commit", got)
	}
}

func TestFollowKitAdmitsAStandbyThatReplayedTheSameWAL(t *testing.T) {
	kit := FollowKitManifest{FromLSN: "0/5000100", UntilLSN: "0/5000200"}
	for lsn, want := range map[string]bool{
		"0/5000100": true,  // everything of the old primary, nothing of the promotion
		"0/5000278": true,  // the upgraded instance's shutdown checkpoint too
		"0/50000A0": false, // short of the old primary's end: relations behind
		"0/5003000": false, // past the upgraded instance's WAL: another history
		"garbage":   false,
	} {
		if err := kit.admits(lsn); (err == nil) != want {
			t.Errorf("admits(%s) = %v, want admitted %v", lsn, err, want)
		}
	}
}

func TestReadEndStopsBeforeThePageOfACheckpointFirstOnIt(t *testing.T) {
	control := ControlData{WALBlockBytes: 8192}
	for lsn, want := range map[string]string{
		"0/8000028": "0/8000000", // first in its segment, after the long page header
		"0/8002018": "0/8002000", // first on a page, after the short header
		"0/80020A0": "0/80020A0",
		"0/8001FF8": "0/8001FF8",
	} {
		parsed, _ := ha.ParseLSN(lsn)
		if got := ha.FormatLSN(readEnd(control, parsed)); got != want {
			t.Errorf("readEnd(%s) = %s, want %s", lsn, got, want)
		}
	}
}

func TestWALSegmentOfNamesTheSegmentHoldingTheLSN(t *testing.T) {
	for _, c := range []struct {
		timeline string
		size     uint64
		lsn      string
		want     string
	}{
		{"2", 16 << 20, "0/1C000180", "00000002000000000000001C"},
		{"2", 16 << 20, "0/1D000000", "00000002000000000000001D"},
		{"11", 16 << 20, "3/FF000028", "0000000B00000003000000FF"},
		{"1", 1 << 30, "5/C0000000", "000000010000000500000003"},
		{"1", 1 << 20, "0/2A00010", "00000001000000000000002A"},
	} {
		lsn, _ := ha.ParseLSN(c.lsn)
		got, err := walSegmentOf(ControlData{Timeline: c.timeline, WALSegmentBytes: c.size}, lsn)
		if err != nil || got != c.want {
			t.Errorf("walSegmentOf(timeline %s, %d-byte segments, %s) = %q, %v; want %q", c.timeline, c.size, c.lsn, got, err, c.want)
		}
	}
	for _, bad := range []ControlData{{Timeline: "2"}, {Timeline: "2", WALSegmentBytes: 3 << 20}, {Timeline: "x", WALSegmentBytes: 16 << 20}} {
		if got, err := walSegmentOf(bad, 0); err == nil {
			t.Errorf("walSegmentOf(%+v) = %q, want an error", bad, got)
		}
	}
}

func TestLastSwitchPointIsWhereTheNewestTimelineBegan(t *testing.T) {
	for history, want := range map[string]string{
		"1\t0/3000158\tno recovery target specified\n":                                                "0/3000158",
		"1\t0/3000158\tno recovery target specified\n\n2\t0/1D0000A0\tno recovery target specified\n": "0/1D0000A0",
		"# a comment\n1\t0/3000158\tbefore transaction 1234\n":                                        "0/3000158",
	} {
		if got, err := lastSwitchPoint([]byte(history)); err != nil || got != want {
			t.Errorf("lastSwitchPoint(%q) = %q, %v; want %q", history, got, err, want)
		}
	}
	for _, bad := range []string{"", "# only a comment\n", "1\tnot-an-lsn\treason\n"} {
		if got, err := lastSwitchPoint([]byte(bad)); err == nil {
			t.Errorf("lastSwitchPoint(%q) = %q, want an error", bad, got)
		}
	}
}

func TestErrorLineSaysWhatWentWrongNotTheHint(t *testing.T) {
	for out, want := range map[string]string{
		"pg_waldump: error: could not open file \"00000003000000000000001C\"\npg_waldump: hint: Try \"pg_waldump --help\" for more information.\n": `pg_waldump: error: could not open file "00000003000000000000001C"`,
		"psql: error: connection failed\nFATAL:  password authentication failed\n":                                                                 "FATAL:  password authentication failed",
		"one\nlast\n": "last",
	} {
		if got := errorLine([]byte(out)); got != want {
			t.Errorf("errorLine(%q) = %q, want %q", out, got, want)
		}
	}
}
