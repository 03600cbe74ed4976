package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/fairqueue"
	"github.com/zkrecipes/zkrecipes/zktest"
)

// openQueue opens the queue at path on a session of the test's own.
func openQueue(t *testing.T, addr, path string) (context.Context, *fairqueue.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s, err := zkrecipes.Connect(ctx, []string{addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	q, err := fairqueue.New(s, path)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, q
}

// drainQueue takes and acks every item of q, and returns their ids and
// data, in order.
func drainQueue(t *testing.T, ctx context.Context, q *fairqueue.Queue) (ids, data []string) {
	t.Helper()
	for {
		j, err := q.TryTake(ctx)
		if errors.Is(err, fairqueue.ErrEmpty) {
			return ids, data
		}
		if err != nil {
			t.Fatal(err)
		}
		ids, data = append(ids, j.ID()), append(data, string(j.Data()))
		if err := j.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestQueuePutStreamsStdin writes lines to queue put's stdin one at a time,
// through a pipe that stays open: each is in the queue, and its id printed,
// before the next is written (tail -f FILE | zklock queue put PATH).
func TestQueuePutStreamsStdin(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	path := lockPath(t)
	ctx, q := openQueue(t, addr, path)

	cmd := zklockCmd(t, addr, "queue", "put", path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	printed := make(chan string, 10)
	go func() {
		defer close(printed)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			printed <- sc.Text()
		}
	}()

	lines := []string{"first", "second\r", "", "fourth"}
	var ids []string
	for i, line := range lines {
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case id, ok := <-printed:
			if !ok {
				cmd.Wait()
				t.Fatalf("queue put ended after %d lines; stderr:\n%s", i, stderr(cmd))
			}
			ids = append(ids, id)
		case <-time.After(30 * time.Second):
			t.Fatalf("line %d: no id printed while stdin stays open; stderr:\n%s", i+1, stderr(cmd))
		}
		if n, err := q.Len(ctx); err != nil || n != i+1 {
			t.Fatalf("after line %d was put: %d items pending (%v), want %d", i+1, n, err, i+1)
		}
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("queue put: %v once stdin closed; stderr:\n%s", err, stderr(cmd))
	}
	gotIDs, data := drainQueue(t, ctx, q)
	if want := []string{"first", "second", "", "fourth"}; fmt.Sprint(data) != fmt.Sprint(want) || fmt.Sprint(gotIDs) != fmt.Sprint(ids) {
		t.Errorf("the queue holds %q with ids %q; want %q with the ids printed, %q", data, gotIDs, want, ids)
	}
}

// TestQueuePutOversizeLineFailsAlone: a line over the size limit of an
// item is not put, and says so with the limit; the lines around it are
// put, in order, a line of exactly the limit among them; zklock exits 1.
func TestQueuePutOversizeLineFailsAlone(t *testing.T) {
	t.Parallel()
	addr := zktest.Start(t).Addr()
	limit := zkrecipes.MaxDataSize
	exact := strings.Repeat("y", limit)
	input := "a\n" + strings.Repeat("x", limit+1) + "\nb\r\n" + exact + "\nc"
	want := []string{"a", "b", exact, "c"}

	for _, asJSON := range []bool{false, true} {
		path := lockPath(t)
		ctx, q := openQueue(t, addr, path)
		args := []string{"queue", "put", path}
		if asJSON {
			args = []string{"queue", "put", "-json", path}
		}
		cmd := zklockCmd(t, addr, args...)
		cmd.Stdin = strings.NewReader(input)
		if got := status(t, cmd); got != exitFailure {
			t.Fatalf("%q: exit status %d, want %d; stderr:\n%s", args, got, exitFailure, stderr(cmd))
		}
		for _, w := range []string{"line 2: " + strconv.Itoa(limit+1) + " bytes", "limit of " + strconv.Itoa(limit) + " bytes", "1 of 5 items not put"} {
			if !strings.Contains(stderr(cmd), w) {
				t.Errorf("%q: stderr does not say %q:\n%s", args, w, stderr(cmd))
			}
		}
		var printed []string
		if asJSON {
			var out jsonPut
			if err := json.Unmarshal(bytes.TrimSpace([]byte(stdout(cmd))), &out); err != nil {
				t.Fatalf("%q: %v: %s", args, err, stdout(cmd))
			}
			if len(out.Failed) != 1 || out.Failed[0].Line != 2 || out.Failed[0].Size != limit+1 || !strings.Contains(out.Failed[0].Error, strconv.Itoa(limit)) {
				t.Errorf("%q: failed %+v, want line 2, %d bytes, the limit named", args, out.Failed, limit+1)
			}
			printed = out.IDs
		} else {
			printed = strings.Fields(stdout(cmd))
		}
		ids, data := drainQueue(t, ctx, q)
		if len(data) != len(want) || fmt.Sprint(ids) != fmt.Sprint(printed) {
			t.Fatalf("%q: the queue holds %d items %q, printed %q; want %d", args, len(data), ids, printed, len(want))
		}
		for i := range want {
			if data[i] != want[i] {
				t.Errorf("%q: item %d has %d bytes (%.10q...), want %d (%.10q...)", args, i, len(data[i]), data[i], len(want[i]), want[i])
			}
		}
	}
}
