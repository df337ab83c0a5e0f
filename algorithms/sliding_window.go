package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newSlidingWindow(cfg Config) (Limiter, error) { return nil, errors.New("sliding_window: not implemented") }
