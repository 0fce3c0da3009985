// Command routegen collects the HTTP routes the services declare (their
// bus.Handle calls) into bus.Routes, the one table the gateway,
// batches and bots use without linking the services. It reads the
// sources with go/ast, so nothing of the services is built or run.
//
//	go run ./internal/routegen -root ../.. -out routes_gen.go
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
)

func main() {
	root := flag.String("root", "../..", "the repository's root, which holds services/")
	out := flag.String("out", "routes_gen.go", "the file to write")
	flag.Parse()
	routes, err := Collect(*root)
	if err == nil {
		var src []byte
		if src, err = Render(routes); err == nil {
			err = os.WriteFile(*out, src, 0o644)
		}
	}
	if err != nil {
		slog.Error("routegen", "err", err)
		fmt.Fprintln(os.Stderr, "routegen:", err)
		os.Exit(1)
	}
}
