package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newSlidingLog(cfg Config) (Limiter, error) { return nil, errors.New("sliding_log: not implemented") }
