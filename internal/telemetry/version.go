package telemetry

import "runtime/debug"

// version is the module's version, for the instrumentation scope: the
// version of this module that the running binary was built with. The
// library is a dependency of the user's program, so it is found among the
// build's dependencies; in this module's own binaries (its tests, the zklock
// command) it is the main module's version, "(devel)" or the one the go
// command stamped from version control. "" when the binary carries no build
// information.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return moduleVersion(bi, scope)
}

// moduleVersion is the version of the module at path in bi: the main
// module's, or a dependency's (its replacement's, when that has a version;
// a replacement by a directory has none, and the version required is kept).
func moduleVersion(bi *debug.BuildInfo, path string) string {
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		return d.Version
	}
	return ""
}
