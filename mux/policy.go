package mux

import (
	"fmt"
	"path"
)

// policy answers the per-method questions: may it be called, may it be
// retried on a new connection.
type policy struct {
	deny  []string
	retry map[string]bool
	// deniedKnown is the verdict for every known method, worked out once;
	// other names go through the patterns each time.
	deniedKnown map[string]bool
}

func newPolicy(deny, retry []string) (policy, error) {
	for _, p := range deny {
		if _, err := path.Match(p, ""); err != nil {
			return policy{}, fmt.Errorf("deny pattern %q: %w", p, err)
		}
	}
	p := policy{deny: deny, retry: make(map[string]bool, len(retry)), deniedKnown: map[string]bool{}}
	for name := range knownMethods {
		p.deniedKnown[name] = p.match(name)
	}
	for _, m := range retry {
		p.retry[m] = true
	}
	return p, nil
}

func (p policy) denied(method string) bool {
	if d, ok := p.deniedKnown[method]; ok {
		return d
	}
	return p.match(method)
}

func (p policy) match(method string) bool {
	for _, pat := range p.deny {
		if ok, _ := path.Match(pat, method); ok {
			return true
		}
	}
	return false
}

func (p policy) retryable(method string) bool { return p.retry[method] }
