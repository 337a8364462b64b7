package postgres

import "testing"

// A password's match against a verifier is derived once; another password or verifier is
// derived again.
func TestMatchMemoryDerivesEachPairOnce(t *testing.T) {
	m := &matchMemory{seen: map[[32]byte]bool{}}
	derived := 0
	derive := func(verifier, password string) bool { derived++; return verifier == "v:"+password }
	for range 3 {
		if !m.matches("v:pw", "pw", derive) || m.matches("v:pw", "other", derive) {
			t.Fatal("wrong answer")
		}
	}
	if derived != 2 {
		t.Errorf("derived %d times, want 2 (one per pair)", derived)
	}
	if !m.matches("v:new", "new", derive) || derived != 3 {
		t.Errorf("a new verifier was not derived (%d)", derived)
	}
}
