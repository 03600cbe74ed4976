package zkrecipes

import "time"

// WithLossFraction changes how much of the session timeout may pass without
// contact before the Session gives itself up: tests set it above 1 to let the
// ensemble expire the session first and exercise that path.
func WithLossFraction(f float64) Option { return func(o *options) { o.loss = f } }

// WithPendingMaxAge changes how old a queue's pending count may be before a
// collection reads it again: tests set it to a nanosecond to see every
// change at the next collection.
func WithPendingMaxAge(d time.Duration) Option { return func(o *options) { o.pending = d } }

// ParseServers is Connect's reading of its servers.
var ParseServers = parseServers
