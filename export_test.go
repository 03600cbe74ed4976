package zkrecipes

// WithLossFraction changes how much of the session timeout may pass without
// contact before the Session gives itself up: tests set it above 1 to let the
// ensemble expire the session first and exercise that path.
func WithLossFraction(f float64) Option { return func(o *options) { o.loss = f } }

// ParseServers is Connect's reading of its servers.
var ParseServers = parseServers
