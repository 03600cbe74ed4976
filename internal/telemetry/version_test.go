package telemetry

import (
	"runtime/debug"
	"testing"
)

// The scope's version is the module's, wherever the module is in the
// build: the main module, a dependency, a replaced dependency.
func TestModuleVersion(t *testing.T) {
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"main module", debug.BuildInfo{Main: debug.Module{Path: scope, Version: "(devel)"}}, "(devel)"},
		{"dependency", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app", Version: "v0.1.0"},
			Deps: []*debug.Module{dep("go.opentelemetry.io/otel", "v1.44.0", nil), dep(scope, "v1.2.3", nil)},
		}, "v1.2.3"},
		{"replaced by a version", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(scope, "v1.2.3", dep("example.com/fork", "v1.2.4-fork", nil))},
		}, "v1.2.4-fork"},
		{"replaced by a directory", debug.BuildInfo{
			Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(scope, "v1.2.3", dep("../zkrecipes", "", nil))},
		}, "v1.2.3"},
		{"absent", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, ""},
	} {
		if got := moduleVersion(&tc.bi, scope); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
