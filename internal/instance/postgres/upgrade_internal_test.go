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
