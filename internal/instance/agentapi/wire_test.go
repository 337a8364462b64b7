package agentapi

import "testing"

func TestSlotName(t *testing.T) {
	for pod, want := range map[string]string{"db-1": "db_1", "My.Cluster-10": "my_cluster_10"} {
		if got := SlotName(pod); got != want {
			t.Errorf("SlotName(%q) = %q, want %q", pod, got, want)
		}
	}
}
