package store

import "testing"

// AddKeeping evicts as Add does when the entries it looks at are all kept
// and the shard holds twice its budget, reusing the evicted entry only when
// reusable says so.
func TestAddKeepingReusable(t *testing.T) {
	l := NewLRU[int](1) // one shard of one key
	s := l.Shard("a")
	s.Lock()
	defer s.Unlock()
	keepAll := func(*Entry[int]) bool { return true }
	never := func(*Entry[int]) bool { return false }
	a := s.AddKeeping("a", keepAll, never)
	a.Value = 1
	b := s.AddKeeping("b", keepAll, never) // a is kept: the shard grows
	b.Value = 2
	if !s.Holds(a) || !s.Holds(b) {
		t.Fatal("a kept entry was evicted below twice the budget")
	}
	c := s.AddKeeping("c", keepAll, never) // twice the budget: one goes
	if c == a || c == b || c.Value != 0 {
		t.Fatalf("an entry reusable refuses was reused (Value %d)", c.Value)
	}
	if s.Holds(a) == s.Holds(b) || len(s.entries) != 2 {
		t.Fatalf("a held %v, b held %v, %d entries: want one of them evicted, 2 entries", s.Holds(a), s.Holds(b), len(s.entries))
	}
	gone := a
	if s.Holds(a) {
		gone = b
	}
	if gone.Value == 0 {
		t.Fatal("the evicted entry's Value was reset")
	}
	kept := a
	if kept == gone {
		kept = b
	}
	if d := s.AddKeeping("d", keepAll, nil); d != c && d != kept {
		t.Fatal("reusable nil: the evicted entry was not reused")
	}
}
