package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newTokenBucket(cfg Config) (Limiter, error) { return nil, errors.New("token_bucket: not implemented") }
