package agentapi

import "testing"

func TestStandbyNames(t *testing.T) {
	all := []string{"db-0", "db-1", "db-2"}
	for _, tc := range []struct {
		name      string
		config    *SynchronousConfig
		streaming []string
		want      string
	}{
		{"asynchronous", nil, nil, ""},
		{"required names every other instance, streaming or not",
			&SynchronousConfig{Method: "any", Number: 1, Durability: "required", Instances: all}, nil, `ANY 1 ("db-1", "db-2")`},
		{"first keeps the instances' order",
			&SynchronousConfig{Method: "first", Number: 2, Durability: "required", Instances: all}, []string{"db-2"}, `FIRST 2 ("db-1", "db-2")`},
		{"preferred names only the streaming standbys",
			&SynchronousConfig{Method: "any", Number: 2, Durability: "preferred", Instances: all}, []string{"db-2"}, `ANY 1 ("db-2")`},
		{"preferred with no standby streaming is asynchronous",
			&SynchronousConfig{Method: "any", Number: 1, Durability: "preferred", Instances: all}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.config.StandbyNames("db-0", tc.streaming); got != tc.want {
				t.Errorf("%q, want %q", got, tc.want)
			}
		})
	}
}
