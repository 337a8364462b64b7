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
		stateColour := yellow
		switch {
		case r.State == agentapi.RoleError:
			stateColour = red
		case r.State == agentapi.RoleApplied && r.Message == "":
			stateColour = green
		}
		t.add(cell{text: r.Name}, cell{text: r.State, colour: stateColour}, cell{text: orDash(strings.Join(r.Changed, ", "))}, cell{text: r.Message})
	}
	t.write(p)
}
