package jsonsubset

import (
	"encoding/json"
	"slices"
	"testing"
)

// fromJSON decodes a JSON document the way Walk expects values: maps, slices, float64s.
func fromJSON(t *testing.T, doc string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("decode %s: %v", doc, err)
	}
	return v
}

func TestIsSubset(t *testing.T) {
	tests := []struct {
		name string
		want string
		have string
		ok   bool
	}{
		{name: "equal maps", want: `{"a":"x","b":1}`, have: `{"a":"x","b":1}`, ok: true},
		{name: "extra keys in have are ignored", want: `{"a":"x"}`, have: `{"a":"x","defaulted":true}`, ok: true},
		{name: "empty want matches anything", want: `{}`, have: `{"a":1}`, ok: true},
		{name: "missing key", want: `{"a":"x","b":"y"}`, have: `{"a":"x"}`, ok: false},
		{name: "different scalar value", want: `{"a":"x"}`, have: `{"a":"z"}`, ok: false},
		{name: "nested maps with defaults", want: `{"spec":{"replicas":3}}`, have: `{"spec":{"replicas":3,"revisionHistoryLimit":10}}`, ok: true},
		{name: "nested map value differs", want: `{"spec":{"replicas":3}}`, have: `{"spec":{"replicas":1}}`, ok: false},
		{name: "map where have has a scalar", want: `{"spec":{"replicas":3}}`, have: `{"spec":"x"}`, ok: false},
		{name: "map where have is null", want: `{"spec":{}}`, have: `{"spec":null}`, ok: false},
		{name: "lists of equal length and elements", want: `{"l":[1,"a",true]}`, have: `{"l":[1,"a",true]}`, ok: true},
		{name: "list elements are subsets", want: `{"l":[{"name":"a"}]}`, have: `{"l":[{"name":"a","default":1}]}`, ok: true},
		{name: "list longer in have", want: `{"l":[1]}`, have: `{"l":[1,2]}`, ok: false},
		{name: "list shorter in have", want: `{"l":[1,2]}`, have: `{"l":[1]}`, ok: false},
		{name: "list element mismatch", want: `{"l":[1,2]}`, have: `{"l":[1,3]}`, ok: false},
		{name: "list order matters", want: `{"l":[1,2]}`, have: `{"l":[2,1]}`, ok: false},
		{name: "list where have has a map", want: `{"l":[1]}`, have: `{"l":{"0":1}}`, ok: false},
		{name: "numbers equal as float64", want: `5432`, have: `5432.0`, ok: true},
		{name: "numbers differ", want: `5432`, have: `5433`, ok: false},
		{name: "number vs string", want: `1`, have: `"1"`, ok: false},
		{name: "equal strings", want: `"a"`, have: `"a"`, ok: true},
		{name: "booleans differ", want: `false`, have: `true`, ok: false},
		{name: "null matches null", want: `null`, have: `null`, ok: true},
		{name: "null vs value", want: `null`, have: `0`, ok: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsSubset(fromJSON(t, tt.want), fromJSON(t, tt.have)); got != tt.ok {
				t.Errorf("IsSubset(%s, %s) = %v, want %v", tt.want, tt.have, got, tt.ok)
			}
		})
	}
}

// The paths and kinds are what the operator logs and the scorecard reports, so they are part
// of the contract: sorted keys, [i] for list elements, the root the caller names.
func TestDifferences(t *testing.T) {
	tests := []struct {
		name  string
		want  string
		have  string
		root  string
		all   []string
		first string
	}{
		{name: "none", want: `{"a":1}`, have: `{"a":1,"b":2}`, root: "spec"},
		{name: "missing keys in sorted order", want: `{"b":1,"a":1}`, have: `{}`, root: "spec",
			all: []string{"spec.a (missing)", "spec.b (missing)"}, first: "spec.a (missing)"},
		{name: "not an object", want: `{"s":{"x":1}}`, have: `{"s":[1]}`, root: "",
			all: []string{".s (not an object)"}, first: ".s (not an object)"},
		{name: "list length", want: `{"l":[1,2]}`, have: `{"l":[1]}`, root: "spec",
			all: []string{"spec.l (length)"}, first: "spec.l (length)"},
		{name: "values inside lists", want: `{"l":[{"n":"a"},{"n":"b"}]}`, have: `{"l":[{"n":"x"},{"n":"y"}]}`, root: "spec",
			all: []string{"spec.l[0].n (a != x)", "spec.l[1].n (b != y)"}, first: "spec.l[0].n (a != x)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, have := fromJSON(t, tt.want), fromJSON(t, tt.have)
			var all []string
			for _, d := range All(want, have, tt.root) {
				all = append(all, d.String())
			}
			if !slices.Equal(all, tt.all) {
				t.Errorf("All = %q, want %q", all, tt.all)
			}
			first, found := First(want, have, tt.root)
			if found != (tt.first != "") || found && first.String() != tt.first {
				t.Errorf("First = %q, %v, want %q", first, found, tt.first)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	type spec struct {
		Replicas int               `json:"replicas"`
		Labels   map[string]string `json:"labels,omitempty"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{name: "struct becomes a map with float64 numbers", in: spec{Replicas: 3}, want: `{"replicas":3}`},
		{name: "typed map becomes map[string]any", in: spec{Labels: map[string]string{"a": "b"}}, want: `{"replicas":0,"labels":{"a":"b"}}`},
		{name: "nil stays nil", in: nil, want: `null`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Normalize(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if want := fromJSON(t, tt.want); !IsSubset(want, got) || !IsSubset(got, want) {
				t.Errorf("Normalize(%+v) = %#v, want %s", tt.in, got, tt.want)
			}
		})
	}
	if _, err := Normalize(func() {}); err == nil {
		t.Error("Normalize of a func: no error")
	}
}
