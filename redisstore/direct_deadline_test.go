package redisstore

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/zonelimit/caddy-ratelimit/internal/redistest"
)

// A deadline is moved only once less than nine tenths of the timeout is
// left of it.
func TestDeadlineDue(t *testing.T) {
	const timeout = 10 * time.Second
	for _, tc := range []struct {
		at   time.Time
		now  time.Time
		want bool
	}{
		{time.Time{}, t0, true},
		{t0.Add(timeout), t0, false},
		{t0.Add(timeout), t0.Add(time.Second), false}, // 9s left: 0.9
		{t0.Add(timeout), t0.Add(time.Second + 1), true},
		{t0.Add(timeout), t0.Add(timeout), true},
		{t0, t0.Add(time.Hour), true}, // passed
	} {
		if got := deadlineDue(tc.at, tc.now, timeout); got != tc.want {
			t.Errorf("deadline %v at %v: due %v, want %v", tc.at.Sub(t0), tc.now.Sub(t0), got, tc.want)
		}
	}
}

// ping sends a PING on d as a batch is sent: deadlines, one write, one
// read.
func (d *directConn) ping() error {
	if err := d.deadline(false); err != nil {
		return err
	}
	d.out = appendBulk(appendArray(d.out[:0], 1), "PING")
	if err := d.flush(); err != nil {
		return err
	}
	if err := d.deadline(true); err != nil {
		return err
	}
	var r reply
	if err := d.read(&r); err != nil {
		return err
	}
	return r.err
}

// pingedConn returns a redis-server and a directConn to it with read and
// write timeouts timeout, on which a PING was sent; both end with the test.
func pingedConn(t *testing.T, timeout time.Duration) (*redistest.Server, *directConn) {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: timeout, WriteTimeout: timeout})
	t.Cleanup(func() { c.Close() })
	d := &directConn{opts: directOptions(c)}
	if err := d.dial(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	if err := d.ping(); err != nil {
		t.Fatal(err)
	}
	return srv, d
}

// The batches that follow one another within a tenth of the timeout keep
// the deadlines set by the first.
func TestDirectConnKeepsDeadlines(t *testing.T) {
	_, d := pingedConn(t, time.Hour)
	rdl, wdl := d.rdl, d.wdl
	if rdl.IsZero() || wdl.IsZero() {
		t.Fatalf("deadlines %v and %v after a batch, want both set", rdl, wdl)
	}
	for i := 0; i < 10; i++ {
		if err := d.ping(); err != nil {
			t.Fatal(err)
		}
	}
	if !d.rdl.Equal(rdl) || !d.wdl.Equal(wdl) {
		t.Errorf("deadlines moved from %v, %v to %v, %v within a tenth of the timeout", rdl, wdl, d.rdl, d.wdl)
	}
}

// A connection dialed again gets deadlines of its own: a read that a
// stopped redis-server does not answer times out on it, though the last
// connection's deadlines had most of their timeout left.
func TestDirectConnDeadlineAfterRedial(t *testing.T) {
	srv, d := pingedConn(t, 3*time.Second)
	d.close()
	// The dial's own PING is the first read on the new connection.
	srv.Pause()
	defer srv.Resume()
	done := make(chan error, 1)
	go func() {
		err := d.dial()
		if err == nil {
			err = d.ping()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("with redis-server stopped: %v, want a timeout", err)
		}
	case <-time.After(time.Minute):
		srv.Resume() // the read returns, and the connection is closed
		t.Fatal("no timeout within a minute on a connection dialed again")
	}
}
