package postgres

import (
	"strings"
	"testing"
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
