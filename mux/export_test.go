package mux

// WithoutHealthHeads leaves a single upstream without muxd's newHeads
// health subscription (Config.noHealthHeads), for the external tests that
// count exactly what the node receives.
func WithoutHealthHeads(c *Config) { c.noHealthHeads = true }
