package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newGCRA(cfg Config) (Limiter, error) { return nil, errors.New("gcra: not implemented") }
