package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Do sends one command in RESP to addr on a new connection and returns the
// reply as text (simple strings, integers and bulk strings as they are; an
// error reply as an error). It is enough for the helpers' own PING, INFO and
// CLUSTER commands, without a client library.
func Do(addr string, args ...string) (string, error) {
	return do(addr, exchangeTimeout, args...)
}

// exchangeTimeout bounds a command of Do, its dial included. It is only
// there to end a test that hangs: long enough for a loaded machine, where
// a dial or a reply can take seconds.
const exchangeTimeout = 10 * time.Second

func do(addr string, timeout time.Duration, args ...string) (string, error) {
	return exchange(addr, timeout, args, readReply)
}

// doList is Do for a command whose reply is an array of bulk strings.
func doList(addr string, args ...string) ([]string, error) {
	return exchange(addr, exchangeTimeout, args, func(r *bufio.Reader) ([]string, error) {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		if line[0] != '*' {
			return nil, fmt.Errorf("unexpected reply %q", line)
		}
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		out := make([]string, 0, max(n, 0))
		for range n {
			s, err := readReply(r)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	})
}

// exchange sends args in RESP to addr on a new connection, within timeout,
// and reads the reply with read. The dial has the same deadline as the
// reply: on a loaded machine a connect can take a second or more (a dropped
// SYN is sent again after one second), which is no failure of the server.
func exchange[T any](addr string, timeout time.Duration, args []string, read func(*bufio.Reader) (T, error)) (T, error) {
	var zero T
	deadline := time.Now().Add(timeout)
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return zero, err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return zero, err
	}
	return read(bufio.NewReader(c))
}

// readLine reads one line of a reply, without its CRLF; never empty.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	return line, nil
}

// readReply reads a simple string, integer, bulk string or error reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", err
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
