package builder

import (
	"fmt"
	"strings"
)

// The tests judge the rendered files the way PostgreSQL reads them, not the way pgpilot meant
// to write them: an escaping bug shows up as a setting PostgreSQL sees and pgpilot did not write.

// gucSetting is one `name [=] value` line of postgresql.conf as PostgreSQL's configuration file
// lexer (src/backend/utils/misc/guc-file.l) and parser see it.
type gucSetting struct {
	name  string
	value string
	line  int
}

type gucToken int

const (
	gucEOL gucToken = iota
	gucID
	gucQualifiedID
	gucString
	gucUnquotedString
	gucInteger
	gucReal
	gucEquals
	gucError
)

// parseGUCFile splits postgresql.conf into settings. Strings cannot span lines, so every line
// is scanned on its own; an error is what PostgreSQL reports as a syntax error (and then
// refuses the whole file).
func parseGUCFile(conf string) ([]gucSetting, error) {
	var settings []gucSetting
	for i, line := range strings.Split(conf, "\n") {
		toks, texts := scanGUCLine(line)
		if len(toks) == 0 {
			continue
		}
		if toks[0] != gucID && toks[0] != gucQualifiedID {
			return nil, fmt.Errorf("line %d: %q is not a setting name", i+1, texts[0])
		}
		rest, restTexts := toks[1:], texts[1:]
		if len(rest) > 0 && rest[0] == gucEquals {
			rest, restTexts = rest[1:], restTexts[1:]
		}
		if len(rest) == 0 {
			return nil, fmt.Errorf("line %d: %s has no value", i+1, texts[0])
		}
		var value string
		switch rest[0] {
		case gucString:
			value = gucScanStr(restTexts[0])
		case gucID, gucUnquotedString, gucInteger, gucReal:
			value = restTexts[0]
		default:
			return nil, fmt.Errorf("line %d: %q is not a value", i+1, restTexts[0])
		}
		if len(rest) > 1 {
			return nil, fmt.Errorf("line %d: %q after the value of %s", i+1, restTexts[1], texts[0])
		}
		settings = append(settings, gucSetting{name: texts[0], value: value, line: i + 1})
	}
	return settings, nil
}

func isGUCLetter(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '_' || c >= 0x80
}

func isGUCLetterOrDigit(c byte) bool { return isGUCLetter(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// scanGUCLine returns the tokens of one line, without its comment. Like flex, it takes the
// longest match and, among equally long ones, the rule listed first in guc-file.l.
func scanGUCLine(line string) ([]gucToken, []string) {
	var toks []gucToken
	var texts []string
	for i := 0; i < len(line); {
		c := line[i]
		switch c {
		case ' ', '\t', '\r':
			i++
			continue
		case '#':
			return toks, texts
		}
		tok, n := matchGUCToken(line[i:])
		toks, texts = append(toks, tok), append(texts, line[i:i+n])
		i += n
	}
	return toks, texts
}

func matchGUCToken(s string) (gucToken, int) {
	best, bestLen := gucError, 1
	try := func(tok gucToken, n int) {
		if n > bestLen || n == bestLen && best == gucError {
			best, bestLen = tok, n
		}
	}
	// Rule order in guc-file.l: ID, QUALIFIED_ID, STRING, UNQUOTED_STRING, INTEGER, REAL, '='.
	id := matchID(s)
	try(gucID, id)
	if id > 0 && id < len(s) && s[id] == '.' {
		if second := matchID(s[id+1:]); second > 0 {
			try(gucQualifiedID, id+1+second)
		}
	}
	try(gucString, matchQuoted(s))
	if len(s) > 0 && isGUCLetter(s[0]) {
		n := 1
		for n < len(s) && (isGUCLetterOrDigit(s[n]) || strings.IndexByte("-._:/", s[n]) >= 0) {
			n++
		}
		try(gucUnquotedString, n)
	}
	try(gucInteger, matchInteger(s))
	try(gucReal, matchReal(s))
	if s[0] == '=' {
		try(gucEquals, 1)
	}
	return best, bestLen
}

func matchID(s string) int {
	if len(s) == 0 || !isGUCLetter(s[0]) {
		return 0
	}
	n := 1
	for n < len(s) && isGUCLetterOrDigit(s[n]) {
		n++
	}
	return n
}

// matchQuoted matches a quoted string, in which two quotes stand for one and a backslash
// takes the next character (never a newline: lines are scanned one by one).
func matchQuoted(s string) int {
	if len(s) == 0 || s[0] != '\'' {
		return 0
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return 0
			}
			i++
		case '\'':
			if i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return i + 1
		}
	}
	return 0
}

func skipSign(s string) int {
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		return 1
	}
	return 0
}

func matchInteger(s string) int {
	i := skipSign(s)
	start := i
	if strings.HasPrefix(s[i:], "0x") && len(s) > i+2 && strings.IndexByte("0123456789abcdefABCDEF", s[i+2]) >= 0 {
		i += 2
		for i < len(s) && strings.IndexByte("0123456789abcdefABCDEF", s[i]) >= 0 {
			i++
		}
	} else {
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return 0
		}
	}
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
		i++
	}
	return i
}

func matchReal(s string) int {
	i := skipSign(s)
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i >= len(s) || s[i] != '.' {
		return 0
	}
	i++
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1 + skipSign(s[i+1:])
		k := j
		for k < len(s) && isDigit(s[k]) {
			k++
		}
		if k > j {
			i = k
		}
	}
	return i
}

// gucScanStr is what GUC_scanstr makes of a quoted string: quotes stripped, doubled quotes
// and backslash escapes (\b \f \n \r \t, up to three octal digits, anything else stands for
// itself) collapsed. PostgreSQL keeps the result as a C string, so a NUL ends it.
func gucScanStr(quoted string) string {
	s := quoted[1 : len(quoted)-1]
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			switch e := s[i]; e {
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '0', '1', '2', '3', '4', '5', '6', '7':
				v, k := 0, 0
				for ; k < 3 && i+k < len(s) && s[i+k] >= '0' && s[i+k] <= '7'; k++ {
					v = v<<3 + int(s[i+k]-'0')
				}
				i += k - 1
				b.WriteByte(byte(v))
			default:
				b.WriteByte(e)
			}
		case c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
			b.WriteByte('\'')
		default:
			b.WriteByte(c)
		}
	}
	out := b.String()
	if nul := strings.IndexByte(out, 0); nul >= 0 {
		out = out[:nul]
	}
	return out
}

// hbaRecords splits pg_hba.conf into records as PostgreSQL 16 and later read it: a line that
// ends in a backslash continues on the next one, and a NUL ends what the tokenizer sees.
func hbaRecords(conf string) []string {
	var records []string
	var cur strings.Builder
	continued := false
	for _, line := range strings.Split(strings.TrimSuffix(conf, "\n"), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			continued = true
			continue
		}
		cur.WriteString(line)
		records = append(records, cur.String())
		cur.Reset()
		continued = false
	}
	if continued {
		records = append(records, cur.String())
	}
	return records
}
