package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
)

// keyHow says how a cached holding granted a lease.
const keyHow = attribute.Key("zkrecipes.grant.how")

// LocalGrant counts a lease of recipe granted by a cached holding without
// joining the line: how is "cached" (no request) or "synced" (after a
// sync).
func (t *T) LocalGrant(recipe, how string) {
	if t == nil {
		return
	}
	t.localGrant.Add(context.Background(), 1, t.attrs(keyRecipe.String(recipe), keyHow.String(how)))
}

// HoldingReleased counts a cached holding of recipe let go, by why: join,
// idle, release, reconnect, unproven, sync, lost.
func (t *T) HoldingReleased(recipe, why string) {
	if t == nil {
		return
	}
	t.cacheRevoked.Add(context.Background(), 1, t.attrs(keyRecipe.String(recipe), keyReason.String(why)))
}
