// Package webstyle is the style sheet every Pinion page starts from: the
// sign-in pages (services/identity) and the console (gateway/console) look
// alike, and each adds its own rules after it.
package webstyle

import _ "embed"

// Base is the shared style sheet.
//
//go:embed base.css
var Base string
