package postgres

import (
	"slices"
	"testing"
)

func TestParseMajor(t *testing.T) {
	for out, want := range map[string]int{
		"postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)\n": 15,
		"postgres (PostgreSQL) 17.12 (Debian 17.12-0+deb13u1)\n": 17,
		"postgres (PostgreSQL) 18.6 (Debian 18.6-3)\n":           18,
	} {
		if got, err := ParseMajor(out); err != nil || got != want {
			t.Errorf("ParseMajor(%q) = %d, %v; want %d", out, got, err, want)
		}
	}
	if _, err := ParseMajor("garbage"); err == nil {
		t.Error("ParseMajor accepted garbage")
	}
}

func TestFormatVersion(t *testing.T) {
	for num, want := range map[int]string{150018: "15.18", 170012: "17.12", 180006: "18.6"} {
		if got := FormatVersion(num); got != want {
			t.Errorf("FormatVersion(%d) = %q, want %q", num, got, want)
		}
	}
}

func TestInitLocale(t *testing.T) {
	if got := InitLocale(15); !slices.Equal(got, []string{"--locale=C"}) {
		t.Errorf("15: %v", got)
	}
	for _, major := range []int{17, 18} {
		if got := InitLocale(major); !slices.Contains(got, "--locale-provider=builtin") || !slices.Contains(got, "--locale=C.UTF-8") {
			t.Errorf("%d: %v", major, got)
		}
	}
}
