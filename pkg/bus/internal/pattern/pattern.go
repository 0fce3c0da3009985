// Package pattern holds the rules of a route pattern ("METHOD /path" with
// :name segments) that both package bus and its table's generator apply,
// so the generator builds without the table it writes.
package pattern

import (
	"fmt"
	"strings"
)

// Subject is the subject service serves route on: the service, then the
// method and the path's segments as tokens, as nats micro's groups derive
// theirs. A dot within a segment, which NATS would read as a separator,
// becomes "_".
func Subject(service, route string) string {
	method, path, _ := strings.Cut(route, " ")
	var b strings.Builder
	b.WriteString("pinion.")
	b.WriteString(service)
	b.WriteString(".")
	b.WriteString(method)
	for _, seg := range Segments(path) {
		if seg == "" {
			continue
		}
		b.WriteString(".")
		b.WriteString(strings.ReplaceAll(seg, ".", "_"))
	}
	return b.String()
}

// Parse splits "METHOD /path" and refuses a route the table could not
// hold: a method in lower case, a path not from the root, an empty
// segment, or one holding white space or a NATS wildcard (* or >).
func Parse(route string) (method, path string, err error) {
	method, path, ok := strings.Cut(route, " ")
	if !ok || method == "" || strings.ToUpper(method) != method || !strings.HasPrefix(path, "/") {
		return "", "", fmt.Errorf("route %q: want \"METHOD /path\"", route)
	}
	if strings.ContainsAny(path, " \t*>") || strings.Contains(path, "//") {
		return "", "", fmt.Errorf("route %q: a path segment holds a space, * or >, or is empty", route)
	}
	return method, path, nil
}

// Segments are a path's segments.
func Segments(path string) []string { return strings.Split(strings.Trim(path, "/"), "/") }

// Compare orders two paths so that the more specific comes first: at the
// first segment where they differ, a literal before a :name (two literals
// in byte order), then the shorter path. 0 means they match the same
// paths (they differ at most in their parameters' names).
func Compare(a, b string) int {
	sa, sb := Segments(a), Segments(b)
	for i := 0; i < len(sa) && i < len(sb); i++ {
		pa, pb := strings.HasPrefix(sa[i], ":"), strings.HasPrefix(sb[i], ":")
		switch {
		case pa != pb && !pa:
			return -1
		case pa != pb:
			return 1
		case !pa && sa[i] != sb[i]:
			return strings.Compare(sa[i], sb[i])
		}
	}
	return len(sa) - len(sb)
}
