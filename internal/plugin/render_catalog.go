package plugin

import (
	"strings"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// messageColumn heads the tables' last column.
const messageColumn = "MESSAGE"

// roles shows each managed role's state on the primary; nothing when the spec manages none.
func (p printer) roles(roles []pgv1.ManagedRoleStatus) {
	if len(roles) == 0 {
		return
	}
	p.section("Roles")
	t := table{header: []string{"NAME", "STATE", "CHANGED", messageColumn}}
	for _, r := range roles {
		t.add(cell{text: r.Name}, cell{text: r.State, colour: stateColour(r.State, r.Message)}, cell{text: orDash(strings.Join(r.Changed, ", "))}, cell{text: r.Message})
	}
	t.write(p)
}

// databases shows each of the cluster's Databases with its state; nothing when it has none.
func (p printer) databases(databases []DatabaseView) {
	if len(databases) == 0 {
		return
	}
	p.section("Databases")
	t := table{header: []string{"DATABASE", "OWNER", "STATE", "EXTENSIONS", messageColumn}}
	for _, d := range databases {
		t.add(cell{text: d.Database}, cell{text: d.Owner}, cell{text: orDash(d.State), colour: stateColour(d.State, d.Message)},
			cell{text: orDash(strings.Join(d.Extensions, ", "))}, cell{text: d.Message})
	}
	t.write(p)
}

// stateColour is green for an item applied without a word, red for one in error, yellow else.
func stateColour(state, message string) colour {
	switch {
	case state == agentapi.RoleError:
		return red
	case state == agentapi.RoleApplied && message == "":
		return green
	}
	return yellow
}
