package agentapi

import (
	"encoding/json"
	"testing"
)

func TestSlotName(t *testing.T) {
	for pod, want := range map[string]string{"db-1": "db_1", "My.Cluster-10": "my_cluster_10"} {
		if got := SlotName(pod); got != want {
			t.Errorf("SlotName(%q) = %q, want %q", pod, got, want)
		}
	}
}

// An agent of 0.2.0 sends no version; the operator reads its status as 0.2.0's.
func TestVersionOf(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"role":"primary","timeline":1,"currentLSN":"0/3000060","streaming":false}`, UnversionedAgent},
		{`{"version":"0.3.0","role":"replica","timeline":1,"streaming":true}`, "0.3.0"},
	} {
		var status Status
		if err := json.Unmarshal([]byte(tc.body), &status); err != nil {
			t.Fatal(err)
		}
		if got := VersionOf(&status); got != tc.want {
			t.Errorf("VersionOf(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}
