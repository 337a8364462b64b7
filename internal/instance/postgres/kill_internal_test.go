package postgres

import "testing"

func TestParentOf(t *testing.T) {
	for stat, want := range map[string]int{
		"4242 (postgres) S 4200 4242 4242 0 -1":              4200,
		"4243 (postgres: app app [local] idle) T 4242 1 1 0": 4242,
		"4244 (a) b) R 7 1 1":                                7,
		"garbage":                                            0,
	} {
		if got := parentOf([]byte(stat)); got != want {
			t.Errorf("parentOf(%q) = %d, want %d", stat, got, want)
		}
	}
}
