package algorithms

import "testing"

// timeline is a named run of steps (winTStep or bktTStep) played against a
// new state of an algorithm configured with cfg.
type timeline[S any] struct {
	name  string
	cfg   Config
	steps []S
}

// runTimelines plays each timeline with play, in a subtest of its name.
func runTimelines[S any](t *testing.T, cases []timeline[S], play func(t *testing.T, cfg Config, steps []S)) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { play(t, c.cfg, c.steps) })
	}
}
