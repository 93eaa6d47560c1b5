package core

// Connected reports whether an upstream connection is current.
func (c *Core) Connected() bool { return c.gen != 0 }
