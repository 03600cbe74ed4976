package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// library is the module of the recipes zklock is built on.
const library = "github.com/zkrecipes/zkrecipes"

// printVersion prints the version of zklock's module, that of the library
// it was built with, and Go's: as etcdctl version does, one "NAME version:"
// line each. A module's version is a release's tag when installed with go
// install, a pseudo-version when built in a git checkout (Go 1.24 on;
// "+dirty" with uncommitted changes), "(devel)" without version control
// information; a library replaced shows as "v0.0.0 => DIR (devel)", as
// go version -m shows it.
func printVersion(w io.Writer) error {
	cmd, lib := "(devel)", "(unknown)"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			cmd = bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == library {
				lib = moduleVersion(d)
			}
		}
	}
	_, err := fmt.Fprintf(w, "zklock version: %s\nzkrecipes version: %s\ngo version: %s\n", cmd, lib, runtime.Version())
	return err
}

// moduleVersion is a dependency's version, with its replacement's.
func moduleVersion(d *debug.Module) string {
	switch r := d.Replace; {
	case r == nil:
		return d.Version
	default:
		return d.Version + " => " + r.Path + " " + r.Version
	}
}
