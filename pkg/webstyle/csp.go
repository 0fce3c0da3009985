package webstyle

import (
	"crypto/sha256"
	"encoding/base64"
)

// CSPHash is how a Content-Security-Policy names an inline style or
// script it allows: the base64 of its SHA-256, to follow 'sha256-'.
func CSPHash(inline string) string {
	d := sha256.Sum256([]byte(inline))
	return base64.StdEncoding.EncodeToString(d[:])
}
