package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// operatorUser is the identity the manager runs as; the audit policy logs only its requests.
const operatorUser = "pgpilot-operator"

// writeAuditPolicy logs every request of the operator at Metadata level, once, when complete.
func writeAuditPolicy(dir string) (string, error) {
	policy := fmt.Sprintf(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted", "Panic"]
rules:
- level: Metadata
  users: [%q, %q]
- level: None
`, operatorUser, agentUser)
	path := filepath.Join(dir, "audit-policy.yaml")
	return path, os.WriteFile(path, []byte(policy), 0o600)
}

// request is one audited API request of the operator.
type request struct {
	Verb       string    `json:"verb"`
	RequestURI string    `json:"requestURI"`
	Received   time.Time `json:"requestReceivedTimestamp"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Name        string `json:"name"`
	} `json:"objectRef"`
}

func (r request) resource() string {
	if r.ObjectRef.Resource == "" {
		return r.RequestURI // a non-resource URL, such as discovery
	}
	if r.ObjectRef.Subresource != "" {
		return r.ObjectRef.Resource + "/" + r.ObjectRef.Subresource
	}
	return r.ObjectRef.Resource
}

func (r request) isWrite() bool {
	switch r.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// isRead is a request the informer cache did not serve; watches are how the cache is fed.
func (r request) isRead() bool { return r.Verb == "get" || r.Verb == "list" }

// leaderElectionLease is the manager's own Lease (cmd/main.go's LeaderElectionID); the
// clusters' primary Leases are other Leases.
const leaderElectionLease = "pgpilot-operator.pgpilot.io"

// isLeaderElection is the Lease traffic every leader-elected manager has, whatever it manages.
func (r request) isLeaderElection() bool {
	return r.ObjectRef.Resource == "leases" && r.ObjectRef.Name == leaderElectionLease
}

// readAudit parses the audit log written so far.
func readAudit(path string) ([]request, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []request
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 16<<20)
	for scanner.Scan() {
		var r request
		if err := json.Unmarshal(scanner.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("audit line: %w", err)
		}
		out = append(out, r)
	}
	return out, scanner.Err()
}

// window summarises the operator's requests between two instants.
type window struct {
	ByVerbResource   map[string]int `json:"byVerbResource"`
	Writes           int            `json:"writes"`
	Reads            int            `json:"reads"`
	LeaderElection   int            `json:"leaderElection"`
	LeaderElectionRW int            `json:"leaderElectionWrites"`
	// Events counts Event creations and updates, which Writes excludes.
	Events           int     `json:"events"`
	NonLeaseRequests int     `json:"nonLeaseRequests"`
	DurationSeconds  float64 `json:"durationSeconds"`
}

func summarise(requests []request, from, to time.Time) window {
	w := window{ByVerbResource: map[string]int{}, DurationSeconds: to.Sub(from).Seconds()}
	for _, r := range requests {
		if r.Received.Before(from) || !r.Received.Before(to) || r.Verb == "watch" || r.User.Username != operatorUser {
			continue
		}
		w.ByVerbResource[r.Verb+" "+r.resource()]++
		if r.isLeaderElection() {
			w.LeaderElection++
			if r.isWrite() {
				w.LeaderElectionRW++
			}
			continue
		}
		w.NonLeaseRequests++
		switch {
		case r.isWrite() && r.ObjectRef.Resource == "events":
			w.Events++
		case r.isWrite():
			w.Writes++
		}
		if r.isRead() {
			w.Reads++
		}
	}
	return w
}

// lastNonLeaseRequest is when the operator last did anything besides leader election.
func lastNonLeaseRequest(requests []request) time.Time {
	var last time.Time
	for _, r := range requests {
		if r.Verb != "watch" && r.User.Username == operatorUser && !r.isLeaderElection() && r.Received.After(last) {
			last = r.Received
		}
	}
	return last
}

// agentRequests counts the simulated agents' requests between two instants, by verb.
func agentRequests(requests []request, from, to time.Time) map[string]int {
	byVerb := map[string]int{}
	for _, r := range requests {
		if r.User.Username == agentUser && !r.Received.Before(from) && r.Received.Before(to) {
			byVerb[r.Verb+" "+r.resource()]++
		}
	}
	return byVerb
}
