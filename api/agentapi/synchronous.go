package agentapi

import (
	"fmt"
	"slices"
	"strings"
)

// SynchronousFile is the configuration file (a key of the cluster's ConfigMap) that tells the
// primary's agent how to set synchronous_standby_names; absent, replication is asynchronous.
// The agent, not postgresql.conf, sets it: in preferred mode it follows which standbys stream.
const SynchronousFile = "synchronous.json"

// SynchronousConfig is spec.postgresql.synchronous with the instances that may confirm commits.
type SynchronousConfig struct {
	// Method is "any" (a quorum) or "first" (priority in Instances order).
	Method string `json:"method"`
	// Number of standbys that confirm each commit.
	Number int `json:"number"`
	// Durability is "required" or "preferred".
	Durability string `json:"durability"`
	// Instances are every instance of the cluster, in order; the primary leaves itself out.
	Instances []string `json:"instances"`
}

// StandbyNames is the synchronous_standby_names the primary self runs with, given the
// standbys streaming from it now. Required: every other instance, whether it streams or not,
// so that commits wait rather than go unconfirmed. Preferred: only those streaming, as many as
// stream when fewer than Number do, none (asynchronous) when none does.
func (c *SynchronousConfig) StandbyNames(self string, streaming []string) string {
	if c == nil || c.Number < 1 {
		return ""
	}
	var names []string
	for _, name := range c.Instances {
		if name != self && (c.Durability != "preferred" || slices.Contains(streaming, name)) {
			names = append(names, `"`+strings.ReplaceAll(name, `"`, `""`)+`"`)
		}
	}
	if len(names) == 0 {
		return ""
	}
	number := c.Number
	if c.Durability == "preferred" {
		number = min(number, len(names))
	}
	return fmt.Sprintf("%s %d (%s)", strings.ToUpper(c.Method), number, strings.Join(names, ", "))
}
