package exporter

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// customQuery is one entry of a postgres_exporter query file (--extend.query-path), keyed
// there by its metric prefix. master is postgres_exporter's word, primary CloudNativePG's.
type customQuery struct {
	Query           string                    `json:"query"`
	Metrics         []map[string]customColumn `json:"metrics"`
	Master          bool                      `json:"master,omitempty"`
	Primary         bool                      `json:"primary,omitempty"`
	TargetDatabases []string                  `json:"target_databases,omitempty"`
}

type customColumn struct {
	Usage       string `json:"usage"`
	Description string `json:"description,omitempty"`
}

// discard is postgres_exporter's usage for a column that is neither a value nor a label.
const discard = "DISCARD"

var (
	metricNamePattern = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNamePattern  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// ParseQueries reads a query file in postgres_exporter's YAML shape. It refuses what it would
// not export as written: an unknown key (cache_seconds, runonserver), a usage other than
// GAUGE, COUNTER, LABEL or DISCARD, an invalid metric name, a prefix of pgpilot's own.
func ParseQueries(data []byte) ([]Query, error) {
	var file map[string]customQuery
	if err := yaml.UnmarshalStrict(data, &file); err != nil {
		return nil, err
	}
	var queries []Query
	for _, prefix := range slices.Sorted(maps.Keys(file)) {
		if IsBuiltin(prefix) || strings.HasPrefix(prefix, BuiltinPrefix) {
			return nil, fmt.Errorf("%s: the prefix is pgpilot's own; choose another", prefix)
		}
		q, err := file[prefix].query(prefix)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", prefix, err)
		}
		queries = append(queries, q)
	}
	return queries, nil
}

func (c customQuery) query(prefix string) (Query, error) {
	q := Query{Name: prefix, Prefix: prefix, SQL: c.Query, PrimaryOnly: c.Master || c.Primary, Databases: c.TargetDatabases}
	if strings.TrimSpace(c.Query) == "" {
		return q, fmt.Errorf("no query")
	}
	values := 0
	for _, entry := range c.Metrics {
		if len(entry) != 1 {
			return q, fmt.Errorf("each item of metrics names one column, this one names %d", len(entry))
		}
		for name, column := range entry {
			usage := Usage(strings.ToUpper(column.Usage))
			switch usage {
			case Gauge, Counter:
				values++
				if !metricNamePattern.MatchString(metricName(prefix, name)) {
					return q, fmt.Errorf("column %s: %q is not a valid metric name", name, metricName(prefix, name))
				}
			case Label:
				if !labelNamePattern.MatchString(name) {
					return q, fmt.Errorf("column %s: not a valid label name", name)
				}
				if name == DatabaseLabel && len(c.TargetDatabases) > 0 {
					return q, fmt.Errorf("column datname: with target_databases, pgpilot labels each series with its database as datname")
				}
			case discard:
				continue
			default:
				return q, fmt.Errorf("column %s: usage %q is not one of GAUGE, COUNTER, LABEL, DISCARD", name, column.Usage)
			}
			q.Columns = append(q.Columns, Column{Name: name, Usage: usage, Description: column.Description})
		}
	}
	if values == 0 {
		return q, fmt.Errorf("no GAUGE or COUNTER column")
	}
	return q, nil
}
