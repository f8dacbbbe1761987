package shard

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Durability says what an accepted write waits for before it is acknowledged.
type Durability struct {
	// Replicas is how many replicas must confirm a write (Redis WAIT) before it is
	// acknowledged. 0 (the default) relies on AOF and asynchronous replication.
	Replicas int
	// Timeout bounds the wait for the replicas. Default 1s.
	Timeout time.Duration
}

// ParseDurability parses a --durability setting: "" or "async" (the default), or
// "replicas:N" with N ≥ 1.
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "", "async":
		return Durability{}, nil
	}
	n, ok := strings.CutPrefix(s, "replicas:")
	if !ok {
		return Durability{}, fmt.Errorf("durability %q: want async or replicas:N", s)
	}
	r, err := strconv.Atoi(n)
	if err != nil || r < 1 || r > 16 {
		return Durability{}, fmt.Errorf("durability %q: N must be a whole number from 1 to 16", s)
	}
	return Durability{Replicas: r}, nil
}

// String is the --durability form of d.
func (d Durability) String() string {
	if d.Replicas == 0 {
		return "async"
	}
	return "replicas:" + strconv.Itoa(d.Replicas)
}
