package algorithms

import "errors"

// TODO: stub, to be replaced by the real algorithm.
func newFixedWindow(cfg Config) (Limiter, error) { return nil, errors.New("fixed_window: not implemented") }
