package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newConcurrency(cfg Config) (Limiter, error) { return nil, errors.New("concurrency: not implemented") }
