package plugin

import (
	"strings"
	"unicode/utf8"
)

// cell is one table cell: its text, and its colour on a terminal.
type cell struct {
	text   string
	colour colour
}

// table lays cells out in columns padded to their widest text, so that colours (which a
// terminal does not show as width) never shift a column, as they would with text/tabwriter.
type table struct {
	header []string
	rows   [][]cell
}

func (t *table) add(cells ...cell) { t.rows = append(t.rows, cells) }

func (t *table) write(p printer) {
	if len(t.rows) == 0 {
		p.line("  (none)")
		return
	}
	widths := make([]int, len(t.header))
	for i, h := range t.header {
		widths[i] = len(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c.text))
		}
	}
	var b strings.Builder
	for i, h := range t.header {
		pad(&b, p.paint(bold, h), len(h), widths[i], i == len(t.header)-1)
	}
	p.line("  %s", strings.TrimRight(b.String(), " "))
	for _, r := range t.rows {
		b.Reset()
		for i, c := range r {
			pad(&b, p.paint(c.colour, c.text), utf8.RuneCountInString(c.text), widths[i], i == len(r)-1)
		}
		p.line("  %s", strings.TrimRight(b.String(), " "))
	}
}

// pad writes s, whose visible width is n, and spaces up to width plus the gap between
// columns; the last column gets no trailing spaces.
func pad(b *strings.Builder, s string, n, width int, last bool) {
	b.WriteString(s)
	if !last {
		b.WriteString(strings.Repeat(" ", width-n+2))
	}
}
