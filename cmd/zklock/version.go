package main

import "runtime/debug"

// version is the module version zklock was built from: a release's tag
// when built with go install, a pseudo-version when built in a git
// checkout (Go 1.24 on; "+dirty" with uncommitted changes), "(devel)" when
// the build had no version control information.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
