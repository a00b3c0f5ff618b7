package request

import (
	"container/list"
	"sync"
)

// lru is a map of at most max entries (at least 1) that drops the least
// recently used one to make room. It is safe for concurrent use.
type lru[K comparable, V any] struct {
	mu      sync.Mutex
	max     int
	entries map[K]*list.Element
	order   list.List // of *lruEntry[K, V], the most recently used first
}

type lruEntry[K comparable, V any] struct {
	key K
	v   V
}

func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*lruEntry[K, V]).v, true
}

// put stores v under k unless an entry is there already, and returns the
// stored value.
func (c *lru[K, V]) put(k K, v V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*lruEntry[K, V]).v
	}
	if c.entries == nil {
		c.entries = map[K]*list.Element{}
	}
	for c.order.Len() >= max(c.max, 1) {
		old := c.order.Back()
		delete(c.entries, old.Value.(*lruEntry[K, V]).key)
		c.order.Remove(old)
	}
	c.entries[k] = c.order.PushFront(&lruEntry[K, V]{key: k, v: v})
	return v
}

// len returns the number of entries.
func (c *lru[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// setMax sets the bound.
func (c *lru[K, V]) setMax(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max = n
}

// limit returns the bound.
func (c *lru[K, V]) limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max
}
