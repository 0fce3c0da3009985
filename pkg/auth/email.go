package auth

import "strings"

// NormalEmail is an e-mail address as Pinion stores and finds accounts by:
// trimmed and case-folded, so "Ada@Example.com " and "ada@example.com" are
// one person wherever an address is typed (sign-in, registration, resets).
func NormalEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
