package plugin

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pgpilot/pgpilot-operator/api/agentapi"
	pgv1 "github.com/pgpilot/pgpilot-operator/api/v1alpha1"
)

// ANSI colours, for a terminal.
type colour string

const (
	plain  colour = ""
	green  colour = "\x1b[32m"
	yellow colour = "\x1b[33m"
	red    colour = "\x1b[31m"
	bold   colour = "\x1b[1m"
	reset         = "\x1b[0m"
)

// printer writes the status text, coloured or not.
type printer struct {
	w      io.Writer
	colour bool
	now    time.Time
}

func (p printer) paint(c colour, text string) string {
	if !p.colour || c == plain || text == "" {
		return text
	}
	return string(c) + text + reset
}

// RenderStatus writes v as `kubectl pgpilot status` shows it; now is the clock ages are
// measured with, colour whether to use a terminal's colours.
func RenderStatus(w io.Writer, v ClusterView, now time.Time, colour bool) error {
	var b strings.Builder
	p := printer{w: &b, colour: colour, now: now}
	p.header(v)
	p.conditions(v.Conditions)
	p.instances(v.Members, v.OperatorVersion)
	p.backup(v.Backup)
	p.roles(v.Roles)
	p.databases(v.Databases)
	p.events(v.Events)
	_, err := io.WriteString(w, b.String())
	return err
}

func (p printer) line(format string, args ...any) {
	fmt.Fprintf(p.w, format+"\n", args...)
}

func (p printer) section(title string) {
	p.line("")
	p.line("%s", p.paint(bold, title))
}

func (p printer) header(v ClusterView) {
	phaseColour := yellow
	switch v.Phase {
	case string(pgv1.PhaseReady):
		phaseColour = green
	case string(pgv1.PhaseDegraded):
		phaseColour = red
	}
	ready := fmt.Sprintf("%d/%d instances ready", v.ReadyInstances, v.Instances)
	p.line("%s %s/%s: %s, %s", p.paint(bold, "Cluster"), v.Namespace, v.Name, p.paint(phaseColour, orDash(v.Phase)), ready)
	primary := p.paint(red, "none")
	if v.Primary != "" {
		primary = v.Primary
		if v.PrimarySince != nil {
			primary += ", since " + age(p.now, v.PrimarySince.Time) + " ago"
		}
		if v.Timeline != 0 {
			primary += ", timeline " + strconv.FormatInt(v.Timeline, 10)
		}
	}
	p.line("Primary:      %s", primary)
	if v.InProgress != "" {
		p.line("In progress:  %s", p.paint(yellow, v.InProgress))
	}
	if v.Synchronous != "" {
		p.line("Synchronous:  %s", v.Synchronous)
	}
	if v.PostgresVersion != "" {
		p.line("PostgreSQL:   %s", v.PostgresVersion)
	}
	p.majorUpgrade(v.MajorUpgrade)
	if v.Image != "" {
		p.line("Image:        %s", v.Image)
	}
	p.line("Operator:     %s", orDash(v.OperatorVersion))
}

func (p printer) conditions(conds []ConditionView) {
	p.section("Conditions")
	t := table{header: []string{"TYPE", "STATUS", "REASON", "SINCE", messageColumn}}
	for _, c := range conds {
		t.add(cell{text: c.Type}, cell{text: c.Status, colour: conditionColour(c.Type, c.Status)},
			cell{text: c.Reason}, cell{text: age(p.now, c.Since.Time)}, cell{text: c.Message})
	}
	t.write(p)
}

// conditionColour is green for a good state: Degraded is good when False, the others when True.
func conditionColour(conditionType, status string) colour {
	good := status == "True"
	if conditionType == pgv1.ConditionDegraded {
		good = status == "False"
	}
	switch {
	case status == "Unknown":
		return yellow
	case good:
		return green
	default:
		return red
	}
}

func (p printer) instances(members []InstanceView, operatorVersion string) {
	p.section("Instances")
	t := table{header: []string{"NAME", "ROLE", "READY", "REPLICATION", "TIMELINE", "LSN", "LAG", "REPLAY LAG", "SYNC", "NODE", "RESTARTS", "NOTES"}}
	for _, m := range members {
		t.add(cell{text: m.Name}, cell{text: orDash(m.Role)}, yesNo(m.Ready), p.replication(m),
			cell{text: orDash(formatInt(m.Timeline))}, cell{text: orDash(m.LSN)}, cell{text: lagBytes(m)},
			cell{text: orDash(m.ReplayLag)}, cell{text: orDash(m.SyncState)}, cell{text: orDash(m.Node)}, cell{text: strconv.Itoa(int(m.Restarts))}, notes(m, operatorVersion))
	}
	t.write(p)
}

func (p printer) replication(m InstanceView) cell {
	switch {
	case m.Role == agentapi.RolePrimary:
		return cell{text: "-"}
	case m.Streaming:
		return cell{text: "streaming", colour: green}
	case m.Role == "":
		return cell{text: "-"}
	default:
		return cell{text: "not streaming", colour: red}
	}
}

func yesNo(b bool) cell {
	if b {
		return cell{text: "yes", colour: green}
	}
	return cell{text: "no", colour: red}
}

func lagBytes(m InstanceView) string {
	if m.LagBytes == nil {
		return "-"
	}
	return bytesIEC(*m.LagBytes)
}

// notes says what is unusual about an instance: fenced, unreachable, waiting for a restart,
// running an agent of another release than the operator's (an upgrade not through yet).
func notes(m InstanceView, operatorVersion string) cell {
	var n []string
	c := yellow
	if m.Fenced != "" {
		n, c = append(n, "fenced: "+m.Fenced), red
	}
	if m.Error != "" {
		n, c = append(n, "agent: "+m.Error), red
	}
	if len(m.PendingRestart) > 0 {
		n = append(n, "pending restart: "+strings.Join(m.PendingRestart, ","))
	}
	if m.PodPhase != "" && m.PodPhase != "Running" {
		n = append(n, "pod "+m.PodPhase)
	}
	if m.AgentVersion != "" && operatorVersion != "" && m.AgentVersion != operatorVersion {
		n = append(n, "agent "+m.AgentVersion)
	}
	return cell{text: strings.Join(n, "; "), colour: c}
}

func (p printer) backup(b *BackupView) {
	if b == nil {
		return
	}
	p.section("Backups")
	if b.Archiving != nil {
		p.line("  Continuous archiving: %s (%s) %s", p.paint(conditionColour(pgv1.ConditionContinuousArchiving, b.Archiving.Status), b.Archiving.Status),
			b.Archiving.Reason, b.Archiving.Message)
	}
	if b.LastArchivedWAL != "" {
		p.line("  Last archived WAL:    %s, %s ago", b.LastArchivedWAL, agePtr(p.now, b.LastArchivedTime))
	}
	failures := p.paint(green, "0")
	if b.ArchiveFailures > 0 {
		failures = p.paint(red, strconv.FormatInt(b.ArchiveFailures, 10))
	}
	p.line("  Archive failures:     %s", failures)
	last := "none"
	if b.LastBackup != "" {
		last = b.LastBackup + ", " + agePtr(p.now, b.LastBackupTime) + " ago"
	}
	p.line("  Backups:              %d, last %s", b.Backups, last)
	if b.FirstRecoverabilityPoint != nil {
		p.line("  Recoverable since:    %s", b.FirstRecoverabilityPoint.UTC().Format(time.RFC3339))
	}
	if b.WALBytes > 0 || b.VolumeFreeBytes > 0 {
		p.line("  pg_wal:               %s, volume free %s", bytesIEC(b.WALBytes), bytesIEC(b.VolumeFreeBytes))
	}
}

func (p printer) events(events []EventView) {
	p.section("Recent events")
	t := table{header: []string{"LAST", "TYPE", "REASON", "OBJECT", messageColumn}}
	for _, e := range events {
		c := plain
		if e.Type == "Warning" {
			c = red
		}
		t.add(cell{text: age(p.now, e.Last.Time)}, cell{text: e.Type, colour: c}, cell{text: e.Reason}, cell{text: e.Object}, cell{text: e.Message})
	}
	t.write(p)
}

func agePtr(now time.Time, t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return age(now, t.Time)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func formatInt(i int64) string {
	if i == 0 {
		return ""
	}
	return strconv.FormatInt(i, 10)
}

// bytesIEC is n in the largest binary unit that keeps it at least 1, as 12.3 MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// majorUpgrade shows the step of a major upgrade, whether its point of no return is behind, and
// how each other instance was rebuilt.
func (p printer) majorUpgrade(up *pgv1.MajorUpgradeStatus) {
	if up == nil {
		return
	}
	stepColour := yellow
	switch up.Step {
	case pgv1.MajorUpgradeCompleted:
		stepColour = green
	case pgv1.MajorUpgradeCheckFailed, pgv1.MajorUpgradeReverted, pgv1.MajorUpgradeFailed:
		stepColour = red
	}
	point := "not passed: setting spec.postgresVersion back cancels it"
	switch {
	case up.PointOfNoReturnAt != nil && up.Ended():
		point = "passed " + agePtr(p.now, up.PointOfNoReturnAt) + " ago"
	case up.PointOfNoReturnAt != nil:
		point = "passed " + agePtr(p.now, up.PointOfNoReturnAt) + " ago: it only goes forward"
	}
	p.line("Upgrade:      PostgreSQL %d to %d (%s): %s", up.From, up.To, up.Mode, p.paint(stepColour, string(up.Step)))
	p.line("              point of no return %s", point)
	for _, problem := range up.Problems {
		p.line("              problem: %s", problem)
	}
	if up.Message != "" {
		p.line("              %s", up.Message)
	}
	for _, r := range up.Replicas {
		how := orDash(r.Method)
		if r.Method != "" {
			how += fmt.Sprintf(", %s copied, %s kept", bytesIEC(r.BytesCopied), bytesIEC(r.BytesKept))
		}
		if r.Reason != "" {
			how += " (" + r.Reason + ")"
		}
		p.line("              %s rebuilt: %s", r.Name, how)
	}
}
