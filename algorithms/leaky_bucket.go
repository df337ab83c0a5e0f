package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newLeakyBucket(cfg Config) (Limiter, error) { return nil, errors.New("leaky_bucket: not implemented") }
