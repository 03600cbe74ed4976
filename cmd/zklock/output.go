package main

import (
	"encoding/json"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/zkrecipes/zkrecipes/zklock"
)

// The JSON forms of the listings (-json). Node data is "data" when it is
// UTF-8 text, else "data_base64"; session ids are hexadecimal strings, as
// in the text output (a 64-bit id does not survive a JavaScript number).

// jsonData is node data in JSON.
type jsonData struct {
	Data   *string `json:"data,omitempty"`
	Base64 []byte  `json:"data_base64,omitempty"`
}

func newJSONData(b []byte) jsonData {
	if utf8.Valid(b) {
		s := string(b)
		return jsonData{Data: &s}
	}
	return jsonData{Base64: b}
}

// jsonContender is one contender of a line (holders, watch).
type jsonContender struct {
	Role     string `json:"role"`     // holder or waiter; leader or candidate in an election
	Position int    `json:"position"` // 0 for a holder, 1... for the waiters in the order they will be served
	Path     string `json:"path"`
	Session  string `json:"session"`
	Token    int64  `json:"token"`            // the node's czxid: the fencing token, an election's term
	Cached   bool   `json:"cached,omitempty"` // a CachedMutex's node: held, it may be idle between critical sections
	jsonData
	// watch only: when the node was created (the server's clock) and the
	// time since then, when the frame was read.
	Created *string  `json:"created,omitempty"`
	InLine  *float64 `json:"in_line_seconds,omitempty"`
}

// jsonHolders is holders' output.
type jsonHolders struct {
	Path       string          `json:"path"`
	Kind       string          `json:"kind,omitempty"`    // lock, semaphore, election; none with no contenders
	Permits    int             `json:"permits,omitempty"` // a semaphore's
	Contenders []jsonContender `json:"contenders"`        // holders first, then the waiters in order
}

// jsonLeader is leader's output; Leader is null with no leader.
type jsonLeader struct {
	Path   string          `json:"path"`
	Leader *jsonLeaderNode `json:"leader"`
}

type jsonLeaderNode struct {
	Path    string  `json:"path"`
	Session string  `json:"session"`
	Token   int64   `json:"token"` // the node's czxid: the term, a fencing token as a lock's
	Value   *string `json:"value,omitempty"`
	Base64  []byte  `json:"value_base64,omitempty"`
}

// sessionID is how a session id is shown.
func sessionID(id int64) string { return fmt.Sprintf("0x%x", id) }

// contenderJSON is a contender with its role and position (see positions).
func contenderJSON(c zklock.Contender, role string, position int) jsonContender {
	return jsonContender{Role: role, Position: position, Path: c.Path, Session: sessionID(c.SessionID), Token: c.Token, Cached: c.Cached, jsonData: newJSONData(c.Data)}
}

// printJSON prints v as one line of JSON and returns code, or the failure
// to print.
func (c *cli) printJSON(code int, v any) (int, error) {
	if err := writeJSON(c.stdout, v); err != nil {
		return exitFailure, err
	}
	return code, nil
}

// writeJSON writes v as one line of JSON.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
