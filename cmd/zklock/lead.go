package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/zkrecipes/zkrecipes"
	"github.com/zkrecipes/zkrecipes/zklock"
)

// lead is `zklock lead`: campaign in the election at PATH, and run CMD while
// leader.
func (c *cli) lead(args []string) (int, error) {
	fs := c.flagSet("lead")
	value := fs.String("value", "", "`text` stored in the contender's node, shown by leader and holders to anyone who may read PATH (default: host and pid; never CMD, which may carry a secret)")
	h, err := c.parseHeld(fs, args, "lead", "lead [-timeout D] [-value S] [-grace D] PATH [-- CMD [ARGS...]]",
		"leadership", "give up (exit 73) if not elected leader within `D`; 0 waits forever")
	if err != nil {
		return exitUsage, err
	}
	if *value == "" {
		*value = defaultData()
	}
	h.what = "leadership of " + h.path
	h.use = lineUse("lead", kindElection, true)
	h.take = func(ctx context.Context, s *zkrecipes.Session) (*zklock.Lease, func(context.Context) error, error) {
		el, err := zklock.NewElection(s, h.path)
		if err != nil {
			return nil, nil, err
		}
		l, err := el.Campaign(ctx, []byte(*value))
		if err != nil {
			return nil, nil, err
		}
		return l.Lease, l.Resign, nil
	}
	return c.hold(h)
}

// leader is `zklock leader`: print the election's leader.
func (c *cli) leader(args []string) (int, error) {
	c.listing = true
	path, err := c.onePath("leader", args)
	if err != nil {
		return exitUsage, err
	}

	ctx, el, done, err := openUntilSignal(c, path, lineUse("leader", kindElection, false), zklock.NewElection)
	if err != nil {
		return failed(err)
	}
	defer done()
	l, err := el.Leader(ctx)
	switch {
	case errors.Is(err, zklock.ErrNoLeader) && c.json:
		return c.printJSON(exitNoLeader, jsonLeader{Path: path})
	case errors.Is(err, zklock.ErrNoLeader):
		fmt.Fprintf(c.stdout, "%s: no leader\n", path)
		return exitNoLeader, nil
	case err != nil:
		return exitFailure, err
	case c.json:
		v := newJSONData(l.Value)
		return c.printJSON(exitOK, jsonLeader{Path: path, Leader: &jsonLeaderNode{
			Path: l.Path, Session: sessionID(l.SessionID), Token: l.Token, Value: v.Data, Base64: v.Base64}})
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSESSION\tTOKEN\tVALUE")
	fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", l.Path, sessionID(l.SessionID), l.Token, printable(l.Value))
	tw.Flush()
	return exitOK, nil
}
