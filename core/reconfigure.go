package core

import (
	"errors"
	"fmt"
	"slices"
)

// Reconfigure applies cfg, a new configuration, as a reload does (SIGHUP):
// an event like any other, made under the shell's lock. What it changes
// applies to what comes next, never to what is already held:
//
//   - Limits (MaxBatch, MaxInFlight, MaxHeldBytes, MaxHeldBytesTotal,
//     MaxSubscriptions, MaxClients, MaxWaiting, UpstreamMaxBatch) are
//     checked against the next request, subscription or session: a client
//     already past a lowered bound keeps what it has, and is refused more
//     until it is back under it.
//   - RequestTimeout and UpstreamWait give the deadlines of requests that
//     arrive from now on; those already set stay.
//   - DenyMethods and RetryMethods are the next request's policy.
//   - CoalesceMethods: calls already joined finish together; the next
//     request is matched against the new set.
//   - CacheBytes: a smaller bound evicts the least recently used answers
//     at once; 0 empties the cache and turns it off.
//   - ReportHeads follows the number of upstreams.
//
// What cannot change live (DialGrace, MaxUpstreamMessage, HeldPushBytes,
// BackfillBlocks, MaxUpstreamInFlight: the slots taken are counted only
// while a bound is set) makes Reconfigure return an error naming every such
// field, and change nothing; so does an invalid deny pattern. The
// functions (NewSubscriptionID, Observer, Arenas) are kept as they were.
func (c *Core) Reconfigure(cfg Config) error {
	var errs []error
	for _, f := range []struct {
		name     string
		old, new int64
	}{
		{"DialGrace", int64(c.cfg.DialGrace), int64(cfg.DialGrace)},
		{"MaxUpstreamMessage", int64(c.cfg.MaxUpstreamMessage), int64(cfg.MaxUpstreamMessage)},
		{"HeldPushBytes", int64(c.cfg.HeldPushBytes), int64(cfg.HeldPushBytes)},
		{"BackfillBlocks", int64(c.cfg.BackfillBlocks), int64(cfg.BackfillBlocks)},
		{"MaxUpstreamInFlight", int64(c.cfg.MaxUpstreamInFlight), int64(cfg.MaxUpstreamInFlight)},
	} {
		if f.old != f.new {
			errs = append(errs, fmt.Errorf("core: %s cannot change without a restart (%d, asked %d)", f.name, f.old, f.new))
		}
	}
	pol := c.policy
	if !slices.Equal(cfg.DenyMethods, c.cfg.DenyMethods) || !slices.Equal(cfg.RetryMethods, c.cfg.RetryMethods) {
		p, err := newPolicy(cfg.DenyMethods, cfg.RetryMethods)
		if err != nil {
			errs = append(errs, fmt.Errorf("core: %w", err))
		}
		pol = p
	}
	if _, err := newNames(cfg.Clients, nil); err != nil {
		errs = append(errs, fmt.Errorf("core: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// A name kept keeps its sessions and counts, with its new class; a
	// name dropped stays with the sessions under it until they leave.
	names, _ := newNames(cfg.Clients, c.names)
	// Kept: the functions the shell gave at New.
	cfg.NewSubscriptionID, cfg.Arenas = c.cfg.NewSubscriptionID, c.cfg.Arenas
	cfg.Observer = c.obs
	c.policy = pol
	coalesce := make(map[string]bool, len(cfg.CoalesceMethods))
	for _, m := range cfg.CoalesceMethods {
		coalesce[m] = true
	}
	delete(coalesce, methodSubscribe)
	delete(coalesce, methodUnsubscribe)
	c.coalesce = coalesce
	c.cache.max = max(cfg.CacheBytes, 0)
	for c.cache.bytes > c.cache.max && c.cache.lru.Len() > 0 {
		c.cache.evict(c.cache.lru.Back())
	}
	c.countEvictions()
	c.names = names
	c.cfg = cfg
	return nil
}
