package ratelimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// problem_details: a rejection written by the handler carries an RFC 9457
// problem details body of the quota-exceeded type that the IETF rate-limit
// headers draft (draft-ietf-httpapi-ratelimit-headers) defines, whose
// violated-policies member names the policies of RateLimit-Policy that
// refused: here the zone's name, which every tier of the zone has.

// Members of the quota-exceeded problem type.
const (
	problemType        = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTitle       = "Request cannot be satisfied as assigned quota has been exceeded"
	problemContentType = "application/problem+json"
)

// problemBody is a zone's problem+json body around the one member that
// varies per rejection: the seconds to wait, in detail.
type problemBody struct {
	head []byte // up to the seconds of detail
	tail []byte // after them
}

// newProblemBody prepares the body of zone name's rejections with status.
func newProblemBody(name string, status int) problemBody {
	str := func(s string) []byte {
		b, _ := json.Marshal(s) // a string always marshals
		return b
	}
	detail := str("Rate limit exceeded in zone " + name + ": retry after ")
	head := []byte(`{"type":`)
	head = append(head, str(problemType)...)
	head = append(head, `,"title":`...)
	head = append(head, str(problemTitle)...)
	head = append(head, `,"status":`...)
	head = strconv.AppendInt(head, int64(status), 10)
	head = append(head, `,"detail":`...)
	head = append(head, detail[:len(detail)-1]...) // open: the seconds follow
	tail := []byte(`s.","violated-policies":[`)
	tail = append(tail, str(name)...)
	tail = append(tail, "]}"...)
	return problemBody{head: head, tail: tail}
}

// writeProblem writes a rejection with status and the zone's problem
// body, whose detail says to retry after retry seconds (as Retry-After
// does).
func (z *zone) writeProblem(w http.ResponseWriter, status int, retry int64) error {
	p := &z.problem
	body := make([]byte, 0, len(p.head)+20+len(p.tail))
	body = append(body, p.head...)
	body = strconv.AppendInt(body, retry, 10)
	body = append(body, p.tail...)
	// The request's own value slices, as setHeaders's: a deferred header
	// handler edits values in place.
	vals := []string{problemContentType, strconv.Itoa(len(body))}
	hdr := w.Header()
	hdr["Content-Type"] = vals[0:1:1]
	hdr["Content-Length"] = vals[1:2:2]
	w.WriteHeader(status)
	// A failed write is a client gone: nothing left to answer.
	_, _ = w.Write(body)
	return nil
}
