package graphql

import (
	"fmt"
	"strings"
	"time"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/pinion-health/pinion/pkg/fhir"
)

// Limits bound what one request may ask for. Each is checked before any
// resource is read, so a query beyond them costs the server almost
// nothing and is answered 400.
type Limits struct {
	// MaxQueryBytes bounds the query text.
	MaxQueryBytes int
	// MaxDepth bounds the nesting of fields (Medplum's default is 12).
	MaxDepth int
	// MaxFields bounds the fields of one selection, fragments included.
	MaxFields int
	// MaxCost bounds the estimated resources read: a list counts its
	// _count (20 when absent), multiplied through the lists around it.
	MaxCost int
	// MaxNodes bounds the resources actually read while answering (a
	// list of references can hold more than the estimate assumes).
	MaxNodes int
	// Deadline bounds the time one request may take.
	Deadline time.Duration
}

// DefaultLimits are those the FHIR service serves with.
var DefaultLimits = Limits{
	MaxQueryBytes: 32 << 10,
	MaxDepth:      12,
	MaxFields:     128,
	MaxCost:       2000,
	MaxNodes:      5000,
	Deadline:      20 * time.Second,
}

// maxVisits bounds the walk that checks the limits itself: fragments
// spread into each other repeat their fields without bound in the text's
// size, and the walk must stop before it costs more than the query is
// allowed to.
const maxVisits = 20000

type limitWalk struct {
	l      Limits
	vars   map[string]any
	visits int
}

// check walks the operation with fragments expanded.
func (l Limits) check(op *ast.OperationDefinition, vars map[string]any) error {
	w := &limitWalk{l: l, vars: vars}
	_, err := w.set(op.SelectionSet, 1, 1)
	return err
}

// set returns the estimated cost of a selection at depth, each resolved
// node counted mult times.
func (w *limitWalk) set(set ast.SelectionSet, depth, mult int) (int, error) {
	fields := 0
	cost := 0
	var walk func(ast.SelectionSet) error
	walk = func(s ast.SelectionSet) error {
		for _, sel := range s {
			if w.visits++; w.visits > maxVisits {
				return tooComplex(fmt.Sprintf("Query too complex: more than %d fields once fragments are expanded", maxVisits))
			}
			switch sel := sel.(type) {
			case *ast.Field:
				if fields++; fields > w.l.MaxFields {
					return tooComplex(fmt.Sprintf("Too many fields in one selection (max %d)", w.l.MaxFields))
				}
				if depth > w.l.MaxDepth {
					return tooComplex(fmt.Sprintf("Field %q exceeds max depth (depth=%d, max=%d)", sel.Name, depth, w.l.MaxDepth))
				}
				m := mult
				if n := w.nodes(sel); n > 0 {
					m = mult * n
					cost += m
					if cost > w.l.MaxCost {
						return tooCostly(w.l.MaxCost)
					}
				}
				if len(sel.SelectionSet) > 0 {
					c, err := w.set(sel.SelectionSet, depth+1, m)
					if err != nil {
						return err
					}
					if cost += c; cost > w.l.MaxCost {
						return tooCostly(w.l.MaxCost)
					}
				}
			case *ast.InlineFragment:
				if err := walk(sel.SelectionSet); err != nil {
					return err
				}
			case *ast.FragmentSpread:
				if sel.Definition != nil {
					if err := walk(sel.Definition.SelectionSet); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	err := walk(set)
	return cost, err
}

// nodes estimates the resources one field reads: 0 for a field of the
// resource already read, 1 for a read or a reference, the page size for a
// list.
func (w *limitWalk) nodes(f *ast.Field) int {
	if f.ObjectDefinition == nil {
		return 0
	}
	parent := f.ObjectDefinition.Name
	switch {
	case parent == "Reference" && f.Name == "resource":
		return 1
	case strings.HasSuffix(f.Name, "List") && (parent == queryRoot || f.Arguments.ForName("_reference") != nil):
		n := defaultCount
		if c, ok := intArg(f.ArgumentMap(w.vars)["_count"]); ok {
			n = min(max(c, 1), maxCount)
		}
		return n
	case parent == queryRoot || parent == mutationRoot:
		return 1
	}
	return 0
}

func tooComplex(msg string) error { return fhir.BadRequest(msg) }

func tooCostly(max int) error {
	return fhir.BadRequest(fmt.Sprintf("Query too expensive: it may read more than %d resources; ask for fewer (_count) or nest fewer lists", max))
}
