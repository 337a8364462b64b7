// Package jsonsubset compares a value with what an API server holds for it: every field the
// value sets must be there with the same value, while anything the server added (defaults,
// status, other managers' fields) is not a difference. Both the operator's "is this owned
// object up to date" check and the scorecard's "did the server keep every field of the
// example" check ask exactly this, so they share one definition of it.
package jsonsubset

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// Kind says how have fails to hold a field of want.
type Kind int

const (
	// Missing: have has no such key.
	Missing Kind = iota + 1
	// NotObject: want holds an object, have something else.
	NotObject
	// Length: want holds a list, have a list of another length or no list.
	Length
	// Value: the two hold different scalars (or different types).
	Value
)

// Difference is one field set in want that have lacks or holds with another value.
type Difference struct {
	// Path is the field's path from the root given to Walk: root.a.b, root.list[2].
	Path string
	Kind Kind
	// Want and Have are the two values, for Kind Value.
	Want, Have any
}

// String is the form the operator's log shows when it explains why it writes.
func (d Difference) String() string {
	switch d.Kind {
	case Missing:
		return d.Path + " (missing)"
	case NotObject:
		return d.Path + " (not an object)"
	case Length:
		return d.Path + " (length)"
	default:
		return fmt.Sprintf("%s (%v != %v)", d.Path, d.Want, d.Have)
	}
}

// Walk calls visit for every field set in want that have lacks or holds with another value,
// object keys in sorted order so that the first difference is the same on every run, and stops
// as soon as visit returns false. Lists must have the same length and match element by element:
// their order is part of their value. Both values are expected as encoding/json decodes into
// any (see Normalize): map[string]any, []any and scalars, numbers as float64.
func Walk(want, have any, root string, visit func(Difference) bool) {
	walk(want, have, root, visit)
}

// walk reports whether to go on.
func walk(want, have any, path string, visit func(Difference) bool) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return visit(Difference{Path: path, Kind: NotObject, Want: want, Have: have})
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			hv, ok := h[k]
			if !ok {
				if !visit(Difference{Path: path + "." + k, Kind: Missing, Want: w[k]}) {
					return false
				}
				continue
			}
			if !walk(w[k], hv, path+"."+k, visit) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return visit(Difference{Path: path, Kind: Length, Want: want, Have: have})
		}
		for i := range w {
			if !walk(w[i], h[i], fmt.Sprintf("%s[%d]", path, i), visit) {
				return false
			}
		}
		return true
	default:
		// DeepEqual rather than ==, which panics on a value that was not normalised (a map of
		// another type) instead of reporting it as different.
		if !reflect.DeepEqual(want, have) {
			return visit(Difference{Path: path, Kind: Value, Want: want, Have: have})
		}
		return true
	}
}

// First is the first difference Walk finds, and whether there is one.
func First(want, have any, root string) (Difference, bool) {
	var first Difference
	found := false
	Walk(want, have, root, func(d Difference) bool {
		first, found = d, true
		return false
	})
	return first, found
}

// All is every difference Walk finds, in its order.
func All(want, have any, root string) []Difference {
	var all []Difference
	Walk(want, have, root, func(d Difference) bool {
		all = append(all, d)
		return true
	})
	return all
}

// IsSubset reports whether every field set in want has the same value in have.
func IsSubset(want, have any) bool {
	_, differs := First(want, have, "")
	return !differs
}

// Normalize turns v into what encoding/json decodes it as, the only form Walk compares: typed
// objects and apply configurations become maps, every number a float64.
func Normalize(v any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T as JSON: %w", v, err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decode %T from JSON: %w", v, err)
	}
	return out, nil
}
