package owner

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/zkrecipes/zkrecipes/internal/znode"
)

// ErrNotSent marks a multi that the owner refused to send: the holding (or
// the section it was asked for) had ended, or a release was under way.
var ErrNotSent = errors.New("not sent")

// Multi sends ops in one multi behind a check of the node's version, as
// the holder: first in line after the requests handed over before it, only
// while the holding (a cached holding's section sec, when not nil) holds.
// It is not sent if ctx has ended. Once sent, its outcome is awaited by the
// owner whatever becomes of ctx, and nothing the holder asks later (an
// Unlock) is done before it is known; ctx bounds only the caller's wait.
//
// Its error is the multi's own (znode.MultiErr tells which op failed), a
// connection error (the outcome is unknown: it may have landed), or one
// wrapping ErrNotSent. When the check failed, the node is looked at again:
// the holding is then found lost, and says so through Done.
func (o *Owner) Multi(ctx context.Context, sec *Section, ops []any) ([]zk.MultiResponse, error) {
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	r := &request{ctx: ctx, ops: ops, sec: sec, reply: make(chan error, 1)}
	if !o.handOver(r) {
		return nil, o.notSent(sec)
	}
	err, answered := o.await(ctx, r, nil)
	if !answered {
		return nil, err
	}
	return r.res, err // set before the answer
}

// notSent is the error of a multi refused because sec (or, with no
// section, the holding) has ended.
func (o *Owner) notSent(sec *Section) error {
	err := o.Err()
	if sec != nil {
		err = sec.Err()
	}
	if err == nil {
		err = o.released
	}
	return fmt.Errorf("%w: %w", ErrNotSent, err)
}

// doMulti sends a multi request (its ctx still waits) and answers it.
func (o *Owner) doMulti(w *request) {
	if w.sec != nil && (o.cache == nil || o.cache.sec != w.sec) {
		w.reply <- o.notSent(w.sec)
		return
	}
	ops := append([]any{&zk.CheckVersionRequest{Path: o.path, Version: o.version.Load()}}, w.ops...)
	res, err := o.s.Conn().Multi(ops...)
	if i, _ := znode.MultiErr(res, err); i == 0 {
		// The node is not as the holder left it: deleted, written by a
		// stranger, or gone with the session. Look.
		o.look = true
	}
	w.res = res
	w.reply <- err
}
