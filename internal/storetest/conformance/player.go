package conformance

import (
	"context"
	"fmt"
	"time"

	"github.com/zonelimit/caddy-ratelimit/algorithms"
	"github.com/zonelimit/caddy-ratelimit/store"
)

// t0 is the start of every timeline: an odd instant, not aligned to any
// window.
var t0 = time.Date(2026, 3, 1, 12, 0, 7, 123456000, time.UTC)

// Player plays a timeline of Ops step by step on a reference store and a
// store under test, and counts what its steps did: a timeline that never
// admits, never denies or never undoes tests less than it seems to.
type Player struct {
	ops    []Op
	decs   []algorithms.Decision // the reference's
	toks   []uint64              // the tokens of the store under test's
	undone []bool

	Allowed, Denied, Undos int
}

// NewPlayer returns a Player of ops, before its first step.
func NewPlayer(ops []Op) *Player {
	return &Player{ops: ops, decs: make([]algorithms.Decision, len(ops)), toks: make([]uint64, len(ops)), undone: make([]bool, len(ops))}
}

// stepped is what playStep did.
type stepped uint8

const (
	stepSkipped stepped = iota // an undo of a step that admitted nothing, or was undone
	stepUndone
	stepTaken
)

// Play plays step i on the reference ref (whose decisions are the wanted
// ones) and the store under test s, and returns their decisions and
// whether the step was a Take. An Undo step gives back an earlier admitted
// Take (once), each store with its own decision's token. An error of s
// says which call failed.
func (p *Player) Play(ctx context.Context, ref, s store.Store, i int) (want, got algorithms.Decision, taken bool, err error) {
	want, got, step, err := p.playStep(ctx, ref, s, i)
	if err != nil {
		return want, got, false, err
	}
	switch {
	case step == stepUndone:
		p.Undos++
	case step == stepTaken && want.Allowed:
		p.Allowed++
	case step == stepTaken:
		p.Denied++
	}
	return want, got, step == stepTaken, nil
}

func (p *Player) playStep(ctx context.Context, ref, s store.Store, i int) (want, got algorithms.Decision, st stepped, err error) {
	o := p.ops[i]
	now := t0.Add(o.At)
	if o.Undo > 0 {
		j := o.Undo - 1
		if p.undone[j] || !p.decs[j].Allowed {
			return want, got, stepSkipped, nil
		}
		p.undone[j] = true
		if err := ref.Undo(ctx, o.Key, now, o.Cost, p.decs[j]); err != nil {
			return want, got, stepUndone, err
		}
		if err := s.Undo(ctx, o.Key, now, o.Cost, withToken(p.decs[j], p.toks[j])); err != nil {
			return want, got, stepUndone, fmt.Errorf("undo: %w", err)
		}
		return want, got, stepUndone, nil
	}
	if want, err = ref.Take(ctx, o.Key, now, o.Cost); err != nil {
		return want, got, stepTaken, err
	}
	p.decs[i] = want
	if got, err = s.Take(ctx, o.Key, now, o.Cost); err != nil {
		return want, got, stepTaken, fmt.Errorf("take: %w", err)
	}
	p.toks[i] = got.Token
	return want, got, stepTaken, nil
}

// withToken returns d with token: the store under test's own for d's
// lease (a store makes its own tokens).
func withToken(d algorithms.Decision, token uint64) algorithms.Decision {
	d.Token = token
	return d
}

// Differ is the failure message of step i, whose decisions differ by d
// (Diff), with more said about the step, and the last steps.
func (p *Player) Differ(i int, more, d string) string {
	o := p.ops[i]
	return fmt.Sprintf("step %d (at t0%+v key %q cost %d%s): decisions differ:%s\n%s", i, o.At, o.Key, o.Cost, more, d, history(p.ops[:i+1], p.decs))
}

// history renders the last steps of a timeline for a failure message.
func history(ops []Op, decs []algorithms.Decision) string {
	s := ""
	from := max(0, len(ops)-12)
	for i := from; i < len(ops); i++ {
		o := ops[i]
		if o.Undo > 0 {
			s += fmt.Sprintf("\t%3d at %v %q undo step %d\n", i, o.At, o.Key, o.Undo-1)
		} else {
			s += fmt.Sprintf("\t%3d at %v %q cost %d -> %+v\n", i, o.At, o.Key, o.Cost, decs[i])
		}
	}
	return s
}

// Diff describes how got, the decision of the store named name, differs
// from want, the Go algorithm's ("" when they agree): Allowed, Tier, Limit
// and Remaining exactly, whether a lease was made (Token not 0: a store
// makes its own tokens), the durations (ResetAfter, MoreAfter, RetryAfter,
// Delay) within a millisecond (inexact) or exactly (exact).
func Diff(want, got algorithms.Decision, exact bool, name string) string {
	tol := time.Millisecond
	if exact {
		tol = 0
	}
	far := func(a, b time.Duration) bool {
		d := a - b
		return d > tol || d < -tol
	}
	if want.Allowed != got.Allowed || want.Tier != got.Tier || want.Limit != got.Limit ||
		want.Remaining != got.Remaining || (want.Token == 0) != (got.Token == 0) ||
		far(want.ResetAfter, got.ResetAfter) || far(want.MoreAfter, got.MoreAfter) ||
		far(want.RetryAfter, got.RetryAfter) || far(want.Delay, got.Delay) {
		w := max(len("go:"), len(name)+1) // the two decisions aligned
		return fmt.Sprintf("\n\t%-*s %+v\n\t%-*s %+v", w, "go:", want, w, name+":", got)
	}
	return ""
}
